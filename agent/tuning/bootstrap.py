"""`tune-agent bootstrap`: build a knowledge base from scratch on real data.

Runs one job over many derived datasets (class subsets and stratified fractions of the built-in
sources, as paper 003 builds 80 datasets from 8) on one shared Sobol set of configurations: every
dataset's study uses the same seed and an initial design as large as its budget, so all datasets
are evaluated at exactly the same configurations (what paper 003's eq. 2 distance needs). Each
dataset is an ordinary study (``bootstrap-<job>-<dataset>``) logged like any other, so the base is
browsable in MLflow and an interrupted bootstrap resumes where it stopped.
"""

from __future__ import annotations

import re
import time
from typing import Any, Iterable

from agent.data.builtin import BUILTIN_DATASETS

DEFAULT_SOURCES = BUILTIN_DATASETS
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


def bootstrap_study_name(job: str, dataset: str) -> str:
    return "bootstrap-" + job + "-" + re.sub(r"[^A-Za-z0-9.,=-]+", "_", dataset)


class _QuietReporter:
    """One line per finished trial is plenty for a bootstrap log."""

    def __init__(self, echo: Any) -> None:
        self.echo = echo

    def line(self, text: str) -> None:
        self.echo(text)

    def begin(self, study: Any, trials: list) -> None:
        self.echo(f"{study.name}: {len(study.counted(trials))}/{study.settings.trials} done")

    def trial_started(self, trial: Any) -> None:
        pass

    def trial_finished(self, trial: Any, best: Any, trials: list) -> None:
        pass

    def end(self, study: Any, best: Any, timing: Any) -> None:
        value = f"{best.value:.4g}" if best else "-"
        self.echo(f"{study.name}: finished, best {study.settings.metric}={value}, {timing.wall_seconds:.0f} s")


def run_bootstrap(
    job: str,
    specs: Iterable[str],
    configs: int,
    epochs: int,
    seed: int,
    tracking_uri: str | None,
    artifact_root: str | None,
    echo: Any = print,
) -> dict[str, Any]:
    """Runs (or resumes) one study per dataset spec; returns a small summary."""
    from agent.errors import StudyFailedError, UnknownStudyError
    from agent.tuning.runner import run_study
    from agent.config import StudyConfig
    from agent.tuning.service import load_study_data, open_study, prepare_study

    start = time.perf_counter()
    done, failed = [], []
    reporter = _QuietReporter(echo)
    for spec in specs:
        name = bootstrap_study_name(job, spec)
        try:
            study, job_obj = open_study(name, tracking_uri, artifact_root)
            if study.remaining() <= 0:
                done.append(name)
                continue
            dataset, split = load_study_data(study, job_obj)
            study.recover()
        except UnknownStudyError:  # absent: create it
            req = StudyConfig(dataset=spec, job=job, trials=configs, n_init=configs, epochs=epochs,
                               init="sobol", seed=seed, study_name=name, warm_start="none", surrogate="gp",
                               tracking_uri=tracking_uri, artifact_root=artifact_root)
            study, job_obj, dataset, split = prepare_study(req, echo=lambda _: None)
        try:
            run_study(study, job_obj, dataset, split, reporter)
            done.append(name)
        except StudyFailedError as exc:
            echo(str(exc))
            failed.append(name)
    return {"studies": len(done), "failed": failed, "wall_seconds": time.perf_counter() - start}
