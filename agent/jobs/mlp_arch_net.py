"""The ``mlp-arch`` job's network (Lightning is imported here, by a trial, and not by loading
the job: :mod:`agent.jobs.mlp_arch`)."""

from __future__ import annotations

import torch
from torch import nn

from agent.jobs.classifier import ClassifierModule


class ArchMLPModule(ClassifierModule):
    """Hidden layers of chosen widths and dropouts; SGD with a per-layer L2 weight."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        units: list[int],
        dropouts: list[float],
        l2: list[float],
        learning_rate: float,
        momentum: float,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.hidden = nn.ModuleList()
        width = in_features
        for n, p in zip(units, dropouts):
            self.hidden.append(nn.Sequential(nn.Linear(width, n), nn.ReLU(inplace=True), nn.Dropout(p)))
            width = n
        self.out = nn.Linear(width, num_classes)
        self.net = nn.Sequential(*self.hidden, self.out)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        groups = [{"params": layer.parameters(), "weight_decay": wd} for layer, wd in zip(self.hidden, hp["l2"])]
        groups.append({"params": self.out.parameters(), "weight_decay": 0.0})
        return torch.optim.SGD(groups, lr=hp["learning_rate"], momentum=hp["momentum"])
