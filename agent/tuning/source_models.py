"""The history's source models kept current: read and fitted once, then looked up by every study.

:func:`history_sources` is how a study reads its sources: a historical dataset whose studies are
unchanged since it was stored (same :func:`study_stamp`) comes from ``models_dir/source_models.jsonl``
without reading a trial; the rest are read from the tracking store and stored. :func:`fit_missing`
fits the GPs the store lacks, with a progress line, before a surrogate is prepared.
:func:`update_source_models` brings the file up to date for one job's history — every source's GP,
its signal check and the portfolios a new dataset's study starts from — and is what
``tune-agent meta source-models`` (the ``source-models`` DVC stage), ``bootstrap starter`` and
the end of every study run; after it, a study on a new dataset fits no source GP at all.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import StudyRecord
from agent.surrogates.contract import SurrogateInputs
from agent.surrogates.source_fits import MIN_SOURCE_POINTS, SourceFits, SourceTask, source_task, source_tasks
from agent.surrogates.source_store import SourceModelStore
from agent.tuning.ticker import Ticker

Progress = Callable[[str], None]
# Source GPs are fitted on every core when each would get at least this many (a worker's start,
# importing torch and BoTorch, costs about as much as fitting ten).
PARALLEL_FITS_FROM = 16
# Sources a transfer surrogate attends to at most: each costs a GP in every RGPE suggestion and in
# the portfolio; beyond this (the starter history has 239) the most relevant are kept (bench sources).
MAX_SOURCES = 256


def study_stamp(studies: Sequence[StudyRecord]) -> str | None:
    """What a historical dataset's stored data depends on: its studies' ids, states and best
    values. None while one of them runs (its trials are still coming)."""
    if any(s.status == "running" for s in studies):
        return None
    rows = sorted((s.study_id, s.status, repr(s.best_value)) for s in studies)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:20]


def history_sources(
    kb: KnowledgeBase,
    job_name: str,
    space: Any,
    exclude_fingerprint: str | None,
    store: SourceModelStore | None = None,
    progress: Progress | None = None,
    studies: list[StudyRecord] | None = None,
    attend: Collection[str] | None = None,
) -> list[SourceTask]:
    """The sources of this job and space (:func:`agent.surrogates.source_fits.source_tasks`, sorted by
    name), unchanged ones from ``store``; when there are none, those of the other job/space sharing
    the most hyperparameters (translated, read from the tracking store). With ``attend`` (dataset
    keys) only those are read: the records of the rest are not parsed."""
    from agent.knowledge.history import compatible_history, group_studies, load_history

    listed = studies if studies is not None else kb.study_index()
    groups = {
        key: group
        for key, group in group_studies(listed, job_name, space.signature()).items()
        if group[0].fingerprint != exclude_fingerprint
    }
    if not groups:
        history, match, _ = compatible_history(
            kb, space, with_samples=False, exclude_fingerprints={exclude_fingerprint or ""}, studies=listed
        )
        return source_tasks(history, space, match) if match is not None else []
    if attend is not None:
        groups = {key: group for key, group in groups.items() if key in attend}
    found: list[SourceTask] = []
    todo: list[tuple[list[StudyRecord], str | None]] = []
    for key, group in groups.items():
        stamp = study_stamp(group) if store is not None else None
        task = store.source(key, stamp) if store is not None and stamp is not None else None
        if task is not None:
            found.append(task)
        else:
            todo.append((group, stamp))
    if todo and progress is not None and store is not None and len(todo) > 1:
        progress(f"history: reading {len(todo)} of {len(groups)} datasets' trials (new since {store.path} was updated)")
    ticker = Ticker(progress if store is not None else None, "datasets read", len(todo))
    for i, (group, stamp) in enumerate(todo):
        loaded = load_history(kb, job=job_name, space_signature=space.signature(), with_samples=False, studies=group)
        # a dataset without a finished trial is stored too (empty), so it is not read again
        task = (
            source_task(loaded[0], space)
            if loaded
            else SourceTask(
                f"{group[0].fingerprint}/{group[0].job}/{group[0].space_signature}",
                group[0].dataset,
                np.empty((0, space.dim)),
                np.empty(0),
            )
        )
        found.append(task)
        if store is not None and stamp is not None:
            store.add_source(task, stamp)
        ticker.tick(i + 1)
    return sorted((t for t in found if len(t.y) >= MIN_SOURCE_POINTS), key=lambda t: (t.name, t.key))


def fit_missing(
    fits: SourceFits, sources: Sequence[SourceTask], inputs: SurrogateInputs, progress: Progress | None = None
) -> int:
    """Fits (and stores) the GPs of ``sources`` the store lacks; says so when there are any."""
    missing = fits.missing(sources, inputs)
    if not missing:
        return 0
    where = fits.store.path if fits.store is not None else "memory"
    if progress is not None and len(missing) > 1:
        progress(
            f"source models: fitting {len(missing)} source GPs ({len(sources)} sources) not in {where} "
            "(once: `tune-agent meta source-models` or `dvc repro` builds them ahead)"
        )
    ticker = Ticker(progress, "source GPs fitted", len(missing))
    workers = min(cores(), len(missing) // PARALLEL_FITS_FROM)
    if workers > 1:
        fits.fit_many(missing, inputs, workers, ticker.tick)
        return len(missing)
    for i, source in enumerate(missing):
        fits.gp(source, inputs)
        ticker.tick(i + 1)
    return len(missing)


def cores() -> int:
    """The cores this process may run on."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def most_relevant(
    sources: list[SourceTask],
    ranked: Sequence[str],
    fits: SourceFits,
    space: Any,
    kernel: str,
    progress: Progress | None = None,
) -> list[SourceTask]:
    """The :data:`MAX_SOURCES` sources a surrogate attends to when the history holds more: the first
    in ``ranked`` (the warm start's keys, nearest by meta-features first) or, without a ranking (a
    benchmark task has no data for meta-features), those whose own surfaces are the most
    predictable (the signal check's R², stored with the source models). Sorted by name."""
    if len(sources) <= MAX_SOURCES:
        return list(sources)
    if ranked:
        order = {key: i for i, key in enumerate(ranked)}
        keep, why = (
            sorted(sources, key=lambda s: order.get(s.key, len(order)))[:MAX_SOURCES],
            "nearest by meta-features",
        )
    else:
        inputs = SurrogateInputs(space, tuple(sources), fits=fits, kernel=kernel)
        fit_missing(fits, sources, inputs, progress)
        signal = {s.key: fits.verdict(s, inputs)[1] for s in sources}
        keep = sorted(sources, key=lambda s: -signal[s.key] if np.isfinite(signal[s.key]) else np.inf)[:MAX_SOURCES]
        why = "with the most predictable surfaces"
    if progress is not None:
        progress(f"history: {len(sources)} source datasets; the surrogate attends to the {MAX_SOURCES} {why}")
    return sorted(keep, key=lambda s: (s.name, s.key))


