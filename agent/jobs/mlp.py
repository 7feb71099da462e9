"""The built-in ``mlp`` job: LCBench's funnel-shaped MLP trained with SGD.

Owns the LCBench space (batch size, learning rate, momentum, weight decay, depth, width,
dropout), the funnel shape (:func:`funnel_shape`), the backbone (:class:`FunnelMLP`), its
LightningModule (:class:`MLPModule`, in :mod:`agent.jobs.mlp_net`) and the job object (:class:`MLPJob`).

Funnel: with ``L`` hidden layers, layer ``i`` (0-based) has
``round(max_units - (max_units - num_classes) * i / L)`` units, so widths fall linearly from
``max_units`` towards the number of classes; dropout rises linearly from 0 on the first hidden layer
to ``max_dropout`` on the last (a single hidden layer gets ``max_dropout``). Every dropout is
clipped to ``MAX_DROPOUT`` = 0.95 so that ``max_dropout = 1`` does not zero every activation.

Works on any kind of data: inputs are flattened; tabular features are standardised with training
split statistics, image and sequence values (already in [0, 1]) are left as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agent.jobs.base import CLASSIFIER_METRICS, check_arrays, require
from agent.jobs.shapes import MAX_DROPOUT, funnel_shape  # noqa: F401 - the funnel, described above
from agent.space import Float, Int, SearchSpace

if TYPE_CHECKING:
    import lightning.pytorch as pl


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
        # Lightning is imported here, by the first trial, not by loading the job
        import torch

        from agent.jobs.datamodule import ArrayDataModule
        from agent.jobs.mlp_net import MLPModule

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
        data = ArrayDataModule(X, dataset.y, train_idx, val_idx, int(config["batch_size"]), standardise, seed=seed)
        return model, data
