"""The callback tune-agent adds to a user's LightningCLI run: it reports, prunes, checkpoints and keeps.

Added through the CLI's own ``--trainer.callbacks+=agent.execution.cli_reporter.TrialReporter
--trainer.callbacks.folder=DIR`` (:mod:`agent.execution.cli_trial`), it runs inside the user's
process and talks to the study only through files in the trial's folder: it reads ``reporter.json``
(the metric, the pruner and the study's curves) and ``keep.json``, appends each validation epoch's
metrics to ``metrics.jsonl`` (and its end: trainable parameters, fit seconds, a note), writes
``last.ckpt`` after every validation epoch (with the pruner's curve and torch's random state, so a
killed trial continues as an unbroken one would), and saves the trained model in ``served/`` when
the study asks for it. Nothing it does raises into the user's training.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from agent.execution.checkpoints import wants_model
from agent.execution.cli_trial import METRICS, SETTINGS
from agent.execution.pruning import PruningState
from agent.execution.trial_callback import TrialCallback, save_model, scalar_metrics
from agent.tuning.scratch import CHECKPOINT


class TrialReporter(TrialCallback):
    """See the module docstring; ``folder`` is the trial's folder. What it shares with the own-loop
    callback (checkpoints, random state, pruning) is :class:`TrialCallback`'s; it reports by files."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.settings = json.loads((self.folder / SETTINGS).read_text())
        super().__init__(str(self.settings["metric"]))
        if self.settings.get("pruner", "none") != "none":
            peers = {int(k): [float(v) for v in vs] for k, vs in self.settings.get("curves", {}).items()}
            self.pruning = PruningState.named(
                self.settings["pruner"], self.metric, float(self.settings["sign"]), int(self.settings["epochs"]), peers
            )
        self.start = time.perf_counter()

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.folder / METRICS, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def checkpoint_file(self) -> Path:
        """The trial folder's ``last.ckpt``."""
        return self.folder / CHECKPOINT

    def report_epoch(self, trainer: pl.Trainer, epoch: int, metrics: dict[str, float]) -> None:
        """Appends the epoch's metrics (and why it is pruned, when it is) to ``metrics.jsonl``."""
        record: dict[str, Any] = {"epoch": epoch, "metrics": metrics}
        value = metrics.get(self.metric)
        reason = self.prune(trainer, epoch, value) if value is not None else ""
        if reason:
            record["pruned"] = reason
        self._write(record)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = time.perf_counter()
        if wants_model(self.folder, None, asked=True):
            from agent.knowledge import warm_model_saving

            warm_model_saving()  # MLflow's first save costs seconds: begun while the trial trains

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = scalar_metrics(trainer)
        end: dict[str, Any] = {
            "metrics": metrics,
            "n_params": float(sum(p.numel() for p in pl_module.parameters() if p.requires_grad)),
            "fit_seconds": time.perf_counter() - self.start,
            "curve": {str(k): v for k, v in (self.pruning.curve if self.pruning is not None else {}).items()},
            "note": "",
        }
        value = metrics.get(self.metric)
        if value is not None and wants_model(self.folder, value):
            end["note"] = save_model(self.folder, pl_module, self.example)
        self._write({"end": end})
