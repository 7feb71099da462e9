"""The built-in ``mlp`` job: LCBench's funnel-shaped MLP trained with SGD.

Owns the LCBench space (batch size, learning rate, momentum, weight decay, depth, width,
dropout), the funnel shape (:func:`funnel_shape`), the backbone (:class:`FunnelMLP`), its
LightningModule (:class:`MLPModule`) and the job object (:class:`MLPJob`).

Funnel: with ``L`` hidden layers, layer ``i`` (0-based) has
``round(max_units - (max_units - num_classes) * i / L)`` units, so widths fall linearly from
``max_units`` towards the number of classes; dropout rises linearly from 0 on the first hidden layer
to ``max_dropout`` on the last (a single hidden layer gets ``max_dropout``). Every dropout is
clipped to ``MAX_DROPOUT`` = 0.95 so that ``max_dropout = 1`` does not zero every activation.

Works on any kind of data: inputs are flattened; tabular features are standardised with training
split statistics, image and sequence values (already in [0, 1]) are left as they are.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn

from agent.jobs.base import check_arrays, require
from agent.jobs.classifier import CLASSIFIER_METRICS, ClassifierModule
from agent.jobs.datamodule import ArrayDataModule
from agent.space import Float, Int, SearchSpace

MAX_DROPOUT = 0.95


def funnel_shape(
    num_layers: int, max_units: int, num_classes: int, max_dropout: float
) -> tuple[list[int], list[float]]:
    """Hidden widths and dropout rates of the funnel (see the module docstring)."""
    widths = [
        max(1, round(max_units - (max_units - num_classes) * i / num_layers))
        for i in range(num_layers)
    ]
    if num_layers == 1:
        rates = [float(max_dropout)]
    else:
        rates = [max_dropout * i / (num_layers - 1) for i in range(num_layers)]
    return widths, [min(float(p), MAX_DROPOUT) for p in rates]


class FunnelMLP(nn.Module):
    """Plain backbone: Linear + ReLU + Dropout per hidden layer, then a linear output layer."""

    def __init__(
        self, in_features: int, widths: list[int], rates: list[float], num_classes: int
    ) -> None:
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
            self.parameters(),
            lr=hp.learning_rate,
            momentum=hp.momentum,
            weight_decay=hp.weight_decay,
        )


class MLPJob:
    """Job ``mlp``: the LCBench funnel MLP on any dataset kind; minimises ``val_loss``."""

    name = "mlp"
    metric = "val_loss"
    metrics = CLASSIFIER_METRICS
    mode = "min"

    def __init__(self) -> None:
        self.space = SearchSpace(
            [
                Int("batch_size", 16, 512, log=True),
                Float("learning_rate", 1e-4, 1e-1, log=True),
                Float("momentum", 0.1, 0.99),
                Float("weight_decay", 1e-5, 0.1),
                Int("num_layers", 1, 5),
                Int("max_units", 64, 1024, log=True),
                Float("max_dropout", 0.0, 1.0),
            ]
        )

    def check_dataset(self, dataset: Any) -> None:
        check_arrays(self.name, dataset)

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, seed: int
    ) -> tuple[pl.LightningModule, pl.LightningDataModule]:
        require(config, tuple(self.space.names), self.name)
        self.check_dataset(dataset)
        X = dataset.X.reshape(dataset.X.shape[0], -1)
        torch.manual_seed(int(seed))
        model = MLPModule(
            in_features=int(X.shape[1]),
            num_classes=int(dataset.num_classes),
            num_layers=int(config["num_layers"]),
            max_units=int(config["max_units"]),
            max_dropout=float(config["max_dropout"]),
            learning_rate=float(config["learning_rate"]),
            momentum=float(config["momentum"]),
            weight_decay=float(config["weight_decay"]),
        )
        standardise = getattr(dataset, "kind", "tabular") == "tabular"
        data = ArrayDataModule(
            X, dataset.y, train_idx, val_idx, int(config["batch_size"]), standardise, seed=seed
        )
        return model, data
