"""End-to-end warm-start evaluation: real ``tune-agent start`` studies on held-out sources.

Protocol (an honest evaluation: leave-one-source-out):

- the history is the knowledge base's bootstrap (``bootstrap-<job>-*`` studies: one shared Sobol set
  of configurations per dataset), read once from the store;
- targets: one dataset from each of the first ``targets`` sources of the history, R packages first
  (:func:`choose_targets`);
- for a target from source ``S``, every dataset of ``S`` is removed from the history: the study runs
  on an in-memory knowledge base holding the rest (the same code path as ``tune-agent start``:
  :func:`agent.tuning.service.prepare_study`, the product's sampler and real Lightning training);
- methods are command lines of the product (:data:`METHODS`); no meta-model is trained per fold,
  so ``--warm-start auto`` falls back to hand-crafted meta-features and ``--surrogate auto`` to RGPE
  (the product default on a store where ``dvc repro`` has not run);
- regret at trial t: (best-so-far validation loss - L) / (U - L), where [L, U] is the range over the
  target's own bootstrap table joined with every value any method found on it (clipped to [0, 1]);
- per method: mean regret at 1/3/5/10 and the paired Wilcoxon signed-rank p-value against ``cold``
  over (target, seed) pairs.

Runs are journalled (one JSON line per target, seed and method), so an interrupted evaluation resumes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from agent.bench.e2e_summary import summarise
from agent.bench.fingerprint import read_journal, run_key
from agent.execution.progress import SilentReporter

METHODS: dict[str, dict[str, Any]] = {
    "cold": {"warm_start": "none", "surrogate": "gp"},
    "handcrafted": {"warm_start": "handcrafted", "surrogate": "gp", "prior_mean": "constant"},
    "handcrafted+prior_mean": {"warm_start": "handcrafted", "surrogate": "gp", "prior_mean": "neighbours"},
    "portfolio": {"warm_start": "none", "surrogate": "portfolio_gp"},
    "rgpe": {"warm_start": "none", "surrogate": "rgpe"},
    "default": {"warm_start": "auto", "surrogate": "auto"},
    # With the extractor `dvc repro` would have trained on a history without the target's source:
    "learned": {"warm_start": "learned", "surrogate": "gp", "prior_mean": "constant", "models": "fold"},
    "learned+prior_mean": {"warm_start": "learned", "surrogate": "gp", "prior_mean": "neighbours", "models": "fold"},
    "default+learned": {"warm_start": "auto", "surrogate": "auto", "models": "fold"},
    # With the TNP `dvc repro` would have meta-trained on a history without the target's source:
    "tnp": {"warm_start": "none", "surrogate": "tnp", "models": "fold"},
}
# What each method's fold folder must hold (the learned extractor, the meta-trained TNP).
FOLD_MODELS: dict[str, tuple[str, ...]] = {
    "learned": ("extractor",),
    "learned+prior_mean": ("extractor",),
    "default+learned": ("extractor",),
    "tnp": ("tnp",),
}


@dataclass(frozen=True)
class E2EConfig:
    job: str = "mlp"
    targets: int = 20
    seeds: int = 3
    trials: int = 10
    epochs: int = 2
    workers: int = 2
    methods: tuple[str, ...] = tuple(METHODS)


def choose_targets(entries: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """One dataset per source (its first by name), R packages first, then built-in sources, ``n`` in all."""
    by_source: dict[str, dict[str, Any]] = {}
    for e in sorted(entries, key=lambda e: e["name"]):
        by_source.setdefault(str(e["summary"].get("source", "")), e)
    order = sorted(by_source, key=lambda s: (not s.startswith("r:"), s))
    return [by_source[s] for s in order[:n]]


_WORKER: dict[str, Any] = {}


def _init(entries: list[dict[str, Any]], space: list[dict[str, Any]]) -> None:
    import torch

    from agent.execution.runner import quiet_lightning

    torch.set_num_threads(1)
    quiet_lightning()
    _WORKER.update(entries=entries, space=space)


class _Clock(SilentReporter):
    """A silent reporter that notes when each trial ends, in seconds since ``start``."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.ended: dict[int, float] = {}
        self.first_started: float | None = None

    def trial_started(self, trial: Any) -> None:
        if self.first_started is None:
            self.first_started = time.perf_counter() - self.start

    def trial_finished(self, trial: Any, best: Any, trials: list[Any]) -> None:
        self.ended[trial.number] = time.perf_counter() - self.start


def _history_without(source: str) -> Any:
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.starter import write_entries

    kb = open_knowledge_base("memory:")
    kept = [e for e in _WORKER["entries"] if e["summary"].get("source") != source]
    write_entries(kb, kept, _WORKER["space"], "the evaluation's history")
    return kb


