"""The DataModule every built-in job uses: in-memory arrays split by index.

:class:`ArrayDataModule` owns turning ``(X, y, train_idx, val_idx)`` into seeded, shuffled train
and deterministic validation loaders, and (for tabular data) standardising features with
statistics of the *training split only*, so no validation information leaks into training.
"""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

MAX_VAL_BATCH = 1024


class ArrayDataModule(pl.LightningDataModule):
    """Train/validation loaders over rows ``train_idx`` / ``val_idx`` of ``X`` and ``y``.

    ``batch_size`` is clipped to the training-split size. When the last training batch would
    hold a single sample it is dropped, since BatchNorm cannot train on one value per channel.
    """

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        train_idx: np.ndarray,
        val_idx: np.ndarray,
        batch_size: int,
        standardise: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["X", "y", "train_idx", "val_idx"])
        self.X, self.y = X, y
        self.train_idx = np.asarray(train_idx, dtype=np.int64)
        self.val_idx = np.asarray(val_idx, dtype=np.int64)
        self.batch_size = max(1, min(int(batch_size), len(self.train_idx)))
        self.standardise = standardise
        self.seed = int(seed)
        # the shuffling's generator, one per fit: a checkpoint carries its state
        # (agent.execution.checkpoints), so a resumed trial sees the epochs' orders an unbroken one saw
        self.generator = torch.Generator().manual_seed(self.seed)
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        X_train = np.asarray(self.X[self.train_idx], dtype=np.float32)
        X_val = np.asarray(self.X[self.val_idx], dtype=np.float32)
        if self.standardise:
            mean = X_train.mean(axis=0, keepdims=True)
            std = X_train.std(axis=0, keepdims=True)
            std = np.where(std < 1e-8, 1.0, std).astype(np.float32)
            X_train, X_val = (X_train - mean) / std, (X_val - mean) / std
        self.train_set = _tensors(X_train, self.y[self.train_idx])
        self.val_set = _tensors(X_val, self.y[self.val_idx])

    def train_dataloader(self) -> DataLoader:
        assert self.train_set is not None, "setup() builds the datasets first"
        n = len(self.train_set)
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            generator=self.generator,
            num_workers=0,
            drop_last=n > self.batch_size and n % self.batch_size == 1,
        )

    def val_dataloader(self) -> DataLoader:
        assert self.val_set is not None, "setup() builds the datasets first"
        batch = max(1, min(MAX_VAL_BATCH, len(self.val_set)))
        return DataLoader(self.val_set, batch_size=batch, shuffle=False, num_workers=0)


def _tensors(X: np.ndarray, y: np.ndarray) -> TensorDataset:
    return TensorDataset(
        torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)),
        torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)),
    )
