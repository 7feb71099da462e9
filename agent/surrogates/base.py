"""What every single-output, non-batched surrogate of this package shares as a BoTorch ``Model``."""

from __future__ import annotations

import torch
from botorch.models.model import Model


class SingleOutputModel(Model):
    """One output, no model batch: subclasses only implement ``posterior``."""

    @property
    def num_outputs(self) -> int:
        return 1

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size([])
