"""Study services behind the CLI: validate everything, then touch the store, then run.

Order matters for the bad-input promise: job, dataset and options are all checked before the
tracking store is opened, so a rejected command writes nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from agent.config import StudySettings, check_positive
from agent.errors import StudyError
from agent.knowledge.mlflow_store import MlflowKnowledgeBase, store_exists
from agent.tuning.bo import RANDOM_EVERY
from agent.tuning.sampler import BoSampler
from agent.tuning.study import Study

SAMPLE_SIZE = 256


@dataclass(frozen=True)
class StartRequest:
    dataset: str
    job: str
    trials: int = 20
    epochs: int = 5
    label: str | None = None
    metric: str | None = None
    mode: str | None = None
    time_limit: float | None = None
    init: str = "sobol"
    n_init: int | None = None
    acq: str = "logei"
    random_every: int = RANDOM_EVERY
    seed: int = 0
    val_fraction: float = 0.2
    study_name: str | None = None
    tracking_uri: str | None = None
    artifact_root: str | None = None
    warm_start: str = "auto"
    k: int = 3
    prior_mean: str | None = None
    models_dir: str = "models"
    surrogate: str = "auto"


def default_study_name(dataset_name: str, job_name: str) -> str:
    short = dataset_name.split("/")[-1].replace("?", "-").replace("&", "-").replace("=", "")
    return f"{short}-{job_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def prepare_study(req: StartRequest, echo: Any = print) -> tuple[Study, Any, Any, tuple[Any, Any]]:
    """Validates a start request, creates the study in the store, returns what running needs."""
    from pathlib import Path

    from agent.data import describe_dataset, load_dataset, sample_dataset, split_dataset
    from agent.jobs import load_job
    from agent.meta.handcrafted import handcrafted_metafeatures
    from agent.tuning.warmstart import PRIOR_MEANS, WARM_METHODS, plan_warm_start

    check_positive("--trials", req.trials)
    check_positive("--epochs", req.epochs)
    check_positive("--k", req.k)
    if req.warm_start not in WARM_METHODS:
        raise StudyError(f"--warm-start must be one of {', '.join(WARM_METHODS)}, got {req.warm_start!r}")
    if req.prior_mean not in (None, *PRIOR_MEANS):
        raise StudyError(f"--prior-mean must be one of {', '.join(PRIOR_MEANS)}, got {req.prior_mean!r}")
    job = load_job(req.job)
    dataset = load_dataset(req.dataset, label=req.label)
    job.check_dataset(dataset)
    summary = describe_dataset(dataset)
    sample = sample_dataset(dataset, SAMPLE_SIZE, seed=req.seed)
    kb = MlflowKnowledgeBase(req.tracking_uri, req.artifact_root)
    name = req.study_name or default_study_name(dataset.name, job.name)
    if kb.find_study(name) is not None:
        raise StudyError(f"study {name!r} already exists; continue it with: tune-agent resume {name}")
    warm = plan_warm_start(kb, job, dataset, sample, summary, req.warm_start, req.k, Path(req.models_dir), req.prior_mean)
    n_init = req.n_init if req.n_init is not None else (len(warm.seeds) or min(5, req.trials))
    settings = StudySettings(
        job=req.job,
        job_name=job.name,
        dataset=req.dataset,
        dataset_name=dataset.name,
        fingerprint=dataset.fingerprint,
        space_signature=job.space.signature(),
        metric=req.metric or job.metric,
        mode=req.mode or job.mode,
        trials=req.trials,
        epochs=req.epochs,
        time_limit=req.time_limit,
        init=req.init,
        n_init=n_init,
        acq=req.acq,
        random_every=req.random_every,
        seed=req.seed,
        val_fraction=req.val_fraction,
        label=req.label,
        warm_start=req.warm_start,
        k=req.k,
        prior_mean=warm.prior_mean,
        surrogate=req.surrogate,
    )  # validates the remaining options, so bad input stops before anything is printed or written
    if warm.message:
        echo(warm.message)
    description = (
        f"Tuning job `{job.name}` on dataset `{dataset.name}` ({dataset.n} instances, "
        f"{dataset.num_classes} classes): {settings.trials} trials of {settings.epochs} epochs, "
        f"{settings.n_init} x {settings.init} then BO with {settings.acq}, "
        f"{settings.mode} {settings.metric}, seed {settings.seed}. {warm.message}"
    )
    record = kb.create_study(name, settings.to_dict(), job.space.to_dict(), summary, sample, description)
    sampler, choice = make_sampler(kb, job.space, settings, warm, Path(req.models_dir), req.surrogate, dataset.fingerprint)
    echo(choice.message)
    kb.set_study_tags(record, {
        "metafeatures": handcrafted_metafeatures(sample[0], sample[1], summary),
        "warm_start": warm.to_record(),
        "warm_start_method": warm.method,
        "neighbours": ", ".join(n.name for n in warm.neighbours) or "-",
        "surrogate": choice.name,
        "surrogate_note": choice.message,
    })
    study = Study(kb, record, job.space, sampler)
    return study, job, dataset, split_dataset(dataset, settings.val_fraction, settings.seed)


def make_sampler(kb: Any, space: Any, settings: StudySettings, warm: Any, models_dir: Any, surrogate: str,
                 exclude_fingerprint: str) -> tuple[BoSampler, Any]:
    """The study's sampler: warm-start seeds, prior mean (for the GP) and transfer surrogate."""
    from agent.knowledge.history import load_history
    from agent.surrogates.transfer import choose_surrogate, model_builder, source_tasks
    from agent.tuning.warmstart import neighbour_mean_factory

    sources = []
    if surrogate != "gp":
        history = load_history(kb, job=settings.job_name, space_signature=space.signature(), with_samples=False,
                               exclude_fingerprints={exclude_fingerprint})
        sources = source_tasks(history, space)
    choice = choose_surrogate(surrogate, sources, models_dir, space.signature())
    builder, choice = model_builder(choice, sources, models_dir, seed=settings.seed)
    mean = neighbour_mean_factory(warm, space, kb) if builder is None else None
    if builder is None and warm.prior_mean == "observations":
        mean = observation_neighbours(kb, space, settings, sources, exclude_fingerprint)
    sampler = BoSampler(space, settings, seeds=warm.seeds, mean_module_factory=mean, model_builder=builder)
    return sampler, choice


