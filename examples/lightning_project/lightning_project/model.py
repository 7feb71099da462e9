"""An MLP image classifier: flatten, hidden layers, dropout; Adam or SGD."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn


class LitClassifier(pl.LightningModule):
    def __init__(
        self,
        lr: float = 1e-3,
        hidden: int = 64,
        layers: int = 1,
        dropout: float = 0.1,
        optimizer: str = "adam",
        momentum: float = 0.9,
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        blocks: list[nn.Module] = [nn.Flatten()]
        for i in range(layers):
            blocks += [nn.LazyLinear(hidden) if i == 0 else nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout)]
        blocks.append(nn.LazyLinear(num_classes) if layers == 0 else nn.Linear(hidden, num_classes))
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        if self.hparams.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=self.hparams.momentum)
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
