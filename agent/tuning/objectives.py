"""What a study optimises: its metrics checked against what the job logs (before anything trains),
its objectives and constraints as the warm start reads them, the one line a study of several
metrics says about its model, and what ``tune-agent best`` prints (the best trial, or the front)."""

from __future__ import annotations

from typing import Any

from agent.config import StudyRequest, StudySettings, parse_constraint, parse_objective
from agent.errors import StudyError
from agent.tuning.study import Study


def request_objectives(req: StudyRequest, job: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str, float]]]:
    """The request's objectives as (metric, mode), the primary first (the job's where the request
    names none), and its constraints as (metric, op, bound): before the settings are derived."""
    objectives = [(req.metric or job.metric, req.mode or job.mode)] + [
        (name, mode or "min") for name, mode in (parse_objective(t, second=True) for t in req.objectives)
    ]
    return objectives, [parse_constraint(t) for t in req.constraints]


def check_metrics(req: StudyRequest, job: Any) -> None:
    """Every metric the request names (objectives, constraints) is one the job logs, where the job
    declares its ``metrics``: refused before anything trains. A Lightning job's trials also report
    ``n_params`` and ``fit_seconds`` (:data:`agent.jobs.base.ALWAYS_REPORTED`)."""
    from agent.jobs.base import ALWAYS_REPORTED, BenchmarkJob

    known = getattr(job, "metrics", None)
    if not known:
        return
    logged = tuple(known) + (() if isinstance(job, BenchmarkJob) else ALWAYS_REPORTED)
    named = [(req.metric, "--metric")] if req.metric is not None else []
    named += [(parse_objective(t)[0], "--metric") for t in req.objectives]
    named += [(parse_constraint(t)[0], "--constraint") for t in req.constraints]
    for name, option in named:
        if name not in logged:
            raise StudyError(f"{option} {name}: job {job.name} logs {', '.join(logged)}")


def multi_note(settings: StudySettings, surrogate: str) -> str:
    """One line for a study of several metrics or with constraints: how its BO steps model them."""
    outcomes = [f"{n}:{m}" for n, m in settings.objective_list()] + list(settings.constraints)
    line = f"several metrics: qLogNEHVI over one GP per outcome ({', '.join(outcomes)})"
    if surrogate not in ("gp", "none", ""):
        line += (
            f"; the transfer surrogate {surrogate} models one metric, so each outcome falls back to the target's "
            "own GP, and the history informs the warm start's configurations"
        )
    return line


def best_summary(study: Study, number: int | None = None) -> dict[str, Any]:
    """What ``tune-agent best`` prints: the best trial (or trial ``number``, from 1) with its
    configuration; for a study of several objectives or with constraints, the Pareto front of its
    feasible finished trials (``{"pareto": [{"trial", "values", "config"}, ...]}``), the
    hypervolume it dominates and the reference point that is measured from."""
    from agent.samplers.pareto import front_summary

    trials = study.trials()
    if number is not None:
        chosen = [t for t in trials if t.number == number - 1 and t.state == "ok"]
        if not chosen:
            raise StudyError(f"study {study.name!r} has no finished trial {number}")
        trial = chosen[0]
    elif study.settings.multi:
        summary = front_summary(trials, study.settings)
        if not summary["pareto"]:
            raise StudyError(f"study {study.name!r} has no feasible finished trial yet")
        return {"study": study.name, "metrics": [f"{n}:{m}" for n, m in study.settings.objective_list()], **summary}
    else:
        best = study.best(trials)
        if best is None:
            raise StudyError(f"study {study.name!r} has no successful trial yet")
        trial = best
    return {
        "study": study.name,
        "trial": trial.number + 1,
        "metric": study.settings.metric,
        "value": trial.value,
        "config": dict(trial.config),
    }
