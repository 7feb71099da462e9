"""A small Lightning project written the way its authors would, with no thought of tune-agent.

The tests write it into a temporary folder (it is not part of the repository) and tune it as it is:
a LightningModule ``Net``, two DataModules over scikit-learn tables, a LightningCLI ``main.py``,
its ``base.yaml`` and a ``space.yaml``.
"""

from __future__ import annotations

from pathlib import Path

MODEL = """
import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn


class Net(pl.LightningModule):
    def __init__(self, lr: float = 0.01, hidden: int = 16, dropout: float = 0.0, optimizer: str = "adam",
                 num_classes: int = 3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.body = nn.Sequential(nn.LazyLinear(hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
"""

DATA = """
import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


class _Table(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, seed: int = 0) -> None:
        super().__init__()
        self.batch_size, self.seed = batch_size, seed
        self.train = self.val = None

    def setup(self, stage=None):
        X, y = self.load()
        X = (X - X.mean(0)) / (X.std(0) + 1e-8)
        order = np.random.default_rng(self.seed).permutation(len(X))
        cut = int(0.8 * len(X))
        tensors = lambda rows: TensorDataset(torch.tensor(X[rows], dtype=torch.float32), torch.tensor(y[rows]))
        self.train, self.val = tensors(order[:cut]), tensors(order[cut:])

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=64)


class WineData(_Table):
    def load(self):
        from sklearn.datasets import load_wine
        return load_wine(return_X_y=True)


class IrisData(_Table):
    def load(self):
        from sklearn.datasets import load_iris
        return load_iris(return_X_y=True)
"""

MAIN = """
from lightning.pytorch.cli import LightningCLI

from tinyproj.data import WineData
from tinyproj.model import Net

if __name__ == "__main__":
    LightningCLI(Net, WineData)
"""

BASE = """
seed_everything: 0
trainer:
  accelerator: cpu
  max_epochs: 10
model:
  hidden: 16
data:
  batch_size: 16
"""

SPACE = """
model.lr: {type: float, low: 1.0e-3, high: 0.3, log: true}
model.hidden: {type: int, low: 4, high: 64, log: true}
model.optimizer: {type: categorical, choices: [adam, sgd]}
model.dropout: {type: float, low: 0.0, high: 0.5, when: {model.optimizer: adam}}
data.batch_size: {type: int, low: 8, high: 64}
"""


def write_project(root: Path) -> Path:
    """Writes the project into ``root`` (a package ``tinyproj`` and its CLI files); returns ``root``."""
    package = root / "tinyproj"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODEL)
    (package / "data.py").write_text(DATA)
    (root / "main.py").write_text(MAIN)
    (root / "base.yaml").write_text(BASE)
    (root / "space.yaml").write_text(SPACE)
    return root
