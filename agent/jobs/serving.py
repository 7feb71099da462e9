"""A trained classifier as it is served: raw rows in, class probabilities out.

:class:`RawClassifier` encodes rows as loading encoded the dataset (:mod:`agent.data.inputs`), and
:class:`ServingModel` applies the standardisation the data module applied and the trained network.
The study keeps these on its best trials' runs (:mod:`agent.execution.keep`) and
``best --register`` registers them (:mod:`agent.ops.models`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn


class ServingModel(nn.Module):
    """Rows of the dataset's ``X`` in, class probabilities out: ``softmax(net((x - mean) / std))``,
    each row first shaped as the job's data module held it (``in_shape``: the mlp flattens images)."""

    mean: torch.Tensor  # buffers, registered in __init__
    std: torch.Tensor

    def __init__(
        self, net: nn.Module, mean: np.ndarray | None, std: np.ndarray | None, in_shape: tuple[int, ...] | None = None
    ) -> None:
        super().__init__()
        self.net = net
        self.in_shape = tuple(in_shape) if in_shape is not None else None
        shape = (1,)
        self.register_buffer(
            "mean", torch.as_tensor(mean if mean is not None else np.zeros(shape), dtype=torch.float32)
        )
        self.register_buffer("std", torch.as_tensor(std if std is not None else np.ones(shape), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_shape is not None:
            x = x.reshape(x.shape[0], *self.in_shape)
        return torch.softmax(self.net((x.float() - self.mean) / self.std), dim=-1)


def serving_model(module: Any, datamodule: Any) -> ServingModel:
    """The trained ``module`` behind the standardisation ``datamodule`` applied
    (an :class:`agent.jobs.datamodule.ArrayDataModule`)."""
    mean = std = None
    if getattr(datamodule, "standardise", False):
        X_train = np.asarray(datamodule.X[datamodule.train_idx], dtype=np.float32)
        mean = X_train.mean(axis=0, keepdims=True)
        std = np.where(X_train.std(axis=0, keepdims=True) < 1e-8, 1.0, X_train.std(axis=0, keepdims=True))
    module.eval()
    return ServingModel(module, mean, std, tuple(int(d) for d in np.shape(datamodule.X)[1:])).eval()


class RawClassifier:
    """What is registered: rows as the dataset came (a table's columns, flat pixel values: see
    :class:`agent.data.inputs.RawInputs`) in, class probabilities out, one column per class name.
    A dataset with no raw-input record (an image folder, an .npz) takes rows shaped as its ``X``."""

    def __init__(self, model: ServingModel, inputs: Any, class_names: Sequence[str]) -> None:
        self.model, self.inputs, self.class_names = model.eval(), inputs, [str(c) for c in class_names]

    def predict(self, rows: Any) -> Any:
        import pandas as pd

        X = self.inputs.to_features(rows) if self.inputs is not None else np.asarray(rows, dtype=np.float32)
        with torch.no_grad():
            probabilities = self.model(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy()
        return pd.DataFrame(probabilities.astype(np.float64), columns=self.class_names)


def serving_example(dataset: Any, val_idx: Any) -> Any:
    """Five rows as the dataset came (its raw-input record's example), or five validation rows of ``X``."""
    inputs = getattr(dataset, "inputs", None)
    if inputs is not None:
        return inputs.example
    return np.asarray(dataset.X[np.asarray(val_idx)[:5]], dtype=np.float32)
