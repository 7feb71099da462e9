"""The Lightning callback behaviour a trial shares wherever it trains: in a user's LightningCLI
script (:class:`agent.execution.cli_reporter.TrialReporter`) or in a user's own training loop
(:class:`agent.lightning.TuneAgentCallback`).

:class:`TrialCallback` collects each validation epoch's scalar metrics and hands them to its
subclass's :meth:`~TrialCallback.report_epoch`, feeds the pruner and stops the trainer when it says
so, writes ``last.ckpt`` after every validation epoch (with the pruner's curve and torch's random
state, so a killed trial continues as an unbroken one would), keeps the first batch's input rows
for the kept model's signature, and saves the trained model. How a subclass reports (files in the
trial's folder, or the study's trial handle in-process) is its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

from agent.execution.checkpoints import SERVED
from agent.execution.pruning import PruningState
from agent.tuning.scratch import CHECKPOINT


def scalar_metrics(trainer: pl.Trainer) -> dict[str, float]:
    """The trainer's scalar callback metrics as floats, by name."""
    return {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}


def save_model(folder: Path, module: pl.LightningModule, example: np.ndarray | None) -> str:
    """Saves ``module`` in ``folder``'s ``served/`` with the trial's checkpoint and its first input
    rows; returns the note the save leaves (empty when all went well), never raising."""
    from agent.project.serving import one_tensor_forward, save_project_model

    rows = example if example is not None and example.size else None
    try:
        return save_project_model(folder / SERVED, module, rows, one_tensor_forward(type(module)), folder / CHECKPOINT)
    except Exception as exc:
        return f"model not kept ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"


class TrialCallback(pl.Callback):
    """The shared part of a trial's callback; see the module docstring. A subclass sets
    ``pruning`` (None without a pruner), says where the checkpoint goes (:meth:`checkpoint_file`)
    and how an epoch is reported (:meth:`report_epoch`)."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.pruning: PruningState | None = None
        self.restored: dict[str, Any] = {}
        self.example: np.ndarray | None = None

    def checkpoint_file(self) -> Path | None:
        """Where the trial's checkpoint is written after each validation epoch; None: nowhere."""
        raise NotImplementedError

    def report_epoch(self, trainer: pl.Trainer, epoch: int, metrics: dict[str, float]) -> None:
        """Reports the metrics after validation epoch ``epoch`` (from 1)."""
        raise NotImplementedError

    def prune(self, trainer: pl.Trainer, epoch: int, value: float) -> str:
        """Feeds the pruner the metric's ``value`` after ``epoch``; returns why the trial is pruned
        (and stops the trainer), or an empty string when it goes on or there is no pruner."""
        if self.pruning is None or not self.pruning.observe(epoch, value):
            return ""
        trainer.should_stop = True
        return self.pruning.reason

    def restore_curve(self) -> None:
        """Gives the pruner back the curve the restored checkpoint carried."""
        if self.pruning is not None:
            self.pruning.curve.update({int(k): float(v) for k, v in self.restored.get("curve", {}).items()})

    def on_train_batch_start(self, trainer: pl.Trainer, module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.example is None:  # a few input rows: the kept model's signature and input example
            from agent.project.serving import first_rows

            self.example = first_rows(batch)

    def on_train_epoch_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if "torch" in self.restored:  # dropout's and the data order's random state as the checkpoint left it
            torch.set_rng_state(self.restored.pop("torch"))

    def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.report_epoch(trainer, trainer.current_epoch + 1, scalar_metrics(trainer))

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        path = self.checkpoint_file()
        if path is not None and not trainer.sanity_checking:
            trainer.save_checkpoint(str(path))

    def state_dict(self) -> dict[str, Any]:
        curve = dict(self.pruning.curve) if self.pruning is not None else {}
        return {"curve": curve, "torch": torch.get_rng_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored = dict(state_dict)
        self.restore_curve()
