"""The Lightning logger of :class:`agent.knowledge.memory.InMemoryKnowledgeBase`.

It lives apart because it imports Lightning: the in-memory backend imports this module only when a
caller asks for a logger. Metric keys are cleaned as Lightning's ``MLFlowLogger`` cleans them, so a
trial's ``extra`` holds the same keys on both backends.
"""

from __future__ import annotations

import re
from argparse import Namespace
from collections.abc import Callable, Collection, Mapping
from typing import Any

from lightning.fabric.utilities.logger import _add_prefix, _convert_params, _flatten_dict
from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

MetricSink = Callable[[str, float, int], None]
ParamSink = Callable[[Mapping[str, str]], None]


class MemoryLogger(Logger):
    """Hands each metric to ``log_metric(key, value, step)`` and hyperparameters (flattened, as
    text, minus the names in ``skip``) to ``log_params``."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self, run_id: str, log_metric: MetricSink, log_params: ParamSink, skip: Collection[str] = (), prefix: str = ""
    ) -> None:
        super().__init__()
        self._run_id = run_id
        self._log_metric = log_metric
        self._log_params = log_params
        self._skip = frozenset(skip)
        self._prefix = prefix

    @property
    def name(self) -> str:
        return "tune-agent"

    @property
    def version(self) -> str:
        return self._run_id

    @property
    def experiment(self) -> None:
        return None

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        for key, value in _add_prefix(dict(metrics), self._prefix, self.LOGGER_JOIN_CHAR).items():
            if isinstance(value, str):
                continue
            self._log_metric(re.sub("[^a-zA-Z0-9_/. -]+", "", key), float(value), step or 0)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        flat = _flatten_dict(_convert_params(params))
        kept = {k: str(v)[:250] for k, v in flat.items() if k not in self._skip}
        if kept:
            self._log_params(kept)
