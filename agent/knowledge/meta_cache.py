"""The per-user cache of published meta-models: fetched from the tracking store once, then read locally.

A version of a scope's meta-models (:class:`~agent.knowledge.base.MetaModelsRecord`) lives in
``<cache>/<store>/<version id>/``: ``<cache>`` is ``TUNE_AGENT_CACHE``, else
``$XDG_CACHE_HOME/tune-agent``, else ``~/.cache/tune-agent``; ``<store>`` a digest of the
tracking store's address, so two stores never share files. Published files never change under
their name (source-model chunks are named by their content's digest), so a file fetched once is
fetched never again; ``manifest.json`` keeps each file's digest, size and modification time, and
a file whose size or time changed and whose bytes no longer match the digest is said to be corrupt
and fetched again. A cache folder that is not the user's own
(another owner, or writable by others) is not trusted: the command says so and uses a private
temporary folder instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import MetaModelsRecord

Progress = Callable[[str], None]
ENV = "TUNE_AGENT_CACHE"
MANIFEST = "manifest.json"
CHUNKS = "source_models/"


@dataclass(frozen=True)
class Fetched:
    """A scope's current version as fetched: where its files lie (``folder/<name>``), or nothing."""

    record: MetaModelsRecord | None
    folder: Path | None = None
    files: tuple[str, ...] = ()

    def paths(self, prefix: str) -> list[Path]:
        """The local copies of the version's files whose names start with ``prefix``."""
        if self.folder is None:
            return []
        return [self.folder / name for name in self.files if name.startswith(prefix)]


def default_root() -> Path:
    from agent.knowledge.study_cache import user_cache_dir

    return Path(os.environ[ENV]).expanduser() if os.environ.get(ENV) else user_cache_dir()


def cache_root(progress: Progress | None = None) -> Path:
    """The cache folder, made private (0700) when new; one that is not this user's own is said
    and replaced by a private temporary folder for this process."""
    root = default_root()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = root.stat()
        problem = None
        if info.st_uid != os.getuid():
            problem = f"is owned by uid {info.st_uid}, not this user ({os.getuid()})"
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            problem = "is writable by other users"
    except OSError as exc:
        problem = f"cannot be used ({exc.strerror or exc})"
    if problem is None:
        return root
    private = Path(tempfile.mkdtemp(prefix="tune-agent-cache-"))
    if progress is not None:
        progress(
            f"meta-model cache {root} {problem}: not trusted; using {private} for this command "
            f"(set {ENV} to a folder of your own)"
        )
    return private


def store_folder(kb: KnowledgeBase, root: Path) -> Path:
    return root / hashlib.sha256(kb.tracking_uri.encode()).hexdigest()[:16]


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def chunk_name(blob: bytes) -> str:
    """The artifact name of a chunk of source-model records: named by its content."""
    return f"{CHUNKS}{hashlib.sha256(blob).hexdigest()[:16]}.jsonl"


def _named_right(name: str, sha: str) -> bool:
    return not name.startswith(CHUNKS) or name == f"{CHUNKS}{sha[:16]}.jsonl"


def fetch(kb: KnowledgeBase, scope: str, progress: Progress | None = None) -> Fetched:
    """The current version of ``scope``'s meta-models, its missing or damaged files fetched into
    the cache. A store that cannot say is one line and an empty result, never an error: the study
    then builds what it needs itself."""
    say = progress or (lambda _line: None)
    try:
        record = kb.current_meta_models(scope)
    except StoreError as exc:
        say(f"meta-models: the store's could not be read ({exc}); what is missing is built here")
        return Fetched(None)
    if record is None:
        return Fetched(None)
    folder = store_folder(kb, cache_root(progress)) / record.record_id
    manifest = _read_manifest(folder)
    kept: list[str] = []
    todo: list[str] = []
    restamped = False  # a file found whole by its hash gets its size and time kept, to be hashed no more
    for name in record.files:
        path = folder / name
        if name in manifest and path.is_file():
            held = _intact(path, manifest[name])
            if held is not None:
                restamped = restamped or held != manifest[name]
                manifest[name] = held
                kept.append(name)
                continue
            say(f"meta-model cache: {path} is corrupt; fetching it again")
        todo.append(name)
    if todo and kept:  # the version grew (a study's end adds a chunk): only what is new is fetched
        say(f"meta-models: fetching {len(todo)} new file(s) of version {record.version} of {scope} into {folder}")
    elif todo:
        say(
            f"meta-models: fetching version {record.version} of {scope} ({len(todo)} file(s)) from {kb.tracking_uri} "
            f"into {folder} (once)"
        )
    for name in todo:
        path = folder / name
        try:
            kb.fetch_meta_model_file(record, name, path)
        except (StoreError, OSError) as exc:
            say(
                f"meta-models: {name} of version {record.version} could not be fetched ({exc}); "
                "what it holds is built here"
            )
            continue
        sha = digest(path)
        if not _named_right(name, sha):
            path.unlink(missing_ok=True)
            say(
                f"meta-models: the store's {name} of version {record.version} is corrupt (its content does not "
                "match its name); left out, what it holds is built here"
            )
            continue
        manifest[name] = {"sha": sha, **_stat(path)}
        kept.append(name)
    if todo or restamped:
        _write_manifest(folder, {n: manifest[n] for n in kept})
    return Fetched(record, folder, tuple(sorted(kept)))


def _stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _intact(path: Path, held: dict[str, Any]) -> dict[str, Any] | None:
    """A cached file's manifest entry when it is the one fetched, else None: the same size and
    modification time as when it was fetched (a version of thousands of sources is hundreds of
    megabytes, too much to hash at every start), else the same content hash (the entry then carries
    the file's size and time now)."""
    try:
        now = _stat(path)
    except OSError:
        return None
    if {k: held.get(k) for k in now} == now:
        return held
    return {"sha": held.get("sha"), **now} if digest(path) == held.get("sha") else None


def _read_manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """Each cached file's content hash (``sha``) and its size and modification time when fetched."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): v if isinstance(v, dict) else {"sha": str(v)} for k, v in data.items()}


def _write_manifest(folder: Path, manifest: dict[str, dict[str, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest-")
    with os.fdopen(fd, "w") as f:
        json.dump(manifest, f, sort_keys=True)
    os.replace(tmp, folder / MANIFEST)
