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
import numpy as np
import torch

from agent.execution.checkpoints import SERVED, wants_model
from agent.execution.cli_trial import METRICS, SETTINGS
from agent.execution.pruning import Pruner, PruningState
from agent.tuning.scratch import CHECKPOINT


class TrialReporter(pl.Callback):
    """See the module docstring; ``folder`` is the trial's folder."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.settings = json.loads((self.folder / SETTINGS).read_text())
        self.metric = str(self.settings["metric"])
        self.pruning: PruningState | None = None
        if self.settings.get("pruner", "none") != "none":
            peers = {int(k): [float(v) for v in vs] for k, vs in self.settings.get("curves", {}).items()}
            self.pruning = PruningState(
                Pruner(self.settings["pruner"]),
                self.metric,
                float(self.settings["sign"]),
                int(self.settings["epochs"]),
                peers,
            )
        self.example: np.ndarray | None = None
        self.restored: dict[str, Any] = {}
        self.start = time.perf_counter()

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.folder / METRICS, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.start = time.perf_counter()
        if wants_model(self.folder, None, asked=True):
            from agent.knowledge import warm_model_saving

            warm_model_saving()  # MLflow's first save costs seconds: begun while the trial trains

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.example is None:
            from agent.project.serving import first_rows

            self.example = first_rows(batch)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if "torch" in self.restored:  # dropout's and the data order's random state as the checkpoint left it
            torch.set_rng_state(self.restored.pop("torch"))

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
        epoch = trainer.current_epoch + 1
        record: dict[str, Any] = {"epoch": epoch, "metrics": metrics}
        value = metrics.get(self.metric)
        if self.pruning is not None and value is not None and self.pruning.observe(epoch, value):
            record["pruned"] = self.pruning.reason
            trainer.should_stop = True
        self._write(record)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            trainer.save_checkpoint(str(self.folder / CHECKPOINT))

    def state_dict(self) -> dict[str, Any]:
        curve = dict(self.pruning.curve) if self.pruning is not None else {}
        return {"curve": curve, "torch": torch.get_rng_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.restored = dict(state_dict)
        if self.pruning is not None:
            self.pruning.curve.update({int(k): float(v) for k, v in self.restored.get("curve", {}).items()})

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
        end: dict[str, Any] = {
            "metrics": metrics,
            "n_params": float(sum(p.numel() for p in pl_module.parameters() if p.requires_grad)),
            "fit_seconds": time.perf_counter() - self.start,
            "curve": {str(k): v for k, v in (self.pruning.curve if self.pruning is not None else {}).items()},
            "note": "",
        }
        value = metrics.get(self.metric)
        if value is not None and wants_model(self.folder, value):
            end["note"] = self._save(pl_module)
        self._write({"end": end})

    def _save(self, pl_module: pl.LightningModule) -> str:
        from agent.project.serving import one_tensor_forward, save_project_model

        try:
            example = self.example if self.example is not None and self.example.size else None
            return save_project_model(
                self.folder / SERVED, pl_module, example, one_tensor_forward(type(pl_module)), self.folder / CHECKPOINT
            )
        except Exception as exc:
            return f"model not kept ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
