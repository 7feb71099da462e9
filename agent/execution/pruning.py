"""Pruning: stopping a trial early when its per-epoch validation metric says it will not win.

``--pruner median`` stops a trial at an epoch where its value is worse than the median of what the
study's earlier trials had at the same epoch (Optuna's ``MedianPruner`` rule, after
``MEDIAN_WARMUP`` epochs and once ``MIN_PEERS`` trials reported there). ``--pruner asha`` is
asynchronous successive halving (Li et al. 2020, "A System for Massively Parallel Hyperparameter
Tuning", Algorithm 2 read as a stopping rule): rungs at ``min_epochs * eta^k`` epochs; at a rung a
trial goes on only if its value is among the top ``1/eta`` of the values every trial recorded at
that rung, itself included. Decisions use what finished trials recorded, so a parallel worker
decides from the snapshot it was given and a resumed study decides as the uninterrupted one would.

A trial records its curve at finish (``curve_<epoch>`` metrics on its run, :func:`curve_metrics`),
so the next trial's snapshot needs no per-trial metric-history query. A pruned trial is stored as
``pruned`` with its last value; it counts against the budget, is never the study's best, and the
samplers treat its value as a bound, not a result (:func:`agent.samplers.bo.encoded`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agent.knowledge.records import CURVE_PREFIX, TRIAL_OK, TRIAL_PRUNED, TrialRecord

MEDIAN_WARMUP = 1  # epochs run before the median rule may stop a trial
MIN_PEERS = 3  # trials that must have reported at an epoch before a trial is judged there
ASHA_ETA = 3
ASHA_MIN_EPOCHS = 1


def curve_metrics(curve: Mapping[int, float]) -> dict[str, float]:
    """A trial's per-epoch values as the metrics stored at its finish."""
    return {f"{CURVE_PREFIX}{epoch}": float(v) for epoch, v in curve.items() if math.isfinite(float(v))}


def study_curves(trials: Iterable[TrialRecord]) -> dict[int, list[float]]:
    """Per epoch (from 1), the values that finished and pruned trials recorded there."""
    out: dict[int, list[float]] = {}
    for t in trials:
        if t.state not in (TRIAL_OK, TRIAL_PRUNED):
            continue
        for key, value in t.extra.items():
            if key.startswith(CURVE_PREFIX) and key[len(CURVE_PREFIX) :].isdigit():
                out.setdefault(int(key[len(CURVE_PREFIX) :]), []).append(float(value))
    return out


class Pruner(Protocol):
    """A stopping rule: what a ``--pruner`` entry of the registry is (``agent.registry.PRUNERS``;
    another package adds one through the ``tune_agent.pruners`` entry-point group). Values are
    maximised (the study's sign applied)."""

    def rungs(self, max_epochs: int) -> list[int]:
        """Epochs at which a trial may be stopped (never the last one: it ends anyway)."""
        ...

    def verdict(self, epoch: int, value: float, peers: list[float]) -> str:
        """Why the trial stops at ``epoch`` with maximised ``value`` ('' to go on); ``peers`` are the
        maximised values the study's other trials recorded at that epoch."""
        ...


@dataclass(frozen=True)
class NoPruner:
    """``--pruner none``: every trial runs its epochs."""

    def rungs(self, max_epochs: int) -> list[int]:
        return []

    def verdict(self, epoch: int, value: float, peers: list[float]) -> str:
        return ""


@dataclass(frozen=True)
class MedianPruner:
    """``--pruner median``: stops below the median of the study's earlier trials at that epoch."""

    warmup: int = MEDIAN_WARMUP
    min_peers: int = MIN_PEERS

    def rungs(self, max_epochs: int) -> list[int]:
        return list(range(self.warmup, max_epochs))

    def verdict(self, epoch: int, value: float, peers: list[float]) -> str:
        if len(peers) < self.min_peers or not math.isfinite(value):
            return ""
        median = float(np.median(peers))
        return f"worse than the median of {len(peers)} trials at epoch {epoch}" if value < median else ""


