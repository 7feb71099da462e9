"""Shared LightningModule behaviour for classification jobs: loss, accuracy and metric logging.

:class:`ClassifierModule` owns the training/validation steps of every built-in job so that all of
them log the same four per-epoch metrics (``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``)
with the same meaning: mean cross entropy and the fraction of correct predictions, weighted by
batch size over the epoch. Subclasses build their backbone in ``__init__`` (after calling
``save_hyperparameters``) and implement ``configure_optimizers``.
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.types import LRSchedulerConfigType
from torch import nn
from torch.nn import functional as F

from agent.jobs.base import CLASSIFIER_METRICS  # noqa: F401 - what ClassifierModule logs per epoch

Batch = tuple[torch.Tensor, torch.Tensor]


class ClassifierModule(pl.LightningModule):
    """A LightningModule around ``self.net`` (set by subclasses) that maps inputs to logits."""

    net: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _shared_step(self, batch: Batch, prefix: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
        n = int(y.shape[0])
        self.log(f"{prefix}_loss", loss, on_step=False, on_epoch=True, prog_bar=False, batch_size=n)
        self.log(f"{prefix}_acc", acc, on_step=False, on_epoch=True, prog_bar=False, batch_size=n)
        return loss

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._shared_step(batch, "val")


def exponential_decay(optimizer: torch.optim.Optimizer, decay: float) -> LRSchedulerConfigType:
    """Scheduler config for ``lr_t = lr_0 * exp(-decay * t)`` with ``t`` the optimisation step."""
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=math.exp(-decay))
    return {"scheduler": scheduler, "interval": "step", "frequency": 1}