def _run(
    target: dict[str, Any], seed: int, methods: Sequence[str], config: E2EConfig, models_dir: str
) -> dict[str, Any]:
    from agent.config import StudyRequest
    from agent.execution.runner import run_study
    from agent.tuning.service import prepare_study
    from agent.tuning.source_models import stored_fits

    source = target["summary"]["source"]
    out: dict[str, Any] = {}
    # One history per (target, seed): the studies run here are on the target's own dataset, which
    # every history reader leaves out by fingerprint, so later methods do not see earlier ones.
    kb = _history_without(source)
    for method in methods:
        options = {k: v for k, v in METHODS[method].items() if k != "models"}
        method_models = (
            str(fold_models_dir(Path(models_dir), source)) if METHODS[method].get("models") == "fold" else models_dir
        )
        req = StudyRequest(
            dataset=target["settings"]["dataset"],
            job=config.job,
            trials=config.trials,
            epochs=config.epochs,
            seed=seed,
            study_name=f"e2e-{method}-{seed}",
            models_dir=method_models,
            **options,
        )
        # As a study of the product: its source models read from the stored file (built before
        # the runs, :func:`build_source_models`), nothing kept from the worker's earlier studies.
        fits = stored_fits(source_models_dir(Path(models_dir)))
        start = time.perf_counter()
        clock = _Clock(start)
        study, job, data, split = prepare_study(req, echo=lambda _: None, kb=kb, fits=fits)
        run_study(study, job, data, split, clock, trace_plot=False)
        trials = sorted(study.trials(), key=lambda t: t.number)
        out[method] = {
            "values": [t.value if t.value is not None else float("nan") for t in trials],
            "seconds": time.perf_counter() - start,
            "first_trial_s": clock.first_started,
            "ended_s": [clock.ended.get(t.number) for t in trials],
            "source_fits": fits.fitted,
            "origins": [t.origin for t in trials],
        }
    return {"target": target["name"], "seed": seed, "methods": out}


def source_models_dir(root: Path) -> Path:
    """Where the history's source models (GPs, per-fold portfolios) are kept for the runs."""
    return root / "source-models"


def build_source_models(
    entries: list[dict[str, Any]],
    space: list[dict[str, Any]],
    job: str,
    sources: Sequence[str],
    root: Path,
    progress: Callable[[str], None] = print,
) -> None:
    """What the product's stored source models would hold before each held-out study: every
    source's data and GP (content-keyed, so one fit serves every fold) and each fold's portfolios
    (the end of the history's last study stores them), built once, before any run is timed."""
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.starter import write_entries
    from agent.space import SearchSpace
    from agent.tuning.source_models import BenchSourceStore, update_source_models

    folder = source_models_dir(root)
    done = folder / "built.json"
    if done.exists() and json.loads(done.read_text()).get("sources") == sorted(sources):
        return
    kb = open_knowledge_base("memory:")
    write_entries(kb, entries, space, "the evaluation's history")
    sp = SearchSpace.from_dict(space)
    start = time.perf_counter()
    report = update_source_models(kb, folder, job, sp, store=BenchSourceStore(folder), progress=progress)
    progress(f"source models of the whole history: {report['fitted']} GPs fitted ({time.perf_counter() - start:.0f} s)")
    for i, source in enumerate(sources, 1):
        fold = open_knowledge_base("memory:")
        write_entries(fold, [e for e in entries if e["summary"].get("source") != source], space, "the fold's history")
        report = update_source_models(fold, folder, job, sp, store=BenchSourceStore(folder))
        progress(
            f"source models without {source} ({i}/{len(sources)}): {report['fitted']} GPs fitted, "
            f"{time.perf_counter() - start:.0f} s"
        )
    done.write_text(json.dumps({"sources": sorted(sources)}))


def fold_models_dir(root: Path, source: str) -> Path:
    """Where the extractor trained without ``source`` lives (``root/fold-<source>``)."""
    return root / ("fold-" + "".join(c if c.isalnum() else "_" for c in source))


def train_fold_models(
    entries: list[dict[str, Any]],
    space: list[dict[str, Any]],
    job: str,
    sources: Sequence[str],
    kinds: Sequence[str],
    params: dict[str, Any],
    root: Path,
    normalisation: str = "rank",
    progress: Callable[[str], None] = print,
) -> None:
    """For each held-out ``source``, the meta-models the pipeline would build from the history
    without it, saved where the fold methods' studies read them (:func:`fold_models_dir`): the
    meta-feature extractor (``extractor``: :func:`agent.pipeline.stages.train_without_source` with
    ``params["meta_features"]``) and the TNP (``tnp``: :func:`agent.pipeline.metamodels.train_tnp`
    with ``params["transfer"]``). Kept across resumed runs."""
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.history import load_history
    from agent.knowledge.starter import write_entries
    from agent.meta.neighbours import EXTRACTOR_FILE
    from agent.pipeline.metamodels import TNP_FILE

    files = {"extractor": EXTRACTOR_FILE, "tnp": TNP_FILE}
    todo = [(s, k) for s in sources for k in kinds if not (fold_models_dir(root, s) / files[k]).exists()]
    if not todo:
        return
    kb = open_knowledge_base("memory:")
    write_entries(kb, entries, space, "the evaluation's history")
    history = load_history(kb, job=job)
    for i, (source, kind) in enumerate(todo, 1):
        start = time.perf_counter()
        folder = fold_models_dir(root, source)
        folder.mkdir(parents=True, exist_ok=True)
        if kind == "extractor":
            from agent.pipeline.stages import train_without_source

            train_without_source(history, dict(params.get("meta_features") or {}), source, normalisation).save(
                folder / EXTRACTOR_FILE
            )
        else:
            from agent.pipeline.metamodels import train_tnp_without_source

            train_tnp_without_source(history, job, source, folder, params.get("transfer"))
        progress(f"{kind} without {source} ({i}/{len(todo)}, {time.perf_counter() - start:.0f} s)")