def sources_used(surrogate: str, inputs: SurrogateInputs) -> list[SourceTask]:
    """The sources whose GPs preparing ``surrogate`` needs: all of them, except for ``gp`` with a
    constant or the meta-feature neighbours' prior mean."""
    if (
        surrogate != "gp"
        or inputs.prior_mean == "observations"
        or (inputs.prior_mean == "neighbours" and not inputs.neighbour_keys)
    ):
        return list(inputs.sources)
    if inputs.prior_mean == "neighbours":
        return [s for s in inputs.sources if s.key in set(inputs.neighbour_keys)]
    return []


class BenchSourceStore(SourceModelStore):
    """The source-model file as a benchmark's histories use it: source GPs and portfolios as for any
    study, and each source's data keyed by its dataset key alone. A benchmark re-makes its history
    in memory for every run, so the same studies get new ids (the stamps a study checks); their
    trials never change, so the data stored once serve every run, as the file serves a study of the
    product whose history did not change."""

    def source(self, key: str, stamp: str) -> SourceTask | None:
        self._load()
        stored = next((s for k, s in self._sources if k == key), None)
        return None if stored is None else super().source(key, stored)

    def add_source(self, task: SourceTask, stamp: str) -> None:
        self._load()
        if not any(k == task.key for k, _ in self._sources):
            super().add_source(task, "benchmark")


