"""Lightning loggers that write to MLflow through the knowledge base's retried calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers import MLFlowLogger

from agent.knowledge.mlflow.run_writes import METRICS, BufferedRunWrites
from agent.knowledge.mlflow.run_writes import metric_rows as _metric_rows


class TrialLogger(BufferedRunWrites, MLFlowLogger):
    """Keeps the trial's params as logged: hyperparameters already set are skipped. Epoch
    metrics are gathered and written as one batch at most every ``METRICS_FLUSH_SECONDS``
    and when training ends; metrics and params that cannot reach the tracking server are
    kept, and written in order by the next call that can, at the latest when training ends
    (retried then as every store call is): an outage does not stop or fail the training."""

    def __init__(self, kb: Any, known: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kb, self._known = kb, known

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._write(METRICS, _metric_rows(metrics, step))

    def log_hyperparams(self, params: Any) -> None:
        extra = {
            k: v
            for k, v in dict(vars(params) if not isinstance(params, Mapping) else params).items()
            if k not in self._known
        }
        if extra:
            self._write(MLFlowLogger.log_hyperparams, extra)

    def finalize(self, status: str = "success") -> None:
        if self._pending:
            self._kb._call(self._flush)
        self._kb._call(MLFlowLogger.finalize, self, status)


class ModelRunLogger(MLFlowLogger):
    """Lightning's MLflow logger, each write retried as every store call is (MLflow's own
    retries are off: see ``_client``), a metrics write's rows made once."""

    def __init__(self, kb: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kb = kb

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        rows = _metric_rows(metrics, step)
        self._kb._call(lambda: self.experiment.log_batch(run_id=self.run_id, metrics=rows, **self._log_batch_kwargs))

    def log_hyperparams(self, params: Any) -> None:
        self._kb._call(MLFlowLogger.log_hyperparams, self, params)

    def finalize(self, status: str = "success") -> None:
        self._kb._call(MLFlowLogger.finalize, self, status)
