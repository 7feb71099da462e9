"""Which meta-features ``--warm-start auto`` uses for one job and search space: the verdict of an
evaluation of that scope's history (the ``evaluate`` stage, ``bench paper003-images``), written
beside the scope's meta-models and published with them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Written by the evaluate stage: which meta-features `--warm-start auto` uses on this history.
CHOICE_FILE = "warm_start.json"


def write_choice(folder: Path, choice: Mapping[str, Any], scope: str) -> Path:
    """The evaluation's verdict for one job and search space (``scope``: ``job/signature``) in
    ``folder``, beside the meta-models of that scope it is published with."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CHOICE_FILE
    path.write_text(json.dumps({**choice, "scope": scope}, indent=1) + "\n")
    return path


def evaluated_choice(models_dir: Path, scope: str | None = None) -> dict[str, Any] | None:
    """The evaluate stage's verdict in ``models_dir`` (``{"method": ..., "why": ...}``), if any and
    if it was reached on ``scope``'s history: evidence about one job and space decides nothing for
    another (a file without a scope applies to any)."""
    path = Path(models_dir) / CHOICE_FILE
    try:
        choice = json.loads(path.read_text()) if path.exists() else None
    except (OSError, ValueError):
        return None
    if not isinstance(choice, dict) or (scope is not None and choice.get("scope", scope) != scope):
        return None
    return choice


def choice_scope(models_dir: Path) -> str | None:
    """The scope whose history the choice in ``models_dir`` was reached on (None: no choice there,
    or one that does not say)."""
    try:
        choice = json.loads((Path(models_dir) / CHOICE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return str(choice["scope"]) if isinstance(choice, dict) and "scope" in choice else None
