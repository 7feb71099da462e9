"""The ``mlp`` job's network: the funnel backbone and its LightningModule (Lightning is imported
here, by a trial, and not by loading the job: :mod:`agent.jobs.mlp`)."""

from __future__ import annotations

import torch
from torch import nn

from agent.jobs.classifier import ClassifierModule
from agent.jobs.shapes import funnel_shape


class FunnelMLP(nn.Module):
    """Plain backbone: Linear + ReLU + Dropout per hidden layer, then a linear output layer."""

    def __init__(self, in_features: int, widths: list[int], rates: list[float], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for units, p in zip(widths, rates):
            layers += [nn.Linear(width, units), nn.ReLU(inplace=True), nn.Dropout(p)]
            width = units
        layers.append(nn.Linear(width, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class MLPModule(ClassifierModule):
    """The funnel MLP trained with SGD (momentum, weight decay); inputs are flat vectors."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        num_layers: int = 3,
        max_units: int = 256,
        max_dropout: float = 0.0,
        learning_rate: float = 1e-2,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        widths, rates = funnel_shape(num_layers, max_units, num_classes, max_dropout)
        self.widths, self.rates = widths, rates
        self.net = FunnelMLP(in_features, widths, rates, num_classes)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        return torch.optim.SGD(
            self.parameters(), lr=hp["learning_rate"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
        )