@dataclass(frozen=True)
class AshaPruner:
    """``--pruner asha``: at rungs ``min_epochs * eta^k`` only the top ``1/eta`` go on."""

    eta: int = ASHA_ETA
    min_epochs: int = ASHA_MIN_EPOCHS
    min_peers: int = MIN_PEERS

    def rungs(self, max_epochs: int) -> list[int]:
        out, r = [], self.min_epochs
        while r < max_epochs:
            out.append(r)
            r *= self.eta
        return out

    def verdict(self, epoch: int, value: float, peers: list[float]) -> str:
        if len(peers) < self.min_peers or not math.isfinite(value):
            return ""
        pool = sorted([*peers, value], reverse=True)
        keep = max(1, len(pool) // self.eta)
        cutoff = pool[keep - 1]
        return f"not in the top 1/{self.eta} of {len(pool)} trials at rung epoch {epoch}" if value < cutoff else ""


NONE, MEDIAN, ASHA = NoPruner(), MedianPruner(), AshaPruner()  # the built-in entries


def pruner_named(name: str) -> Pruner:
    """The registry's pruner ``name`` (one line, exit 2, for a name no entry has)."""
    from agent.registry import PRUNERS

    pruner: Pruner = PRUNERS.load(name)
    return pruner


@dataclass
class PruningState:
    """What a running trial needs to decide and what it leaves behind: the rule, the study's
    curves when it started (maximised), and its own curve as it goes."""

    pruner: Pruner
    metric: str
    sign: float
    max_epochs: int
    peers: Mapping[int, list[float]] = field(default_factory=dict)
    curve: dict[int, float] = field(default_factory=dict)
    reason: str = ""
    name: str = "the pruner"  # the --pruner name, for the reason line

    @classmethod
    def named(
        cls, name: str, metric: str, sign: float, max_epochs: int, peers: Mapping[int, list[float]]
    ) -> PruningState:
        """The state of the registry's pruner ``name`` (:func:`pruner_named`)."""
        return cls(pruner_named(name), metric, sign, max_epochs, peers, name=name)

    def observe(self, epoch: int, value: float) -> bool:
        """Records the trial's (unsigned) value after ``epoch`` (from 1); True when it must stop."""
        self.curve[epoch] = float(value)
        if epoch not in self.pruner.rungs(self.max_epochs):
            return False
        peers = [self.sign * v for v in self.peers.get(epoch, [])]
        why = self.pruner.verdict(epoch, self.sign * float(value), peers)
        if why:
            self.reason = f"pruned by {self.name} at epoch {epoch}: {self.metric}={value:.5g} {why}"
        return bool(why)


def pruning_state(settings: Any, trials: Callable[[], Iterable[TrialRecord]]) -> PruningState | None:
    """The state a new trial of a study with ``settings`` starts from (None without a pruner).
    ``trials`` reads the study's trials; it is called only when a pruner needs their curves."""
    if getattr(settings, "pruner", "none") == "none":
        return None
    return PruningState.named(settings.pruner, settings.metric, settings.sign, settings.epochs, study_curves(trials()))


def pruning_callback(state: PruningState) -> Any:
    """A Lightning callback that feeds ``state`` the metric after every validation epoch and stops
    the trainer when it says so."""
    import lightning.pytorch as pl

    class PruningCallback(pl.Callback):
        def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
            if trainer.sanity_checking:
                return
            value = trainer.callback_metrics.get(state.metric)
            if value is None:
                return
            if state.observe(trainer.current_epoch + 1, float(value)):
                trainer.should_stop = True

        # the curve so far travels with the trial's checkpoint: a resumed trial is judged on all of it
        def state_dict(self) -> dict[str, Any]:
            return {"curve": {int(k): float(v) for k, v in state.curve.items()}}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            state.curve.update({int(k): float(v) for k, v in state_dict.get("curve", {}).items()})

    return PruningCallback()