def stored_fits(models_dir: Path | str) -> SourceFits:
    """What a benchmark's study reads source models from: :class:`BenchSourceStore` over ``models_dir``."""
    return SourceFits(BenchSourceStore(models_dir))


def update_source_models(
    kb: KnowledgeBase,
    models_dir: Path | str,
    job_name: str,
    space: Any,
    kernel: str = "plain",
    progress: Progress | None = None,
    store: SourceModelStore | None = None,
) -> dict[str, Any]:
    """Brings ``models_dir/source_models.jsonl`` up to date with the history of ``job_name`` in
    ``space``: every source's data and GP, and the portfolios a study on a dataset new to the
    history starts from (``portfolio_gp``'s, and the transfer surrogates' over the sources that
    pass the signal check). Returns counts and seconds. ``store``: the file's reader and writer
    (default: ``SourceModelStore(models_dir)``)."""
    start = time.perf_counter()
    store = store if store is not None else SourceModelStore(models_dir)
    fits = SourceFits(store)
    sources = history_sources(kb, job_name, space, None, store, progress)
    build_source_models(fits, sources, space, kernel, models_dir, progress)
    return {
        "sources": len(sources),
        "fitted": fits.fitted,
        "file": str(store.path),
        "seconds": round(time.perf_counter() - start, 1),
        **({"not_written": store.write_error} if store.write_error else {}),
    }


def build_source_models(
    fits: SourceFits,
    sources: Sequence[SourceTask],
    space: Any,
    kernel: str,
    models_dir: Path | str = "models",
    progress: Progress | None = None,
) -> None:
    """What a study on a dataset new to the history loads instead of computing, into ``fits``
    (and its store): every source's GP and signal check, ``portfolio_gp``'s portfolio and the
    transfer surrogates' start over the sources that pass the check."""
    from agent.surrogates.specs import PORTFOLIO_SIZE, portfolio

    inputs = SurrogateInputs(space, tuple(sources), Path(models_dir), fits=fits, kernel=kernel)
    fit_missing(fits, sources, inputs, progress)
    attended = most_relevant(list(sources), (), fits, space, kernel)  # a new dataset's sources without meta-features
    if attended:
        inputs = SurrogateInputs(space, tuple(attended), Path(models_dir), fits=fits, kernel=kernel)
        portfolio(inputs, attended, PORTFOLIO_SIZE)
        useful = fits.informative(attended, inputs)
        if useful:
            portfolio(inputs, useful, 1)


def build_history_models(kb: KnowledgeBase, job_name: str, space: Any, fits: SourceFits) -> float:
    """:func:`build_source_models` for the whole history of ``job_name`` in ``space`` in ``kb``, into
    ``fits``, with the kernel a study of the space gets; returns the seconds it took (a benchmark's
    cell, before its studies, as ``meta publish`` builds them for the product)."""
    from agent.surrogates.arc import resolve_kernel

    start = time.perf_counter()
    build_source_models(fits, history_sources(kb, job_name, space, None), space, resolve_kernel("auto", space))
    return time.perf_counter() - start


def history_revision(kb: KnowledgeBase, job_name: str, space: Any) -> str:
    """A digest of the ended studies of ``job_name`` in ``space``: the history a published version covers."""
    from agent.knowledge.history import group_studies

    studies = [s for group in group_studies(kb.study_index(), job_name, space.signature()).values() for s in group]
    return study_stamp([s for s in studies if s.status != "running"]) or "empty"


