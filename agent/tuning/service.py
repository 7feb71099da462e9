"""Study services behind the CLI and the benchmarks: validate, plan, create, and build the sampler.

Order matters for the bad-input promise: the request checks its options when it is made
(:class:`~agent.config.StudyRequest`), and the job and dataset are checked before the tracking
store is written, so a rejected command writes nothing. The plan (warm start, surrogate,
initial configurations) is computed once from one read of the history and recorded on the study
run, so ``resume`` rebuilds exactly that sampler — or refuses in one line when it cannot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from agent.config import StudyRequest, StudySettings
from agent.errors import StudyError, UnknownStudyError
from agent.knowledge.base import KnowledgeBase
from agent.project.sample import StoredSample
from agent.project.spec import is_project_spec
from agent.surrogates.arc import resolve_kernel
from agent.surrogates.source_fits import SourceFits
from agent.tuning.heartbeat import phase
from agent.tuning.objectives import check_metrics, multi_note
from agent.tuning.plan import PLAN_TAG, SurrogatePlan, plan_sampler
from agent.tuning.project_inputs import project_inputs, project_settings
from agent.tuning.study import Study

SAMPLE_SIZE = 256
# Below this many trials at most half of the budget (at least 2) goes to the initial design (warm
# seeds, then a space-filling design), so a 5-trial study still takes BO steps.
TINY_BUDGET = 10


NAME_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: a name read aloud or retyped survives
DATASET_PART = 16  # MLflow's runs table shows about 20 characters of a run name


def default_study_name(dataset_name: str, job_name: str, taken: Callable[[str], bool] = lambda name: False) -> str:
    """``<dataset>-<job>-<4 random characters>``, e.g. ``digits-cnn-k3f9``: short enough for the
    MLflow runs table's name column (a timestamp was cut there, and two ``start`` commands in one second
    got the same name). The suffix comes from the operating system's randomness, not the study's
    seed, so two studies launched together with the same seed still differ; ``taken`` (the store's
    lookup) makes a clash with an existing study draw again."""
    import secrets

    short = dataset_name.split("/")[-1]
    for mark in "?&#=":  # a CSV study is `mine.csv-label-y-mlp-...`, not `mine.csv#labely-mlp-...`
        short = short.replace(mark, "-")
    short = short[:DATASET_PART].rstrip("-.")
    for _ in range(20):
        name = f"{short}-{job_name}-{''.join(secrets.choice(NAME_ALPHABET) for _ in range(4))}"
        if not taken(name):
            return name
    raise StudyError(f"no free default name for {short}-{job_name}-*: name the study with --study-name")


def study_description(
    job: str, dataset: str, settings: StudySettings, plan: SurrogatePlan, epochs: bool, warm: Any
) -> str:
    """The study run's description (markdown, the MLflow UI's Description): what is tuned on what,
    the budget and sampler, the surrogate's note and the neighbours that seeded it with their
    distances; the store adds the best configuration when the study ends."""
    lines = [
        f"**Tuning `{job}` on `{dataset}`**: {settings.trials} trials"
        + (f" of {settings.epochs} epochs" if epochs else "")
        + f", {settings.n_init} initial then {settings.sampler} ({plan.surrogate}, {settings.acq}), "
        f"{settings.mode} `{settings.metric}`, seed {settings.seed}.",
        "",
        f"Surrogate: {plan.note}.",
    ]
    if warm is not None and warm.message:
        lines += ["", f"Warm start: {warm.message}"]
    neighbours = list(getattr(warm, "neighbours", ()) or ())
    if neighbours:
        lines += ["", f"| neighbour | distance | best {settings.metric} |", "|---|---|---|"]
        lines += [f"| `{n.name}` | {n.distance:.4g} | {n.best_value:.5g} |" for n in neighbours]
    return "\n".join(lines)


def open_store(tracking_uri: str | None, artifact_root: str | None) -> KnowledgeBase:
    from agent.knowledge import open_knowledge_base

    return open_knowledge_base(tracking_uri, artifact_root)


class PreparedStudy(NamedTuple):
    """What :func:`prepare_study` made: the study (in the store, its sampler built), the job, the
    dataset (a benchmark task for a benchmark job) and its train/validation split (None for a
    benchmark task)."""

    study: Study
    job: Any
    data: Any
    split: Any


def prepare_study(
    req: StudyRequest,
    echo: Any = print,
    kb: KnowledgeBase | Callable[[], KnowledgeBase] | None = None,
    fits: SourceFits | None = None,
) -> PreparedStudy:
    """Checks what the request names (job, dataset, metric, a free study name), plans the study and
    creates it in the store.

    ``kb`` is the store (or a function that opens it, called only once the job and the dataset
    passed their checks); None opens the one the request names. ``fits`` shares source fits
    across studies (the benchmark's workers).
    """
    from agent.jobs.base import BenchmarkJob

    job, data, sample, summary = _load_inputs(req, echo)
    phase(echo, "opening the store")
    kb = kb() if callable(kb) else (kb or open_store(req.tracking_uri, req.artifact_root))
    kb.check_artifact_root(job.name)  # before the warm start's seconds, not after them
    name = req.study_name
    if not name:  # a default name is drawn until the store holds none of it: one lookup per draw
        short = getattr(job, "short_name", job.name)
        name = default_study_name(data.name, short, lambda n: kb.find_study(n) is not None)
    elif kb.find_study(name) is not None:
        raise StudyError(f"study {name!r} already exists; continue it with: tune-agent resume {name}")
    phase(echo, "reading the history for the warm start")
    warm = _plan_warm_start(kb, job, data, sample, summary, req, echo)
    phase(echo, "planning the surrogate")
    settings, planned = _plan(kb, req, job, data, warm, fits, echo)
    if warm.message:
        echo(warm.message)
    echo(planned.plan.note)
    serving = getattr(job, "serving_note", None)
    why_not = serving() if callable(serving) and settings.keep_models != 0 else ""
    if why_not:
        echo(f"kept models: {why_not}: kept as the pytorch flavour and the Lightning checkpoint, without a pyfunc")
    if settings.multi:
        echo(multi_note(settings, planned.plan.surrogate))
    trains = not isinstance(job, BenchmarkJob)
    description = study_description(job.name, data.name, settings, planned.plan, trains, warm)
    phase(echo, "writing the study to the store")
    record = kb.create_study(name, settings.to_dict(), job.space.to_dict(), summary, sample, description)
    try:
        kb.set_study_tags(record, _study_tags(warm, planned, sample, summary))
        study = Study(kb, record, job.space, planned.sampler(job.space, settings))
    except BaseException:
        _close_failed(kb, record)  # a study that never ran a trial is closed, not left RUNNING
        raise
    split = None
    if trains:
        from agent.data import split_dataset

        split = split_dataset(data, settings.val_fraction, settings.seed)
    return PreparedStudy(study, job, data, split)


def _load_inputs(req: StudyRequest, echo: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """``(job, dataset or benchmark task, data sample, dataset summary)``; each refused in one line
    before anything is written, the dataset first: it is the likelier mistake, and loading a
    Lightning job costs seconds."""
    from agent.jobs import load_job
    from agent.jobs.base import BenchmarkJob
    from agent.jobs.registry import YAHPO_PREFIX, check_job_spec

    check_job_spec(req.job)  # a spec that names no job is refused before the heavy imports
    if is_project_spec(req.job):  # a user's Lightning project: its DataModule is the data
        return project_inputs(req, echo, SAMPLE_SIZE)
    if req.job.startswith(YAHPO_PREFIX):
        job = load_job(req.job)
    else:
        from agent.data import load_dataset

        data = load_dataset(req.dataset, label=req.label, drop=req.drop)
        job = load_job(req.job)
    check_metrics(req, job)
    if isinstance(job, BenchmarkJob):
        task = job.task(req.dataset)
        return job, task, None, {"source": job.name, "kind": "benchmark", "instance": task.instance}
    from agent.data import describe_dataset, sample_dataset

    job.check_dataset(data)
    if data.preparation:
        echo(data.preparation)
    return job, data, sample_dataset(data, SAMPLE_SIZE, seed=req.seed), describe_dataset(data)


def _plan(
    kb: KnowledgeBase, req: StudyRequest, job: Any, data: Any, warm: Any, fits: SourceFits | None, echo: Any
) -> tuple[StudySettings, Any]:
    """The study's settings and its planned sampler; a tiny budget keeps some trials for BO steps."""
    settings = _settings(req, job, data, warm, n_init=req.n_init or 1)
    planned = plan_sampler(kb, job.space, settings, warm, req.surrogate, data.fingerprint, fits, progress=echo)
    n_init = req.n_init if req.n_init is not None else (len(planned.plan.initial) or min(5, req.trials))
    if req.n_init is None and req.trials < TINY_BUDGET:
        n_init = min(n_init, max(2, req.trials // 2))
        planned = replace(planned, plan=replace(planned.plan, initial=planned.plan.initial[:n_init]))
    return _settings(req, job, data, warm, n_init), planned


def _study_tags(warm: Any, planned: Any, sample: Any, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The study run's tags: the warm start, the surrogate and its plan, the dataset's meta-features."""
    tags: dict[str, Any] = {
        "warm_start": warm.to_record(),
        "warm_start_method": warm.method,
        "neighbours": ", ".join(n.name for n in warm.neighbours) or "-",
        "surrogate": planned.plan.surrogate,
        "surrogate_note": planned.plan.note,
        PLAN_TAG: planned.plan.to_record(),
    }
    if sample is not None:
        from agent.meta.handcrafted import handcrafted_metafeatures

        tags["metafeatures"] = handcrafted_metafeatures(sample[0], sample[1], summary)
    return tags


def _close_failed(kb: KnowledgeBase, record: Any) -> None:
    try:
        kb.update_study(record, "failed")
    except Exception:
        pass


def preview_warm_start(req: StudyRequest, kb: KnowledgeBase | None = None, echo: Any = None) -> tuple[Any, Any, Any]:
    """``(warm start, job, dataset)``: what ``start`` with ``req`` would warm-start from, by the
    steps :func:`prepare_study` takes (the same checks, sample, history and meta-features), writing
    nothing but refreshed meta-features. What ``tune-agent neighbors`` prints; ``echo`` hears the
    progress of its long steps (a :class:`~agent.tuning.heartbeat.Heartbeat`: its phases)."""
    job, data, sample, summary = _load_inputs(req, echo=lambda _: None)
    phase(echo, "opening the store")
    kb = kb or open_store(req.tracking_uri, req.artifact_root)
    phase(echo, "reading the history and measuring the neighbours")
    return _plan_warm_start(kb, job, data, sample, summary, req, echo), job, data


def _plan_warm_start(
    kb: KnowledgeBase, job: Any, data: Any, sample: Any, summary: Mapping[str, Any], req: StudyRequest, echo: Any = None
) -> Any:
    from agent.tuning.warmstart import WarmStart, plan_warm_start

    if sample is None:  # a benchmark task has no data to compute meta-features from
        if req.warm_start == "none":
            return WarmStart(
                "none", message="warm start off (--warm-start none)", prior_mean=req.prior_mean or "constant"
            )
        prior = req.prior_mean or "observations"
        return WarmStart(
            "none",
            message="warm start: a benchmark task has no data for meta-features; transfer comes from the surrogate",
            prior_mean=prior,
        )
    from agent.tuning.published import meta_models_dir

    models_dir = (
        meta_models_dir(kb, req.models_dir, job.name, job.space, echo)
        if req.warm_start != "none"
        else Path(req.models_dir)
    )
    from agent.tuning.objectives import request_objectives

    objectives, constraints = request_objectives(req, job)
    return plan_warm_start(
        kb,
        job,
        data,
        sample,
        summary,
        req.warm_start,
        req.k,
        models_dir,
        req.prior_mean,
        progress=echo,
        objectives=objectives,
        constraints=constraints,
    )


def _settings(req: StudyRequest, job: Any, data: Any, warm: Any, n_init: int) -> StudySettings:
    return req.settings(
        **project_settings(job, data),
        job_name=job.name,
        dataset_name=data.name,
        fingerprint=data.fingerprint,
        space_signature=job.space.signature(),
        metric=req.metric or job.metric,
        mode=req.mode or job.mode,
        n_init=n_init,
        prior_mean=warm.prior_mean,
        kernel=resolve_kernel(req.kernel, job.space),
    )


def open_study(
    name: str,
    tracking_uri: str | None = None,
    artifact_root: str | None = None,
    models_dir: str | None = None,
    kb: KnowledgeBase | None = None,
    with_sampler: bool = True,
) -> tuple[Study, Any]:
    """Loads a stored study, its job and (``with_sampler``) the sampler it was planned with;
    refuses what changed. Commands that only read or record results (best, report, tell) pass
    ``with_sampler=False``: rebuilding a transfer surrogate is work no line they print needs."""
    from agent.jobs import load_job
    from agent.tuning.warmstart import WarmStart

    if kb is None:
        kb = open_store(tracking_uri, artifact_root)
    record = _find_record(name, kb)
    job = load_job(record.settings["job"])
    study = Study.load(kb, name, job.space)
    tags = kb.study_tags(record)
    warm = WarmStart.from_record(json.loads(tags["warm_start"])) if tags.get("warm_start") else None
    settings = study.settings
    if models_dir is not None and models_dir != settings.models_dir:
        raise StudyError(f"study {name!r} was planned with --models-dir {settings.models_dir}, not {models_dir}")
    if not with_sampler:
        return study, job
    if tags.get(PLAN_TAG):
        recorded = SurrogatePlan.from_record(tags[PLAN_TAG])
        planned = plan_sampler(kb, job.space, settings, warm, recorded.requested, record.fingerprint, recorded=recorded)
        study.sampler = planned.sampler(job.space, settings)
    elif warm is not None:  # a study from before plans were recorded: its recorded surrogate choice
        planned = plan_sampler(kb, job.space, settings, warm, tags.get("surrogate", "gp"), record.fingerprint)
        study.sampler = planned.sampler(job.space, settings)
    return study, job


def _find_record(name: str, kb: KnowledgeBase) -> Any:
    from agent.knowledge import store_exists

    if not store_exists(kb.tracking_uri):  # an embedded store never written: nothing to resume, and
        raise UnknownStudyError(f"no study named {name!r}: tracking store {kb.tracking_uri} is empty")  # no file made
    record = kb.find_study(name)
    if record is None:
        raise UnknownStudyError(
            f"no study named {name!r} in {kb.tracking_uri} (a study stopped before its first trial "
            "was stored is not there: run `tune-agent start ... --study-name` again)"
        )
    return record


def read_study(name: str, kb: KnowledgeBase) -> Study:
    """A stored study to read (``best``, ``report``): its search space from the store, so neither
    its job (a Lightning import, seconds) nor a sampler is loaded; the job's space when the store
    kept none."""
    from agent.space import SearchSpace

    record = _find_record(name, kb)
    stored = kb.load_study_space(record)
    if stored is None:
        from agent.jobs import load_job

        return Study.load(kb, name, load_job(record.settings["job"]).space)
    return Study.load(kb, name, SearchSpace.from_dict(stored))


def load_study_data(study: Study, job: Any = None) -> tuple[Any, Any]:
    from agent.jobs.base import BenchmarkJob

    s = study.settings
    if isinstance(job, BenchmarkJob):
        return job.task(s.dataset), None
    if getattr(job, "owns_data", False):  # trials train on the project's DataModule; its sample was for the warm start
        return StoredSample(s.dataset_name, s.fingerprint), None
    from agent.data import load_dataset, split_dataset

    dataset = load_dataset(s.dataset, label=s.label, drop=s.drop)
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
        raise StudyError(f"study {study.name!r} was run on dataset {study.settings.dataset!r}, not {dataset_spec!r}")


def open_or_prepare(req: StudyRequest) -> tuple[Study, Any, Any, Any] | None:
    """The study named ``req.study_name``: resumed (running trials closed) if it is stored and
    unfinished, ``None`` if its budget is spent, otherwise created from ``req``. For commands that
    run many named studies and may simply be run again (bootstrap, bench arc)."""
    try:
        study, job = open_study(str(req.study_name), req.tracking_uri, req.artifact_root)
    except UnknownStudyError:
        study, job, data, split = prepare_study(req, echo=lambda _: None)
        return study, job, data, split
    if study.remaining() <= 0:
        return None
    data, split = load_study_data(study, job)
    study.recover()
    return study, job, data, split
