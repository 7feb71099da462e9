"""Where the MLflow store is: tracking URIs, the embedded sqlite file (made atomically from a schema
template), and whether a store or server can be reached."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from agent.errors import StoreError, StoreUnwritableError
from agent.knowledge import (
    DEFAULT_ARTIFACT_ROOT as DEFAULT_ARTIFACT_ROOT,
)  # the embedded store's, named by the interface
from agent.knowledge import study_cache

DEFAULT_TRACKING_URI = "sqlite:///mlflow/mlflow.db"
T = "tune_agent."  # tag prefix
SCHEMES = ("sqlite", "http", "https")  # what check_reachable accepts


def resolve_tracking_uri(uri: str | None) -> str:
    """``--tracking-uri`` beats ``MLFLOW_TRACKING_URI`` beats the embedded store."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


INLINE_TRIALS = "trials.json"  # imported evaluations, inline on their study run


def create_sqlite_store(path: Path) -> None:
    """Create an embedded store's database all at once, or not at all.

    MLflow builds a new sqlite store's ~40 tables over a few seconds; a process killed meanwhile
    left a file on which every later open failed (``table ... already exists``), and two processes
    opening one new store raced each other through the same migrations. Here the schema is built in
    a private file under an exclusive lock and moved into place with one ``os.replace``: the store
    either does not exist yet or is complete. A later opener waits for the lock.

    The schema comes from :func:`schema_template` when there is one (a copy takes milliseconds
    where the migrations take 1.5-4 s), with MLflow's ``Default`` experiment stamped as a fresh
    store would have it; otherwise every migration runs here.
    """
    if path.exists():  # the usual case: no template lookup (nor a first template build) for a store that is there
        return
    if path.parent == Path(DEFAULT_TRACKING_URI[len("sqlite:///") :]).parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)  # the embedded store's folder, in any folder a study starts in
    template = schema_template()
    try:
        if template is None:
            _build_atomically(path, _migrate)
        else:
            _build_atomically(path, lambda partial: _copy_template(template, partial))
    except OSError as exc:
        raise unwritable(f"cannot create the tracking store {path}", exc) from None


def unwritable(what: str, exc: OSError) -> StoreError:
    """``what`` failed with ``exc``: one line naming the cause (a full disk, a read-only file
    system, no permission), as the error the user can act on."""
    import errno

    causes = {
        errno.ENOSPC: "its disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EROFS: "its file system is read-only",
        errno.EACCES: "no permission to write there",
    }
    cause = causes.get(exc.errno or 0)
    if cause is None:
        return StoreError(f"{what}: {exc.strerror or type(exc).__name__}")
    return StoreUnwritableError(f"{what}: {cause} ({exc.strerror}); nothing was written")


def _build_atomically(path: Path, fill: Any) -> None:
    """``fill(partial)`` under ``path``'s lock, then ``partial`` renamed to ``path``."""
    import fcntl

    if path.exists():
        return
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():  # another process created it while this one waited
            return
        partial = path.with_name(f".{path.name}.creating-{os.getpid()}")
        partial.unlink(missing_ok=True)
        try:
            fill(partial)
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    path.with_name(path.name + ".lock").unlink(missing_ok=True)


def _migrate(partial: Path) -> None:
    import logging

    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    MlflowClient(f"sqlite:///{partial}").search_experiments(max_results=1)  # runs every migration
    _dispose_engine(f"sqlite:///{partial}")


def schema_template() -> Path | None:
    """An empty store with every migration of the installed MLflow, built once per user under
    ``$XDG_CACHE_HOME/tune-agent`` (``~/.cache``), atomically like any store; None when
    ``TUNE_AGENT_STORE_TEMPLATE=0`` or the cache cannot be written (the store is then migrated in place)."""
    if os.environ.get("TUNE_AGENT_STORE_TEMPLATE", "1") == "0":
        return None
    from importlib.metadata import version

    cache = study_cache.user_cache_dir()
    template = cache / f"mlflow-{version('mlflow')}-empty.db"
    try:
        if not template.exists():
            cache.mkdir(parents=True, exist_ok=True)
            _build_atomically(template, _migrate)
    except OSError:
        return None
    return template


def _copy_template(template: Path, partial: Path) -> None:
    """The template's bytes, with the ``Default`` experiment MLflow creates in a new store given
    this store's creation time and MLflow's default location (``./mlruns/0``)."""
    import shutil
    import sqlite3

    shutil.copyfile(template, partial)
    now = int(time.time() * 1000)
    with sqlite3.connect(partial) as db:
        db.execute(
            "UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
            "WHERE experiment_id = 0",
            (str(Path.cwd() / "mlruns" / "0"), now, now),
        )
    db.close()  # the context manager commits; closing is ours


def _dispose_engine(uri: str) -> None:
    """Close MLflow's cached connections to ``uri`` (best effort: an internal cache)."""
    try:
        from mlflow.tracking._tracking_service.utils import _get_store

        store = _get_store(uri)
        engine = getattr(store, "engine", None)
        if engine is not None:
            engine.dispose()
    except Exception:
        pass


def check_reachable(uri: str) -> None:
    """Raises :class:`StoreError` in one line when ``uri`` cannot serve requests."""
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        import requests

        try:
            requests.get(uri.rstrip("/") + "/health", timeout=5).raise_for_status()
        except requests.RequestException as exc:
            reason = type(exc).__name__
            raise StoreError(f"cannot reach tracking server {uri} ({reason})") from None
    elif scheme == "sqlite":
        path = _sqlite_path(uri)
        default = uri == DEFAULT_TRACKING_URI  # its folder is made with the store, wherever a study starts
        if path is None or (not default and path.parent != Path("") and not path.parent.exists()):
            raise StoreError(f"tracking store directory does not exist: {uri}")
    elif scheme == "file" or (scheme == "" and uri):
        raise StoreError(
            f"{uri} is a folder store (MLflow's file store, in maintenance mode): use a database, e.g. "
            f"--tracking-uri sqlite:///mlflow.db, or a tracking server's http:// address"
        )
    elif scheme not in SCHEMES:
        raise StoreError(
            f"unsupported tracking URI scheme {scheme!r} in {uri} (known: sqlite:///PATH.db, http://, "
            "https://, memory:)"
        )


def store_exists(uri: str) -> bool:
    """False only when ``uri`` is an embedded sqlite store whose file was never created."""
    path = _sqlite_path(uri)
    return path is None or path.exists()
