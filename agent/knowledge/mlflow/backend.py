"""The MLflow knowledge base: trials as nested runs of their study run, with their Lightning logger."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from agent.knowledge import layout
from agent.knowledge.mlflow.imports import MlflowImports
from agent.knowledge.mlflow.kept import MlflowKeptModels
from agent.knowledge.mlflow.meta_models import MlflowMetaModels
from agent.knowledge.mlflow.model_registry import MlflowModels
from agent.knowledge.mlflow.store_file import T
from agent.knowledge.records import TRIAL_RUNNING, StudyRecord, TrialRecord


class MlflowKnowledgeBase(MlflowImports, MlflowModels, MlflowKeptModels, MlflowMetaModels):
    """Studies and trials in an MLflow tracking store (sqlite file or ``mlflow server``)."""

    def trials(self, study: StudyRecord) -> list[TrialRecord]:
        run = self._call(self._client.get_run, study.study_id)
        if run.data.tags.get(T + "trials_inline") == "1":
            return self._inline_trials(study.study_id)
        flt = f"tags.`mlflow.parentRunId` = '{study.study_id}'"
        # The search returns runs by start time (ties by run id); a stable sort keeps that order
        # among trials sharing a number, as the contract asks.
        records = [self._to_trial(r) for r in self._search(flt, [run.info.experiment_id])]
        return sorted(records, key=lambda t: t.number)

    def start_trial(self, study: StudyRecord, number: int, config: Mapping[str, Any], origin: str) -> TrialRecord:
        from mlflow.entities import Param

        exp_id = self._experiment_of(study)
        summary = ", ".join(f"{k}={layout.short(v)}" for k, v in config.items())
        tags = {
            "mlflow.parentRunId": study.study_id,
            T + "kind": "trial",
            T + "study": study.name,
            T + "trial": str(number + 1),  # as the run name, the description and the console say it
            T + "slot": str(number),  # the budget slot the study counts from 0
            T + "state": TRIAL_RUNNING,
            T + "origin": origin,
            T + "config": layout.config_json(config),  # keeps the space's order
            T + "dataset": study.dataset,
            T + "job": study.job,
            "mlflow.note.content": f"Trial {number + 1} of study `{study.name}` ({origin}): {summary}",
        }
        run = self._create_run(exp_id, f"{study.name}/trial-{number + 1}", tags)
        params = [Param(k, str(v)) for k, v in config.items()]
        self._call(self._client.log_batch, run.info.run_id, params=params)
        return self._to_trial(run)

    def finish_trial(
        self,
        study: StudyRecord,
        trial: TrialRecord,
        value: float | None,
        state: str,
        reason: str = "",
        duration: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> TrialRecord:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        values = dict(metrics or {})
        if value is not None:
            values["objective"] = value
        if duration is not None:
            values["duration_s"] = duration
        batch = [Metric(k, float(v), now, 0) for k, v in values.items() if math.isfinite(float(v))]
        tags = [RunTag(T + "state", state)] + ([RunTag(T + "reason", reason[: layout.REASON_LIMIT])] if reason else [])
        self._call(self._client.log_batch, trial.trial_id, metrics=batch, tags=tags)
        status = {"ok": "FINISHED", "pruned": "FINISHED", "failed": "FAILED"}.get(state, "KILLED")
        self._call(self._client.set_terminated, trial.trial_id, status)
        return self._to_trial(self._call(self._client.get_run, trial.trial_id))

    trial_writers = True

    def trial_writer(self, study: StudyRecord, trial: TrialRecord) -> Any:
        from agent.knowledge.mlflow.run_writes import TrialRunWriter

        return TrialRunWriter(self, trial.trial_id)

    def trial_logger(self, study: StudyRecord, trial: TrialRecord) -> Any:
        from agent.knowledge.mlflow.loggers import TrialLogger

        logger = TrialLogger(self, set(trial.config), tracking_uri=self.tracking_uri, run_id=trial.trial_id)
        # Lightning would fetch the run on first use to learn its experiment (and fail the trial if
        # the server is down at that moment); we know it.
        logger._experiment_id = self._experiment_of(study)
        logger._initialized = True
        return logger
