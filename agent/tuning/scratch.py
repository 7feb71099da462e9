"""Where a trial's checkpoint lies between its runs (the study's scratch), and what it was trained with.

The Lightning side (the callbacks that write the checkpoint, resuming from it) is
:mod:`agent.execution.checkpoints`; this module is what a study needs to know about it: a slot
whose killed trial left a checkpoint is asked again with that trial's configuration
(:meth:`agent.tuning.study.Study.ask`), so its re-run continues where it stopped.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

CHECKPOINT = "last.ckpt"
DESCRIPTION = "trial.json"


def scratch_root(artifact_root: str | None) -> Path:
    """The folder that holds every study's trial scratch for a store whose artifact root is
    ``artifact_root`` (a local path or ``file:`` URI; anything else, or None, uses the temporary folder)."""
    local = None
    if artifact_root:
        parsed = urlparse(str(artifact_root))
        if parsed.scheme == "file":
            local = Path(parsed.path)
        elif parsed.scheme == "" or len(parsed.scheme) == 1:  # a plain path (a Windows drive letter too)
            local = Path(str(artifact_root))
    return (local if local is not None else Path(tempfile.gettempdir()) / "tune-agent") / "scratch"


def trial_scratch(kb: Any, study_id: str, number: int) -> Path:
    """The scratch folder of trial slot ``number`` (from 0) of study ``study_id`` in store ``kb``."""
    return scratch_root(getattr(kb, "artifact_root", None)) / study_id / f"trial-{number + 1}"


def description(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """What ``trial.json`` holds (JSON-shaped): the configuration and seed a checkpoint was trained with."""
    return json.loads(json.dumps({"config": dict(config), "seed": int(seed)}, sort_keys=True, default=str))


def checkpointed_config(folder: Path) -> dict[str, Any] | None:
    """The configuration of the checkpoint in ``folder``, None when there is none."""
    if not (folder / CHECKPOINT).is_file():
        return None
    try:
        return dict(json.loads((folder / DESCRIPTION).read_text())["config"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear(folder: Path) -> None:
    """Removes a trial's scratch folder (and its study's, once empty)."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        folder.parent.rmdir()
    except OSError:
        pass
