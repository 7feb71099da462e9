"""Meta-models through the tracking store: fetched before a study plans, published as it ends.

What the history of one job and search space teaches (its *scope*) is built where ``bootstrap``
or ``dvc repro`` runs, into ``models/`` (DVC's working copy), and published to the tracking store
as a version (:meth:`~agent.knowledge.base.KnowledgeBase.publish_meta_models`): the source models
(every source's data, GP fit and signal check, and the portfolios) as one chunk of records, and
the extractor, its index, the TNP and the warm-start choice as whole files. A study in any folder,
of any teammate, reads the current version through the per-user cache
(:mod:`agent.knowledge.meta_cache`): fetched once, loaded from disk after that, never refitted.
A study that ends publishes what it added (its own source, new portfolios) as one more chunk of
the current version: chunks are named by their content, so studies ending at once never overwrite
each other.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.meta_cache import CHUNKS, Fetched, chunk_name, fetch
from agent.knowledge.records import MetaModelsRecord
from agent.surrogates.source_fits import FIT_REVISION
from agent.surrogates.source_store import FORMAT, SourceModelStore

Progress = Callable[[str], None]
ENGINE = f"{FORMAT}.{FIT_REVISION}"  # what a published version's records need to be read as they are
# Whole files of a version, as ``dvc repro`` writes them into models/
META_FILES = ("metafeature_extractor.pt", "metafeature_index.json", "tnp.pt", "tnp.json", "warm_start.json")


def scope_of(job_name: str, space: Any) -> str:
    return f"{job_name}/{space.signature()}"


FRESH_SECONDS = 30.0  # a study's preparation asks the store once, not once per meta-model it reads


def fetch_current(kb: KnowledgeBase, job_name: str, space: Any, progress: Progress | None = None) -> Fetched:
    """The scope's current version, fetched into the cache (asked of the store at most once per
    :data:`FRESH_SECONDS` per knowledge base); a version another engine built is said in one line
    (its records of another fit revision are refitted here, once)."""
    import time

    scope = scope_of(job_name, space)
    asked = kb.__dict__.setdefault("_meta_models_asked", {})
    if scope in asked and time.monotonic() - asked[scope][0] < FRESH_SECONDS:
        return asked[scope][1]
    fetched = fetch(kb, scope, progress)
    asked[scope] = (time.monotonic(), fetched)
    record = fetched.record
    if record is not None and record.engine != ENGINE and progress is not None:
        progress(
            f"meta-models: version {record.version} of {record.scope} was built by engine {record.engine or '?'} "
            f"(this is {ENGINE}): what still applies is used, the rest is fitted here and published"
        )
    return fetched


def open_source_models(
    kb: KnowledgeBase, models_dir: Path | str, job_name: str, space: Any, progress: Progress | None = None
) -> SourceModelStore:
    """The source models a study reads: the store's published ones (fetched on first read) and
    ``models_dir``'s own; what the study adds goes to ``models_dir`` and :attr:`SourceModelStore.added`."""

    def published() -> Sequence[Path]:
        return fetch_current(kb, job_name, space, progress).paths(CHUNKS)

    return SourceModelStore(models_dir, published)


def _forget(kb: KnowledgeBase, scope: str) -> None:
    """What :func:`fetch_current` remembers of ``scope``, dropped: this process published to it."""
    kb.__dict__.get("_meta_models_asked", {}).pop(scope, None)


def meta_models_dir(
    kb: KnowledgeBase, models_dir: Path | str, job_name: str, space: Any, progress: Progress | None = None
) -> Path:
    """Where a study reads whole meta-model files (extractor, index, TNP, warm-start choice):
    ``models_dir`` when it holds any of this scope (this folder's own ``dvc repro``; its warm-start
    choice names the scope it was built on), else the cached ``files/`` of the store's current
    version (fetched once), else ``models_dir`` (its ``<job>-<signature>/`` subfolder when its files
    are another scope's: nothing of one job's history is read for another)."""
    from agent.tuning.warm_choice import choice_scope

    local, scope = Path(models_dir), scope_of(job_name, space)
    ours = choice_scope(local) in (None, scope)
    if ours and any((local / name).is_file() for name in META_FILES):
        return local
    fetched = fetch_current(kb, job_name, space, progress)
    if fetched.folder is not None and fetched.paths("files/"):
        return fetched.folder / "files"
    return local if ours else local / scope.replace("/", "-")


def _blob(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n" for r in records).encode()


def publish_added(
    kb: KnowledgeBase, store: SourceModelStore, job_name: str, space: Any, revision: Callable[[], str]
) -> str | None:
    """Publishes what ``store`` holds and the store's current version lacks (what this process
    added, and what ``models_dir`` kept from earlier studies that could not publish) as one chunk
    of that version (its first version, covering history ``revision()``, when there is none). The
    line to say, or None when there was nothing to publish."""
    records = store.unpublished()
    if not records:
        return None
    blob = _blob(records)
    name = chunk_name(blob)
    scope = scope_of(job_name, space)
    with tempfile.TemporaryDirectory(prefix="tune-agent-chunk-") as tmp:
        path = Path(tmp) / name.rsplit("/", 1)[-1]
        path.write_bytes(blob)
        try:
            current = kb.current_meta_models(scope)
            if current is None or current.engine != ENGINE:
                current = kb.publish_meta_models(scope, ENGINE, revision(), {name: path})
            else:
                kb.add_meta_model_file(current, name, path)
            _forget(kb, scope)
        except StoreError as exc:
            return f"meta-models: {len(records)} record(s) not published ({exc}); kept in {store.path}"
    return f"meta-models: {len(records)} record(s) published to version {current.version} of {scope}"


def publish_version(
    kb: KnowledgeBase,
    store: SourceModelStore,
    models_dir: Path | str,
    job_name: str,
    space: Any,
    revision: str,
    progress: Progress | None = None,
) -> MetaModelsRecord:
    """A new version of the scope's meta-models covering history ``revision``: every source-model
    record ``store`` holds, as one chunk, and the whole files of :data:`META_FILES` found in
    ``models_dir``. Raises
    :class:`StoreError` where the store refuses (a READ user on a team server)."""
    blob = _blob(store.records())
    name = chunk_name(blob)
    with tempfile.TemporaryDirectory(prefix="tune-agent-publish-") as tmp:
        path = Path(tmp) / name.rsplit("/", 1)[-1]
        path.write_bytes(blob)
        files: dict[str, Path] = {name: path}
        files.update({f"files/{f}": Path(models_dir) / f for f in META_FILES if (Path(models_dir) / f).is_file()})
        record = kb.publish_meta_models(scope_of(job_name, space), ENGINE, revision, files)
    _forget(kb, record.scope)
    if progress is not None:
        progress(
            f"meta-models: version {record.version} of {record.scope} published to {kb.tracking_uri} "
            f"({len(files)} file(s), {len(blob) / 1e6:.1f} MB of source models)"
        )
    return record
