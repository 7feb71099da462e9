"""The neighbours' prior mean (paper 000, Algorithm 3) as a GPyTorch mean module.

Use it when a study is warm-started: the target GP's prior mean becomes ``a · mean_k f_k(x) + b``
where each ``f_k`` is the posterior mean of a GP fitted to neighbour ``k``'s standardised responses.
Paper 000 fixes the prior mean to the neighbours' average; learning the scale ``a`` and offset ``b``
with the other GP hyperparameters (by marginal likelihood) lets the target data switch a misleading
neighbour surface off (``a → 0``) instead of fighting it, which is where it does better than fixed.

The neighbour GPs are held outside the module tree on purpose: ``model.train()`` on the target must
not put them into training mode (where they would return their prior), and fitting the target
must not move their hyperparameters.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from gpytorch.means import Mean


def fit_neighbour_surface(U: np.ndarray, y: np.ndarray) -> Any:
    """A GP on a neighbour's cube points `n x d` and maximised values `n`, as normal scores
    (the same rank transform the target's values get in :func:`agent.tuning.bo.propose_next`)."""
    from agent.tuning.bo import fit_gp, impute_failures, normal_scores

    z = normal_scores(impute_failures(np.asarray(y, dtype=float)))
    X = torch.as_tensor(np.asarray(U), dtype=torch.double)
    model = fit_gp(X, torch.as_tensor(z, dtype=torch.double).reshape(-1, 1))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


class NeighbourMean(Mean):
    """Prior mean from neighbour surfaces: `batch x n x d` → `batch x n`."""

    def __init__(self, surfaces: Sequence[Any], init_scale: float = 1.0) -> None:
        super().__init__()
        if not surfaces:
            raise ValueError("NeighbourMean needs at least one neighbour surface")
        self.__dict__["_surfaces"] = list(surfaces)  # not submodules: see the module docstring
        self.register_parameter("scale", torch.nn.Parameter(torch.tensor(float(init_scale), dtype=torch.double)))
        self.register_parameter("offset", torch.nn.Parameter(torch.tensor(0.0, dtype=torch.double)))

    def neighbour_average(self, x: torch.Tensor) -> torch.Tensor:
        outs = [s.posterior(x).mean.squeeze(-1) for s in self._surfaces]
        return torch.stack(outs, dim=0).mean(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.neighbour_average(x) + self.offset