def observation_neighbours(kb: Any, space: Any, settings: StudySettings, sources: list, exclude_fingerprint: str) -> Any:
    """The neighbours' prior mean with neighbours re-chosen from the study's observations, or None."""
    from agent.knowledge.history import load_history
    from agent.surrogates.neighbour_mean import ObservationNeighbours
    from agent.surrogates.transfer import source_tasks

    if not sources:
        history = load_history(kb, job=settings.job_name, space_signature=space.signature(), with_samples=False,
                               exclude_fingerprints={exclude_fingerprint})
        sources = source_tasks(history, space)
    return ObservationNeighbours(sources, k=settings.k) if sources else None


def open_study(name: str, tracking_uri: str | None, artifact_root: str | None = None, models_dir: str = "models") -> tuple[Study, Any]:
    """Loads a stored study and its job; refuses when the job's space changed since."""
    from agent.jobs import load_job

    kb = MlflowKnowledgeBase(tracking_uri, artifact_root)
    if not store_exists(kb.tracking_uri):
        raise StudyError(f"no study named {name!r}: tracking store {kb.tracking_uri} is empty")
    record = kb.find_study(name)
    if record is None:
        raise StudyError(f"no study named {name!r} in {kb.tracking_uri}")
    job = load_job(record.settings["job"])
    study = Study.load(kb, name, job.space)
    tags = kb.study_tags(record)
    if tags.get("warm_start"):
        from pathlib import Path

        from agent.tuning.warmstart import WarmStart

        warm = WarmStart.from_record(json.loads(tags["warm_start"]))
        surrogate = tags.get("surrogate", "gp")  # the recorded choice, not a fresh 'auto'
        study.sampler, _ = make_sampler(kb, job.space, study.settings, warm, Path(models_dir), surrogate, record.fingerprint)
    return study, job


def load_study_data(study: Study) -> tuple[Any, tuple[Any, Any]]:
    from agent.data import load_dataset, split_dataset

    s = study.settings
    dataset = load_dataset(s.dataset, label=s.label)
    if dataset.fingerprint != s.fingerprint:
        raise StudyError(
            f"dataset {s.dataset!r} changed since study {study.name!r} started "
            f"(fingerprint {s.fingerprint} -> {dataset.fingerprint})"
        )
    return dataset, split_dataset(dataset, s.val_fraction, s.seed)


def check_resume_matches(study: Study, job: Any, job_spec: str | None, dataset_spec: str | None) -> None:
    if job_spec is not None and job_spec != study.settings.job:
        raise StudyError(f"study {study.name!r} was run with job {study.settings.job!r}, not {job_spec!r}")
    if dataset_spec is not None and dataset_spec != study.settings.dataset:
        raise StudyError(
            f"study {study.name!r} was run on dataset {study.settings.dataset!r}, not {dataset_spec!r}"
        )
