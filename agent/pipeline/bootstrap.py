"""`tune-agent bootstrap`: build a knowledge base from scratch on real data.

Runs one job over many datasets on one shared Sobol set of configurations: every dataset's study
uses the same seed and an initial design as large as its budget, so all datasets are evaluated at
exactly the same configurations (what paper 003's eq. 2 distance needs). The datasets are the
real R-package tables of :mod:`agent.data.rtables` (``rtables``: one source per R package, each
capped at a stratified sample of ``max_rows`` rows so no table dominates the wall time) and
derived datasets of the built-in sources (class subsets and stratified fractions, as paper 003
builds 80 datasets from 8). Each dataset is an ordinary study (``bootstrap-<job>-<dataset>``)
logged like any other, so the base is browsable in MLflow and an interrupted bootstrap resumes
where it stopped. ``workers`` processes run whole studies side by side, one torch thread each.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.data.builtin import BUILTIN_DATASETS

DEFAULT_SOURCES = (*BUILTIN_DATASETS, "rtables")
RTABLES = "rtables"
NUM_CLASSES = {"digits": 10, "mnist-5k": 10, "mnist1d": 10, "breast-cancer": 2, "wine": 3, "iris": 3}


def derived_specs(source: str) -> list[str]:
    """Five related datasets from one real source: the whole, two fractions, two more variants."""
    specs = [source, f"{source}?fraction=0.5&seed=1", f"{source}?fraction=0.3&seed=2"]
    c = NUM_CLASSES.get(source, 2)
    if c >= 4:
        half = c // 2
        specs += [f"{source}?classes=0-{half - 1}", f"{source}?classes={half}-{c - 1}"]
    else:
        specs += [f"{source}?fraction=0.7&seed=3", f"{source}?fraction=0.4&seed=4"]
    return specs


def source_specs(sources: Iterable[str], max_rows: int | None) -> list[str]:
    """Dataset specs for ``sources``: built-in names (five derived datasets each) and ``rtables``."""
    from agent.data.tabular import TableOptions

    specs: list[str] = []
    for source in sources:
        if source == RTABLES:
            from agent.data.rtables import shipped_tables

            specs += [TableOptions(t.label, rows=max_rows).name(t.spec) for t in shipped_tables()]
        elif source in BUILTIN_DATASETS:
            specs += derived_specs(source)
        else:
            from agent.errors import TuneAgentError

            raise TuneAgentError(f"unknown bootstrap source {source!r}; sources: {', '.join(DEFAULT_SOURCES)}")
    return specs


def bootstrap_study_name(job: str, dataset: str) -> str:
    return "bootstrap-" + job + "-" + re.sub(r"[^A-Za-z0-9.,=-]+", "_", dataset)


def bootstrap_one(
    job: str, spec: str, configs: int, epochs: int, seed: int, tracking_uri: str | None, artifact_root: str | None
) -> dict[str, Any]:
    """Runs (or resumes) the study of one dataset: {"study", "status", "trials", "seconds", "best"}."""
    from agent.config import StudyRequest
    from agent.errors import DatasetError, StudyFailedError
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.tuning.service import open_or_prepare

    start = time.perf_counter()
    name = bootstrap_study_name(job, spec)
    out: dict[str, Any] = {"study": name, "status": "finished", "trials": 0, "best": None}
    try:
        req = StudyRequest(
            dataset=spec,
            job=job,
            trials=configs,
            n_init=configs,
            epochs=epochs,
            init="sobol",
            seed=seed,
            study_name=name,
            warm_start="none",
            surrogate="gp",
            keep_models=0,  # a knowledge base of response surfaces: no trained model is worth its upload
            tracking_uri=tracking_uri,
            artifact_root=artifact_root,
        )
        opened = open_or_prepare(req)
        if opened is None:
            out["status"] = "done before"
            return out
        study, job_obj, dataset, split = opened
        before = len(study.counted(study.trials()))
        run_study(study, job_obj, dataset, split, SilentReporter(), trace_plot=False)
        trials = study.trials()
        out["trials"] = len(study.counted(trials)) - before
        best = study.best(trials)
        out["best"] = None if best is None else best.value
    except (StudyFailedError, DatasetError) as exc:
        out["status"] = f"failed: {exc}"
    finally:
        out["seconds"] = time.perf_counter() - start
    return out


def _worker_init() -> None:
    import lightning.pytorch  # noqa: F401 - its import sets its loggers to INFO: quieten them after it
    import torch

    from agent.execution.runner import quiet_lightning

    torch.set_num_threads(1)  # two studies on two cores: one thread each, no oversubscription
    quiet_lightning()


def _run_one(args: tuple) -> dict[str, Any]:
    return bootstrap_one(*args)


def distinct_content(specs: list[str], echo: Any = print) -> list[str]:
    """``specs`` less those whose content (:mod:`agent.data.content`) is a held-out table's or an
    earlier spec's of another source: a knowledge base holds each dataset once, under one source,
    and nothing of the independent evaluation. Each refusal is one line."""
    from agent.data import load_dataset
    from agent.data.content import content_print, same_content
    from agent.data.rtables import held_out_match
    from agent.errors import TuneAgentError
    from agent.tuning.ticker import Ticker

    kept: list[str] = []
    seen: list[tuple[str, str, Any]] = []
    echo(f"checking the content of {len(specs)} datasets against the held-out packages' tables and each other")
    ticker = Ticker(echo, "datasets checked", len(specs))
    for i, spec in enumerate(specs):
        ticker.tick(i)
        try:
            data = load_dataset(spec)
        except TuneAgentError:
            kept.append(spec)  # its study records the error
            continue
        held = held_out_match(data.X, data.y) if data.kind == "tabular" else None
        if held is not None:
            echo(f"{spec} left out: its content is the held-out table {held}'s")
            continue
        mine = content_print(data.X, data.y)
        twin = next(
            (name for name, source, theirs in seen if source != data.source and same_content(mine, theirs)), None
        )
        if twin is not None:
            echo(f"{spec} left out: its content is {twin}'s (one dataset, one source)")
            continue
        seen.append((spec, data.source, mine))
        kept.append(spec)
    return kept


def run_bootstrap(
    job: str,
    specs: Iterable[str],
    configs: int,
    epochs: int,
    seed: int,
    tracking_uri: str | None,
    artifact_root: str | None,
    echo: Any = print,
    workers: int = 1,
    check_content: bool = True,
) -> dict[str, Any]:
    """Runs (or resumes) one study per dataset spec, ``workers`` at a time; returns a summary with
    the wall time and the trials run per second. ``check_content``: leave out held-out content and
    copies first (:func:`distinct_content`, which loads every dataset once more); the built-in
    sources and the shipped R-table selection are clean by construction (tests/data/test_content.py)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    specs = distinct_content(list(specs), echo) if check_content else list(specs)
    start = time.perf_counter()
    results: list[dict[str, Any]] = []

    def report(res: dict[str, Any]) -> None:
        results.append(res)
        elapsed = time.perf_counter() - start
        trials = sum(r["trials"] for r in results)
        best = "-" if res["best"] is None else f"{res['best']:.4g}"
        eta = elapsed / len(results) * (len(specs) - len(results))
        echo(
            f"[{len(results)}/{len(specs)}] {res['study']}: {res['status']}, {res['trials']} trials, best {best}, "
            f"{res['seconds']:.0f} s; {trials / max(elapsed, 1e-9):.2f} trials/s, ETA {eta / 60:.0f} min"
        )

    args = [(job, spec, configs, epochs, seed, tracking_uri, artifact_root) for spec in specs]
    if workers <= 1:
        _worker_init()
        for a in args:
            report(bootstrap_one(*a))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_worker_init) as pool:
            for future in as_completed([pool.submit(_run_one, a) for a in args]):
                report(future.result())
    wall = time.perf_counter() - start
    trials = sum(r["trials"] for r in results)
    failed = [r["study"] for r in results if r["status"].startswith("failed")]
    return {
        "studies": len(results) - len(failed),
        "failed": failed,
        "trials": trials,
        "wall_seconds": wall,
        "trials_per_second": trials / max(wall, 1e-9),
        "workers": workers,
    }


