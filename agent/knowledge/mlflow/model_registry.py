"""Models in MLflow: a trial's retrained model in the registry, and the meta-models' runs."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge import layout
from agent.knowledge.mlflow.connection import MlflowConnection
from agent.knowledge.mlflow.retry import CLOCK_SKEW_MS
from agent.knowledge.mlflow.store_file import T
from agent.knowledge.records import StudyRecord, TrialRecord
from agent.knowledge.stores import KeptModels


class MlflowModels(MlflowConnection, KeptModels):
    """The model registry (a study's best model, :class:`agent.knowledge.stores.KeptModels`) and the
    meta-model runs of the DVC pipeline."""

    def register_model(
        self,
        study: StudyRecord,
        trial: TrialRecord,
        model: Any,
        example: Any,
        predictions: Any,
        name: str,
        tags: Mapping[str, str],
    ) -> str:
        from mlflow.models import infer_signature

        import mlflow
        from agent.knowledge.mlflow.pyfunc import ServingPyfunc

        signature = infer_signature(example, predictions)
        mlflow.set_tracking_uri(self.tracking_uri)

        # A retry (the server's answer lost) finds the version an earlier try made from this
        # trial's run since this call began: one version, not two.
        began = int(time.time() * 1000) - CLOCK_SKEW_MS

        def made() -> str | None:
            versions = [
                v
                for v in self._client.search_model_versions(f"name = '{name}' and run_id = '{trial.trial_id}'")
                if v.creation_timestamp >= began
            ]
            return str(max(int(v.version) for v in versions)) if versions else None

        def log() -> str:
            import contextlib
            import io

            # MLflow narrates the registration on stderr; the command prints the version it made
            with mlflow.start_run(run_id=trial.trial_id), contextlib.redirect_stderr(io.StringIO()):
                info = mlflow.pyfunc.log_model(
                    name="model",
                    python_model=ServingPyfunc(model),
                    signature=signature,
                    input_example=example,
                    registered_model_name=name,
                    pip_requirements=[],
                )
            return str(info.registered_model_version)

        info = self._call(self._client.get_run, trial.trial_id).info
        status, ended = info.status, info.end_time
        try:
            version = self._call_once(log, made)
        finally:
            # start_run reopens the trial's run, and a try that failed inside it ended it FAILED:
            # the run goes back to how the study left it
            self._call(self._client.set_terminated, trial.trial_id, status, end_time=ended)  # its own duration kept
        self._describe_version(study, trial, name, version, tags)
        return version

    def _describe_version(
        self, study: StudyRecord, trial: TrialRecord, name: str, version: str, tags: Mapping[str, str]
    ) -> None:
        """Model ``name``'s ``version`` gets ``tags`` and a description naming the study and trial."""
        for key, value in tags.items():
            self._call(self._client.set_model_version_tag, name, version, key, str(value)[:5000])
        self._call(
            self._client.update_model_version,
            name,
            version,
            description=f"Best configuration of tune-agent study `{study.name}` (trial {trial.number + 1}), "
            f"retrained with its seed and split.",
        )

    # -- meta-model runs -----------------------------------------------------------------------
    def start_model_run(self, kind: str, params: Mapping[str, Any], description: str) -> tuple[str, Any]:
        """A run in experiment ``tune-agent/meta-models`` and a Lightning logger writing to it."""
        from mlflow.entities import Param

        from agent.knowledge.mlflow.loggers import ModelRunLogger

        exp_id = self._experiment_for("meta-models")
        tags = {T + "kind": "meta-model", T + "model": kind, "mlflow.note.content": description}
        run = self._create_run(exp_id, kind, tags)
        rid = run.info.run_id
        self._call(
            self._client.log_batch, rid, params=[Param(k, str(v)[: layout.PARAM_LIMIT]) for k, v in params.items()]
        )
        return rid, ModelRunLogger(self, tracking_uri=self.tracking_uri, run_id=rid)

    def finish_model_run(self, run_id: str, metrics: Mapping[str, float], artifacts: list[str]) -> None:
        from mlflow.entities import Metric

        unreadable = [p for p in artifacts if not Path(p).is_file()]
        if unreadable:
            raise StoreError(f"cannot read model artifact {unreadable[0]}")
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        self._call(self._client.log_batch, run_id, metrics=batch)
        for path in artifacts:
            self._call(self._client.log_artifact, run_id, path, "model")
        self._call(self._client.set_terminated, run_id, "FINISHED")
