"""A per-user cache of a tracking store's ended study runs, kept consistent through a version tag.

The warm start lists every study of the store (one search over all study runs, each with ~50
params and tags). On a team server with 157 studies and 10,000 trial runs that one search was
0.84 s of the 1.1-1.4 s lookup. Ended studies rarely change, so they are cached here, per
experiment, under the experiment's ``tune_agent.studies_version`` tag:

- every write of tune-agent that ends a study or changes an ended study's record (``update_study``
  with an end status, ``set_study_tags``, an import) logs the time of the change on the study run
  (the metric :data:`CHANGED_METRIC`, with the write or right after it) and then sets that tag to a
  new random value;
- a reader takes the tag *before* it searches, so a write it may have missed always leaves a tag
  that differs from the one its cache was saved under;
- a reader whose tag differs reads again only what changed: the ended studies whose change time
  is at or after the newest one it holds, less :data:`SLACK_MS` (writers' clocks may differ), and
  the studies it held as running that run no longer. On an embedded store it compares those change
  times with the ones it holds and reads only the runs that differ. A history of thousands of studies is read
  whole only when there is no cache, when the cache holds no change time (a store written before
  the metric), and once every :data:`FULL_EVERY_S` seconds;
- running studies are never cached: every listing reads them fresh, and a fresh record wins over
  a cached one (a resumed study).

The same protocol keeps a second, light file per store and experiment: the study index
(:meth:`agent.knowledge.base.KnowledgeBase.study_index`), each study reduced to what choosing a
history's sources reads (:func:`agent.knowledge.layout.light_row`: name, job, space, fingerprint,
status, best value, metric, mode, the dataset's source and kind, the parsed meta-features), about a
tenth of the whole row. A start ranks thousands of historical datasets on it and reads the whole
records and trials of the few it seeds from.

Runs changed outside tune-agent (a tag edited or a run deleted in the MLflow UI) are seen at the
next whole read, within a day; ``TUNE_AGENT_STUDY_CACHE=0`` turns the cache off. Files live under
``$XDG_CACHE_HOME/tune-agent/studies`` (``~/.cache``), two per store, experiment and Python (in
:mod:`marshal`'s format), written atomically; a cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VERSION_TAG = "tune_agent.studies_version"
CHANGED_METRIC = "tune_agent.changed_at"  # milliseconds since the epoch, by the writer's clock
SLACK_MS = 5 * 60 * 1000  # how far writers' clocks may lag the newest change a reader holds
FULL_EVERY_S = 24 * 3600  # a reader reads every study again at least this often
FORMAT = 2


def enabled() -> bool:
    return os.environ.get("TUNE_AGENT_STUDY_CACHE", "1") != "0"


def user_cache_dir() -> Path:
    """tune-agent's per-user cache: ``$XDG_CACHE_HOME/tune-agent`` (``~/.cache/tune-agent``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tune-agent"


def _folder() -> Path:
    return user_cache_dir() / "studies"


def _path(store_key: str, experiment_id: str, created: int, light: bool) -> Path:
    # marshal's format is this interpreter's: another Python keeps a file of its own
    digest = hashlib.sha256(f"{store_key}\n{experiment_id}\n{created}\n{sys.version}".encode()).hexdigest()[:24]
    return _folder() / f"{digest}{'.light' if light else ''}.marshal"


def load(store_key: str, experiment_id: str, created: int, light: bool = False) -> dict[str, Any] | None:
    """``{"version", "ended": [run rows], "running": [run ids], "watermark", "full_at"}`` as last
    saved (``light``: the study index's rows), or None (absent, unreadable, another format)."""
    try:
        data = marshal.loads(_path(store_key, experiment_id, created, light).read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("version"), str):
        return None
    if not isinstance(data.get("ended"), list) or not isinstance(data.get("running"), list):
        return None
    return data


def changed_since(entry: dict[str, Any] | None) -> int | None:
    """The change time (ms) from which a reader holding ``entry`` reads the ended studies again,
    or None when it reads them all (no entry, no change time held, the last whole read too old)."""
    if entry is None or not isinstance(entry.get("watermark"), int) or not isinstance(entry.get("full_at"), float):
        return None
    if not 0 <= time.time() - entry["full_at"] < FULL_EVERY_S:
        return None
    return int(entry["watermark"]) - SLACK_MS


def watermark(rows: list[dict[str, Any]]) -> int | None:
    """The newest change time among ``rows`` (never ahead of this reader's clock), or None."""
    times = [r["changed"] for r in rows if isinstance(r.get("changed"), int)]
    return min(max(times), int(time.time() * 1000)) if times else None


def save(
    store_key: str, experiment_id: str, created: int, version: str, entry: dict[str, Any], light: bool = False
) -> None:
    """Keeps ``entry`` (``ended``: the ended studies' rows, ``running``: the ids of the running
    ones, ``full_at``: when the rows were last read whole) for ``version``; does nothing where it
    cannot write."""
    # marshal, not JSON: plain strings, numbers, lists and dicts, written and read several times
    # faster on the thousands of rows of a large history
    entry = {"format": FORMAT, "version": version, "watermark": watermark(entry["ended"]), **entry}
    write_cache_file(_path(store_key, experiment_id, created, light), marshal.dumps(entry))


def write_cache_file(path: Path, data: bytes) -> None:
    """``data`` as the cache file ``path``, written atomically; nothing where it cannot be written."""
    partial = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=".partial-", delete=False) as f:
            partial = f.name
            f.write(data)
        os.replace(partial, path)
    except OSError:
        if partial is not None:
            Path(partial).unlink(missing_ok=True)
