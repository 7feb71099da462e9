"""The built-in ``cnn`` job: the target CNN of paper 003 (section 5.1.2, Table 1).

Owns the six-dimensional search space of Table 1, the backbone (:class:`ConvNet`), its
LightningModule (:class:`CNNModule` in :mod:`agent.jobs.cnn_net`: Adam with exponential learning-rate decay
per optimisation step, ``lr_t = 10**lr_log10 * exp(-10**decay_log10 * t)``) and the job object (:class:`CNNJob`).

Architecture: ``conv_layers`` blocks of 3x3 convolution (padding 1) + BatchNorm + ReLU, with
filters rising then falling from 32 (five layers: 32, 64, 128, 64, 32); after each block a max-pool
of kernel ``(min(2, H), min(2, W))`` while the feature map is larger than 1x1, so 8x8 digits and
1 x L sequences work with any depth. Global average pooling then feeds ``fc_layers`` x 256 ReLU
units with dropout and a final linear layer. Sequences ``n x C x L`` are treated as ``C x 1 x L``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agent.errors import JobError
from agent.jobs.base import CLASSIFIER_METRICS, check_arrays, require
from agent.jobs.shapes import FC_UNITS, conv_filters  # noqa: F401 - the architecture, described above
from agent.space import Float, Int, SearchSpace

if TYPE_CHECKING:
    import lightning.pytorch as pl


def as_images(X: np.ndarray) -> np.ndarray:
    """Images pass through; sequences ``n x C x L`` become ``n x C x 1 x L``."""
    return X[:, :, None, :] if X.ndim == 3 else X


class CNNJob:
    """Job ``cnn``: the Table-1 space over the paper-003 CNN; minimises ``val_loss``."""

    name = "cnn"
    metric = "val_loss"
    metrics = CLASSIFIER_METRICS
    mode = "min"

    def __init__(self) -> None:
        self.space = SearchSpace(
            [
                Float("lr_log10", -5.0, 0.0),
                Float("decay_log10", -8.0, -4.0),
                Int("batch_size", 100, 400),
                Int("conv_layers", 1, 9),
                Int("fc_layers", 1, 3),
                Float("dropout", 0.0, 0.9),
            ]
        )

    def check_dataset(self, dataset: Any) -> None:
        kind = getattr(dataset, "kind", None)
        if kind not in ("image", "sequence"):
            raise JobError(f"job 'cnn' needs image or sequence data; dataset {dataset.name} is {kind} (use --job mlp)")
        check_arrays(self.name, dataset)
        expected = 4 if kind == "image" else 3
        if dataset.X.ndim != expected:
            raise JobError(
                f"job 'cnn' needs {kind} X with {expected} dimensions; "
                f"dataset {dataset.name} has shape {dataset.X.shape}"
            )

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, seed: int
    ) -> tuple[pl.LightningModule, pl.LightningDataModule]:
        require(config, tuple(self.space.names), self.name)
        self.check_dataset(dataset)
        # Lightning is imported here, by the first trial, not by loading the job
        import torch

        from agent.jobs.cnn_net import CNNModule
        from agent.jobs.datamodule import ArrayDataModule

        X = as_images(dataset.X)
        _, channels, height, width = X.shape
        torch.manual_seed(int(seed))
        model = CNNModule(
            in_shape=(int(channels), int(height), int(width)),
            num_classes=int(dataset.num_classes),
            conv_layers=int(config["conv_layers"]),
            fc_layers=int(config["fc_layers"]),
            dropout=float(config["dropout"]),
            lr_log10=float(config["lr_log10"]),
            decay_log10=float(config["decay_log10"]),
        )
        batch_size = int(config["batch_size"])
        data = ArrayDataModule(X, dataset.y, train_idx, val_idx, batch_size, seed=seed)
        return model, data
