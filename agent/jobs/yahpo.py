"""``--job yahpo:SCENARIO``: a YAHPO Gym surrogate scenario as a tuning job.

Each trial queries the scenario's ONNX surrogate (YAHPO Gym, Pfisterer et al. 2022) instead of
training; ``--dataset`` names the task (an instance of the scenario, e.g. an OpenML task id). Warm
start, surrogates, MLflow logging and resume are the product's own, so a study runs in seconds:
it is the quickest way to see transfer work, and the transfer benchmark is a loop over such studies.

Spec: ``yahpo:NAME`` (a folder under the YAHPO root: ``$TUNE_AGENT_YAHPO_ROOT``, else
``../shared/benchmarks/yahpo`` next to the repository) or ``yahpo:/path/to/folder``, optionally
followed by ``?target=OUTPUT&mode=min|max`` and ``&FIDELITY=VALUE`` to fix a fidelity parameter
below its full value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from agent.errors import JobError, TuneAgentError
from agent.jobs.base import BenchmarkTask
from agent.knowledge.importer import task_fingerprint

PREFIX = "yahpo:"


def yahpo_root() -> Path:
    env = os.environ.get("TUNE_AGENT_YAHPO_ROOT")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks" / "yahpo"


class YahpoJob:
    """A YAHPO scenario's tunable space and surrogate, behind the benchmark-job protocol."""

    def __init__(
        self,
        folder: Path,
        target: str | None = None,
        mode: str | None = None,
        fidelity: Mapping[str, float] | None = None,
    ) -> None:
        from agent.data.yahpo import YahpoScenario

        try:
            self.scenario = YahpoScenario.load(folder)
        except TuneAgentError as exc:
            raise JobError(str(exc)) from None
        self.metric = target or self.scenario.default_target
        if self.metric not in self.scenario.targets:
            raise JobError(
                f"scenario {folder.name!r} has no output {self.metric!r}; "
                f"choose from {', '.join(self.scenario.targets)}"
            )
        self.mode = mode or ("max" if self.scenario.is_maximized(self.metric) else "min")
        self.fidelity = dict(fidelity or {})
        unknown = sorted(set(self.fidelity) - set(self.scenario.fidelities))
        if unknown:
            raise JobError(
                f"scenario {folder.name!r} has no fidelity parameter {unknown[0]!r}; "
                f"it has {', '.join(self.scenario.fidelities) or 'none'}"
            )
        suffix = "" if self.metric == self.scenario.default_target else f"-{self.metric}"
        suffix += "".join(f"-{k}{v:g}" for k, v in sorted(self.fidelity.items()))
        self.name = f"yahpo-{folder.name}{suffix}"
        self.space = self.scenario.space
        self.metrics = tuple(self.scenario.targets)  # every output: --metric and --constraint name them

    @classmethod
    def from_spec(cls, spec: str) -> YahpoJob:
        body = spec[len(PREFIX) :]
        where, _, query = body.partition("?")
        folder = Path(where) if os.sep in where else yahpo_root() / where
        if not where or not folder.is_dir():
            raise JobError(
                f"YAHPO scenario {where!r} not found (looked in {folder}); "
                "set TUNE_AGENT_YAHPO_ROOT or give yahpo:/path/to/scenario"
            )
        options = dict(parse_qsl(query, keep_blank_values=True))
        target = options.pop("target", None)
        mode = options.pop("mode", None)
        if mode not in (None, "min", "max"):
            raise JobError(f"mode must be min or max in job spec {spec!r}, got {mode!r}")
        try:
            fidelity = {k: float(v) for k, v in options.items()}
        except ValueError:
            raise JobError(f"fidelity values in job spec {spec!r} must be numbers") from None
        return cls(folder, target, mode, fidelity)

    def task(self, spec: str) -> BenchmarkTask:
        instance = str(spec).strip()
        if instance not in self.scenario.instances:
            shown = ", ".join(self.scenario.instances[:8])
            raise JobError(
                f"scenario {self.scenario.folder.name!r} has no task {instance!r} "
                f"({len(self.scenario.instances)} tasks: {shown}, ...)"
            )
        return BenchmarkTask(f"{self.scenario.folder.name}/{instance}", instance, task_fingerprint(self.name, instance))

    def evaluate(self, config: Mapping[str, Any], task: BenchmarkTask) -> float:
        return float(self.evaluate_many([config], task)[0])

    def evaluate_outputs(self, config: Mapping[str, Any], task: BenchmarkTask) -> dict[str, float]:
        """Every output of the surrogate for one configuration (a study of several metrics)."""
        row = self.scenario.predict(task.instance, [config], self.fidelity or None)[0]
        return {name: float(v) for name, v in zip(self.scenario.targets, row)}

    def evaluate_many(self, configs: Any, task: BenchmarkTask) -> Any:
        """Objectives of many configurations (dicts, or `n x d` cube points) at once."""
        return self.scenario.evaluate(task.instance, configs, target=self.metric, fidelity=self.fidelity or None)
