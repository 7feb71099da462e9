"""Lightning loggers that write to MLflow through the knowledge base's retried calls."""

from __future__ import annotations

import sys
import time
from typing import Any, Mapping

from lightning.pytorch.loggers import MLFlowLogger

from agent.knowledge.mlflow.retry import (
    METRICS_FLUSH_SECONDS,
    QUICK_RETRY_SECONDS,
    RETRY_DELAYS,
    unreachable,
)

_METRICS = object()  # a TrialLogger's pending entry of epoch metrics (a list of mlflow Metric)


def _metric_key(key: str) -> str:
    """A metric name as MLflow accepts it (what Lightning's MLFlowLogger keeps of it)."""
    import re

    return re.sub(r"[^a-zA-Z0-9_/. -]+", "", key)


def _metric_rows(metrics: Mapping[str, float], step: int | None) -> list[Any]:
    """One logger write's metric rows, stamped now: made once, so that a retry sends the same
    rows and a write the server had already taken is kept once."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(key=_metric_key(k), value=float(v), timestamp=now, step=step or 0)
            for k, v in metrics.items() if not isinstance(v, str)]


class TrialLogger(MLFlowLogger):
    """Keeps the trial's params as logged: hyperparameters already set are skipped. Epoch
    metrics are gathered and written as one batch at most every ``METRICS_FLUSH_SECONDS``
    and when training ends; metrics and params that cannot reach the tracking server are
    kept, and written in order by the next call that can, at the latest when training ends
    (retried then as every store call is): an outage does not stop or fail the training."""

    def __init__(self, kb: Any, known: set[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kb, self._known = kb, known

    @property
    def _pending(self) -> list[tuple[Any, tuple[Any, ...]]]:
        return self.__dict__.setdefault("_unwritten", [])

    def _write(self, method: Any, *args: Any) -> None:
        self._pending.append((method, args))
        failed_at = self.__dict__.get("_failed_at")
        if failed_at is not None and time.monotonic() - failed_at < RETRY_DELAYS[0] * 2:
            return  # the server was down a moment ago: keep it, training goes on
        written_at = self.__dict__.get("_written_at")
        if method is _METRICS and written_at is not None and time.monotonic() - written_at < METRICS_FLUSH_SECONDS:
            return  # gathered into the next batch
        # while the server was up, a failure is retried once at once (a dropped connection, a
        # busy database), as self._kb._call does; only an unreachable server's is kept for later
        tries = 1 if failed_at is not None else 2
        for attempt in range(tries):
            if attempt:
                time.sleep(QUICK_RETRY_SECONDS)
            try:
                self._flush()
                return
            except Exception as exc:
                down = self._kb._remote and unreachable(exc)
                if attempt + 1 < tries and self._kb._retry_at_once(exc):
                    continue
                if not down:
                    raise
        if failed_at is None:
            sys.stderr.write(f"tracking server {self._kb.tracking_uri} unreachable: keeping this trial's epoch "
                             "metrics to write when it is back\n")
        self.__dict__["_failed_at"] = time.monotonic()

    def _flush(self) -> None:
        kept = len(self._pending)
        while self._pending:
            method, args = self._pending[0]
            if method is _METRICS:  # every consecutive metrics entry in one batch
                n = next((i for i, (m, _) in enumerate(self._pending) if m is not _METRICS), len(self._pending))
                rows = [row for _, (batch,) in self._pending[:n] for row in batch]
                self.experiment.log_batch(run_id=self.run_id, metrics=rows, **self._log_batch_kwargs)
                del self._pending[:n]
                self.__dict__["_written_at"] = time.monotonic()  # of epoch metrics: the first goes at once
            else:
                method(self, *args)
                self._pending.pop(0)
        if self.__dict__.pop("_failed_at", None) is not None:
            sys.stderr.write(f"tracking server {self._kb.tracking_uri} back: wrote {kept} kept batch(es)\n")

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self._write(_METRICS, _metric_rows(metrics, step))

    def log_hyperparams(self, params: Any) -> None:
        extra = {k: v for k, v in dict(vars(params) if not isinstance(params, Mapping) else params).items() if k not in self._known}
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
