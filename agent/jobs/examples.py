"""A small user job to copy from: softmax regression, loadable as ``agent.jobs.examples:logistic``.

Shows everything a job needs (see :class:`agent.jobs.base.Job`): a search space, a default metric
and mode, a dataset check and ``build``. It also shows a *conditional* parameter: ``momentum``
exists only when ``optimizer == "sgd"``; for ``"adam"`` the config passed to ``build`` simply has
no ``momentum`` key, so ``build`` reads it with ``config.get``.
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
from agent.space import Categorical, Condition, Float, SearchSpace

BATCH_SIZE = 64


class LogisticModule(ClassifierModule):
    """Softmax regression: one linear layer on flattened inputs, trained with SGD or Adam."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        lr: float = 1e-2,
        weight_decay: float = 1e-4,
        optimizer: str = "sgd",
        momentum: float | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        if hp["optimizer"] == "adam":
            return torch.optim.Adam(self.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
        momentum = 0.0 if hp["momentum"] is None else hp["momentum"]
        return torch.optim.SGD(self.parameters(), lr=hp["lr"], momentum=momentum, weight_decay=hp["weight_decay"])


class LogisticJob:
    """Job ``logistic``: softmax regression on any dataset; minimises ``val_loss``."""

    name = "logistic"
    metric = "val_loss"
    metrics = CLASSIFIER_METRICS
    mode = "min"

    def __init__(self) -> None:
        self.space = SearchSpace(
            [
                Float("lr", 1e-4, 1.0, log=True),
                Float("weight_decay", 1e-6, 1e-2, log=True),
                Categorical("optimizer", ("sgd", "adam")),
                Float("momentum", 0.0, 0.99, condition=Condition("optimizer", ("sgd",))),
            ]
        )

    def check_dataset(self, dataset: Any) -> None:
        check_arrays(self.name, dataset)

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, seed: int
    ) -> tuple[pl.LightningModule, pl.LightningDataModule]:
        require(config, ("lr", "weight_decay", "optimizer"), self.name)
        X = dataset.X.reshape(dataset.X.shape[0], -1)
        torch.manual_seed(int(seed))
        model = LogisticModule(
            in_features=int(X.shape[1]),
            num_classes=int(dataset.num_classes),
            lr=float(config["lr"]),
            weight_decay=float(config["weight_decay"]),
            optimizer=str(config["optimizer"]),
            momentum=config.get("momentum"),  # absent when optimizer == "adam"
        )
        standardise = getattr(dataset, "kind", "tabular") == "tabular"
        data = ArrayDataModule(X, dataset.y, train_idx, val_idx, BATCH_SIZE, standardise, seed=seed)
        return model, data


logistic = LogisticJob()