def update_for_job(
    kb: KnowledgeBase, models_dir: Path | str, job_spec: str, progress: Progress | None = None, publish: bool = True
) -> dict[str, Any]:
    """:func:`update_source_models` for the history of job ``job_spec`` (its space, the kernel a
    study of it gets by default), starting from what the store already published, then (with
    ``publish``) a new published version of the job's meta-models when anything changed
    (:func:`agent.tuning.published.publish_version`)."""
    from agent.errors import StoreError
    from agent.jobs import load_job
    from agent.surrogates.arc import resolve_kernel
    from agent.tuning.published import ENGINE, open_source_models, publish_version, scope_of

    job = load_job(job_spec)
    if progress is not None:
        progress(f"source models of job {job.name}: reading the history in {kb.tracking_uri}")
    store = open_source_models(kb, models_dir, job.name, job.space, progress)
    done = {
        "job": job.name,
        **update_source_models(
            kb, models_dir, job.name, job.space, resolve_kernel("auto", job.space), progress, store=store
        ),
    }
    if not publish:
        return done
    revision = history_revision(kb, job.name, job.space)
    try:
        current = kb.current_meta_models(scope_of(job.name, job.space))
        if (
            current is not None
            and not store.added
            and current.engine == ENGINE
            and current.revision == revision
            and not _local_files_newer(models_dir, current)
        ):
            done["published"] = current.version  # the store's current version covers this history
        else:
            done["published"] = publish_version(kb, store, models_dir, job.name, job.space, revision, progress).version
    except StoreError as exc:
        done["not_published"] = str(exc)
        if progress is not None:
            progress(f"meta-models not published to {kb.tracking_uri}: {exc}")
    return done


def _local_files_newer(models_dir: Path | str, current: Any) -> bool:
    """Whether ``models_dir`` holds a whole meta-model file written after version ``current``."""
    from agent.tuning.published import META_FILES

    for name in META_FILES:
        path = Path(models_dir) / name
        if path.is_file() and path.stat().st_mtime * 1000 > current.created:
            return True
    return False


def coverage(studies: Sequence[StudyRecord], models_dir: Path | str, published: Sequence[Path] = ()) -> tuple[int, int]:
    """(historical datasets whose data and GP are stored in ``models_dir`` or the ``published``
    chunks, all of them): what ``doctor`` reports. A dataset with too few trials to be a source
    counts as stored once read."""
    from agent.knowledge.history import group_studies

    store = SourceModelStore(models_dir, published)
    groups = group_studies(list(studies))
    stored = 0
    for key, group in groups.items():
        stamp = study_stamp(group)
        task = store.source(key, stamp) if stamp is not None else None
        if task is not None and (
            len(task.y) < MIN_SOURCE_POINTS
            or any(store.fit(task.digest, kernel) is not None for kernel in ("plain", "arc"))
        ):
            stored += 1
    return stored, len(groups)


def transplanted_source_models(
    kb: KnowledgeBase, models: Path | str, job_name: str, space: Any, kernel: str = "plain"
) -> int:
    """Source models for a benchmark history too large to fit here (``bench sources``): sources are
    named ``<id>-<task>``; each task's first source is fitted and its hyperparameters stored for every
    source of that task, with each source's own signal check (its R² under those hyperparameters).
    What a study loads is the same kind of record a fit stores; only how the hyperparameters were
    found differs. Returns the number of fits."""
    from agent.surrogates.gp import gp_state
    from agent.surrogates.gp_stack import stack_summary
    from agent.surrogates.source_gp import SIGNAL_MIN_R2, restore_source_gp, source_signal

    store = SourceModelStore(models)
    sources = history_sources(kb, job_name, space, None, store)
    fits = SourceFits(store)
    inputs = SurrogateInputs(space, (), Path(models), fits=fits, kernel=kernel)
    templates: dict[str, dict[str, Any]] = {}
    for source in sources:
        task = source.name.split("-", 1)[1]
        if task not in templates:
            templates[task] = gp_state(fits.gp(source, inputs)[0])
            continue
        if store.fit(source.digest, kernel) is None:
            restored = restore_source_gp(source.U, source.y, templates[task], covar=inputs.covar)
            r2 = source_signal(restored)
            store.add_fit(source.digest, kernel, templates[task], r2 >= SIGNAL_MIN_R2, r2, stack_summary(restored))
    return fits.fitted
