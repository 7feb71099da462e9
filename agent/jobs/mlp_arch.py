"""The built-in ``mlp-arch`` job: an MLP whose depth decides which hyperparameters exist.

Paper 002's conditional space (§3.2): 1 to ``MAX_LAYERS`` hidden layers; layer ``l``'s units,
dropout and L2 weight exist only when the network has at least ``l`` layers; learning rate,
momentum and batch size always. With five layers that is 19 dimensions, of which 15 are
conditional (the paper's had up to 23). Conditions use the same :class:`~agent.space.Condition`
machinery as every job, so a trial's configuration (and its MLflow params) holds only the active
hyperparameters, and the GP's arc kernel (:mod:`agent.surrogates.arc`) knows which ones count.

Each hidden layer is Linear + ReLU + Dropout; SGD gives every layer's weights its own L2 weight
(parameter groups); the output layer has none. Inputs are flattened; tabular features are
standardised with training-split statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agent.jobs.base import CLASSIFIER_METRICS, check_arrays, require
from agent.space import Condition, Float, Int, SearchSpace

if TYPE_CHECKING:
    import lightning.pytorch as pl

MAX_LAYERS = 5


def arch_space(max_layers: int = MAX_LAYERS) -> SearchSpace:
    params: list[Any] = [
        Float("learning_rate", 1e-4, 0.5, log=True),
        Float("momentum", 0.0, 0.99),
        Int("batch_size", 16, 256, log=True),
        Int("num_layers", 1, max_layers),
    ]
    for layer in range(1, max_layers + 1):
        deep_enough = Condition("num_layers", tuple(range(layer, max_layers + 1)))
        params += [
            Int(f"units_{layer}", 16, 1024, log=True, condition=deep_enough),
            Float(f"dropout_{layer}", 0.0, 0.8, condition=deep_enough),
            Float(f"l2_{layer}", 1e-6, 1e-1, log=True, condition=deep_enough),
        ]
    return SearchSpace(params)


class MLPArchJob:
    """Job ``mlp-arch``: depth, per-layer width, dropout and L2 (conditional); minimises ``val_loss``."""

    name = "mlp-arch"
    metric = "val_loss"
    metrics = CLASSIFIER_METRICS
    mode = "min"

    def __init__(self) -> None:
        self.space = arch_space()

    def check_dataset(self, dataset: Any) -> None:
        check_arrays(self.name, dataset)

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, seed: int
    ) -> tuple[pl.LightningModule, pl.LightningDataModule]:
        require(config, ("learning_rate", "momentum", "batch_size", "num_layers"), self.name)
        self.space.validate(config)
        self.check_dataset(dataset)
        # Lightning is imported here, by the first trial, not by loading the job
        import torch

        from agent.jobs.datamodule import ArrayDataModule
        from agent.jobs.mlp_arch_net import ArchMLPModule

        depth = int(config["num_layers"])
        X = dataset.X.reshape(dataset.X.shape[0], -1)
        torch.manual_seed(int(seed))
        model = ArchMLPModule(
            in_features=int(X.shape[1]),
            num_classes=int(dataset.num_classes),
            units=[int(config[f"units_{i}"]) for i in range(1, depth + 1)],
            dropouts=[float(config[f"dropout_{i}"]) for i in range(1, depth + 1)],
            l2=[float(config[f"l2_{i}"]) for i in range(1, depth + 1)],
            learning_rate=float(config["learning_rate"]),
            momentum=float(config["momentum"]),
        )
        standardise = getattr(dataset, "kind", "tabular") == "tabular"
        data = ArrayDataModule(X, dataset.y, train_idx, val_idx, int(config["batch_size"]), standardise, seed=seed)
        return model, data