def clean_starter(path: Path, out: Path, echo: Any = print) -> dict[str, Any]:
    """Writes to ``out`` the starter file ``path`` less what the content rules leave out: an R table
    not in the shipped selection (:mod:`agent.data.rtables`), a dataset whose sample has a
    held-out table's content, and a second copy of a dataset under another source (the first in
    the file is kept: the built-in datasets come first). Each study left out is one line. Stored
    meta-features of an older version are recomputed from the samples."""
    from agent.data.content import content_print, same_content
    from agent.data.rtables import PREFIX, held_out_match, shipped_tables
    from agent.knowledge.starter import read_starter, write_starter
    from agent.meta.handcrafted import handcrafted_metafeatures, is_current
    from agent.tuning.ticker import Ticker

    header, entries = read_starter(path)
    selected = {t.spec for t in shipped_tables()}
    kept: list[dict[str, Any]] = []
    seen: list[tuple[str, str, Any]] = []
    dropped: dict[str, str] = {}
    refreshed = 0
    echo(f"checking {len(entries)} studies of {path} (content, held-out tables, meta-features' version)")
    ticker = Ticker(echo, "studies checked", len(entries))
    for n, entry in enumerate(entries):
        ticker.tick(n)
        name, summary, sample = entry["name"], entry["summary"], entry["sample"]
        spec = str(entry["settings"].get("dataset", "")).split("#")[0]
        why = None
        if spec.startswith(PREFIX) and spec not in selected:
            why = "no longer in the R-table selection"
        elif sample is not None:
            held = held_out_match(*sample) if summary.get("kind") == "tabular" else None
            mine = content_print(*sample)
            twin = next(
                (
                    other
                    for other, source, theirs in seen
                    if source != summary.get("source") and same_content(mine, theirs)
                ),
                None,
            )
            why = (
                f"its content is the held-out table {held}'s" if held else f"its content is {twin}'s" if twin else None
            )
            if why is None:
                seen.append((name, str(summary.get("source")), mine))
        if why is None:
            if sample is not None and not is_current(entry.get("metafeatures")):  # this version's, stored once
                sample_X, sample_y = sample
                entry = {**entry, "metafeatures": handcrafted_metafeatures(sample_X, sample_y, summary)}
                refreshed += 1
            kept.append(entry)
        else:
            dropped[name] = why
            echo(f"{name} left out: {why}")
    written = write_starter(out, header["job"], header["space"], kept)
    if refreshed:
        echo(f"meta-features of {refreshed} studies recomputed (this version's) from their samples")
    return {**written, "dropped": dropped, "refreshed": refreshed}