def _run_job(args: tuple) -> dict[str, Any]:
    return _run(*args)


def run_e2e(
    kb: Any,
    config: E2EConfig,
    journal: Path,
    models_dir: Path,
    progress: Callable[[str], None] = print,
    params: dict[str, Any] | None = None,
    normalisation: str = "rank",
) -> dict[str, Any]:
    """Runs (or resumes) every (target, seed) and returns the report. ``models_dir`` holds no
    meta-models (the methods that do not name ``models`` run as on a store before ``dvc repro``);
    the fold methods read per-source meta-models trained under it with ``params`` (``params.yaml``:
    ``meta_features`` for the extractor, ``transfer`` for the TNP)."""
    from agent.jobs import load_job
    from agent.knowledge.starter import read_studies

    start = time.perf_counter()
    entries = read_studies(kb, config.job)
    targets = _targets(entries, config)
    space = load_job(config.job).space.to_dict()
    key = _run_key(config, params, normalisation)
    models_dir = Path(models_dir) / key  # the fold models trained for the key's settings
    done = read_journal(journal, key, "target")
    jobs = [
        (t, seed, missing, config, str(models_dir))
        for t in targets
        for seed in range(config.seeds)
        if (missing := tuple(m for m in config.methods if (t["name"], seed, m) not in done))
    ]
    kinds = sorted({k for m in config.methods for k in FOLD_MODELS.get(m, ())})
    sources = [t["summary"]["source"] for t in targets]
    build_source_models(entries, space, config.job, sources, models_dir, progress)
    if kinds:
        train_fold_models(
            entries, space, config.job, sources, kinds, dict(params or {}), models_dir, normalisation, progress
        )
    progress(
        f"{len(targets)} targets x {config.seeds} seeds x {len(config.methods)} methods; "
        f"{len(targets) * config.seeds - len(jobs)} (target, seed) pairs already in {journal}"
    )
    journal.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(
        config.workers, mp_context=get_context("spawn"), initializer=_init, initargs=(entries, space)
    ) as pool:
        futures = [pool.submit(_run_job, j) for j in jobs]
        for i, future in enumerate(as_completed(futures), 1):
            res = future.result()
            _journal(journal, key, res, done)
            elapsed = time.perf_counter() - start
            progress(
                f"[{i}/{len(jobs)}] {res['target']} seed {res['seed']}: "
                + ", ".join(f"{m} {min(v['values']):.3f}" for m, v in res["methods"].items())
                + f" ({elapsed / 60:.1f} min)"
            )
    return summarise(targets, entries, done, config, time.perf_counter() - start)


def _targets(entries: Sequence[dict[str, Any]], config: E2EConfig) -> list[dict[str, Any]]:
    """The held-out targets (:func:`choose_targets`); at least 2 are needed."""
    targets = choose_targets(entries, config.targets)
    if len(targets) < 2:
        from agent.errors import TuneAgentError

        raise TuneAgentError(
            f"the store's bootstrap of job {config.job} has {len(targets)} source(s); at least 2 "
            "are needed: run `tune-agent bootstrap` first"
        )
    return targets


def _run_key(config: E2EConfig, params: dict[str, Any] | None, normalisation: str) -> str:
    """A run is reused only under the same settings, meta-model parameters and engine code: its key."""
    return run_key(
        "bench/warmstart_e2e.py",
        {
            "config": {k: v for k, v in asdict(config).items() if k not in ("workers", "seeds", "methods")},
            "params": dict(params or {}),
            "normalisation": normalisation,
        },
    )


def _journal(journal: Path, key: str, res: dict[str, Any], done: dict[tuple[str, int, str], Any]) -> None:
    """Appends each method's result of one (target, seed) to the journal, and to ``done``."""
    with journal.open("a") as fh:
        for method, result in res["methods"].items():
            done[(res["target"], res["seed"], method)] = result
            line = {"key": key, "target": res["target"], "seed": res["seed"], "method": method, "result": result}
            fh.write(json.dumps(line) + "\n")
