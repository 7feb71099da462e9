"""The ``cnn`` job's network: the paper-003 backbone and its LightningModule (Lightning is
imported here, by a trial, and not by loading the job: :mod:`agent.jobs.cnn`)."""

from __future__ import annotations

import torch
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import nn

from agent.jobs.classifier import ClassifierModule, exponential_decay
from agent.jobs.shapes import FC_UNITS, conv_filters


class ConvNet(nn.Module):
    """Plain backbone: conv blocks with adaptive pooling, global average pool, dropout FC head."""

    def __init__(
        self, in_shape: tuple[int, int, int], num_classes: int, conv_layers: int, fc_layers: int, dropout: float
    ) -> None:
        super().__init__()
        channels, height, width = in_shape
        blocks: list[nn.Module] = []
        for filters in conv_filters(conv_layers):
            blocks += [
                nn.Conv2d(channels, filters, kernel_size=3, padding=1),
                nn.BatchNorm2d(filters),
                nn.ReLU(inplace=True),
            ]
            if height > 1 or width > 1:
                kernel = (min(2, height), min(2, width))
                blocks.append(nn.MaxPool2d(kernel))
                height, width = height // kernel[0], width // kernel[1]
            channels = filters
        blocks += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*blocks)
        head: list[nn.Module] = []
        for _ in range(fc_layers):
            head += [nn.Linear(channels, FC_UNITS), nn.ReLU(inplace=True), nn.Dropout(dropout)]
            channels = FC_UNITS
        head.append(nn.Linear(channels, num_classes))
        self.classifier = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class CNNModule(ClassifierModule):
    """The paper-003 CNN trained with Adam and per-step exponential learning-rate decay."""

    def __init__(
        self,
        in_shape: tuple[int, int, int],
        num_classes: int,
        conv_layers: int = 3,
        fc_layers: int = 1,
        dropout: float = 0.5,
        lr_log10: float = -3.0,
        decay_log10: float = -6.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        channels, height, width = in_shape  # any sequence of three (a tuple or a list)
        self.net = ConvNet((channels, height, width), num_classes, conv_layers, fc_layers, dropout)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        hp = self.hparams
        optimizer = torch.optim.Adam(self.parameters(), lr=10.0 ** hp["lr_log10"])
        scheduler = exponential_decay(optimizer, 10.0 ** hp["decay_log10"])
        return {"optimizer": optimizer, "lr_scheduler": scheduler}
