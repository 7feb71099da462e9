"""A trial run's params and epoch metrics, written to MLflow in batches that survive a tracking
server's outage, without Lightning: :class:`BufferedRunWrites` holds the writing (the trial's
Lightning logger, :class:`agent.knowledge.mlflow.loggers.TrialLogger`, is built on it), and
:class:`TrialRunWriter` is the same for a trial trained in another process
(:mod:`agent.execution.trial_process`): that process sends what Lightning logged, and this one
writes it, so the study's process needs no Lightning import and only it talks to the store."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from agent.knowledge.mlflow.retry import METRICS_FLUSH_SECONDS, QUICK_RETRY_SECONDS, RETRY_DELAYS, unreachable

METRICS = object()  # a pending entry of epoch metrics (a list of mlflow Metric)
PARAM_CHUNK = 100  # MLflow takes at most 100 params per batch


def metric_key(key: str) -> str:
    """A metric name as MLflow accepts it (what Lightning's MLFlowLogger keeps of it)."""
    import re

    return re.sub(r"[^a-zA-Z0-9_/. -]+", "", key)


def metric_rows(metrics: Mapping[str, float], step: int | None, timestamp: int | None = None) -> list[Any]:
    """One logger write's metric rows, stamped now (or ``timestamp``, ms, when it was logged
    elsewhere): made once, so that a retry sends the same rows and a write the server had already
    taken is kept once."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000) if timestamp is None else int(timestamp)
    return [
        Metric(key=metric_key(k), value=float(v), timestamp=now, step=step or 0)
        for k, v in metrics.items()
        if not isinstance(v, str)
    ]


class BufferedRunWrites:
    """Writes kept in order and sent when they can be: epoch metrics are gathered and written as one
    batch at most every ``METRICS_FLUSH_SECONDS`` (and by :meth:`_flush` at the end); writes that
    cannot reach the tracking server are kept and written, in order, by the next call that can.
    Needs ``self._kb`` (the MLflow knowledge base), ``self.experiment`` (its client), ``self.run_id``
    and ``self._log_batch_kwargs``."""

    _kb: Any
    experiment: Any
    run_id: Any
    _log_batch_kwargs: dict[str, Any]

    @property
    def _pending(self) -> list[tuple[Any, tuple[Any, ...]]]:
        return self.__dict__.setdefault("_unwritten", [])

    def _write(self, method: Any, *args: Any) -> None:
        self._pending.append((method, args))
        failed_at = self.__dict__.get("_failed_at")
        if failed_at is not None and time.monotonic() - failed_at < RETRY_DELAYS[0] * 2:
            return  # the server was down a moment ago: keep it, training goes on
        written_at = self.__dict__.get("_written_at")
        if method is METRICS and written_at is not None and time.monotonic() - written_at < METRICS_FLUSH_SECONDS:
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
            sys.stderr.write(
                f"tracking server {self._kb.tracking_uri} unreachable: keeping this trial's epoch "
                "metrics to write when it is back\n"
            )
        self.__dict__["_failed_at"] = time.monotonic()

    def _flush(self) -> None:
        kept = len(self._pending)
        while self._pending:
            method, args = self._pending[0]
            if method is METRICS:  # every consecutive metrics entry in one batch
                n = next((i for i, (m, _) in enumerate(self._pending) if m is not METRICS), len(self._pending))
                rows = [row for _, (batch,) in self._pending[:n] for row in batch]
                self.experiment.log_batch(run_id=self.run_id, metrics=rows, **self._log_batch_kwargs)
                del self._pending[:n]
                self.__dict__["_written_at"] = time.monotonic()  # of epoch metrics: the first goes at once
            else:
                method(self, *args)
                self._pending.pop(0)
        if self.__dict__.pop("_failed_at", None) is not None:
            sys.stderr.write(f"tracking server {self._kb.tracking_uri} back: wrote {kept} kept batch(es)\n")


class TrialRunWriter(BufferedRunWrites):
    """A trial's run written from what another process's Lightning logged: params already as text
    (as Lightning's logger writes them, less the trial's own config, written when it began), epoch metrics
    with their step; ``finalize`` ends the run as Lightning's logger would."""

    def __init__(self, kb: Any, run_id: str) -> None:
        self._kb, self.run_id = kb, run_id
        self._log_batch_kwargs = {}
        self.experiment = kb._client

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None, timestamp: int | None = None) -> None:
        self._write(METRICS, metric_rows(metrics, step, timestamp))

    def log_params(self, params: Mapping[str, str]) -> None:
        if params:
            self._write(TrialRunWriter._send_params, dict(params))

    def _send_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        rows = [Param(key=k, value=v) for k, v in params.items()]
        for i in range(0, len(rows), PARAM_CHUNK):
            self.experiment.log_batch(run_id=self.run_id, params=rows[i : i + PARAM_CHUNK], **self._log_batch_kwargs)

    def finalize(self, status: str = "success") -> None:
        if self._pending:
            self._kb._call(self._flush)
        ended = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}.get(status, status)
        self._kb._call(
            lambda: self.experiment.get_run(self.run_id) and self.experiment.set_terminated(self.run_id, ended)
        )
