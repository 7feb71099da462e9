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

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gpytorch.means import Mean


def fit_neighbour_surface(U: np.ndarray, y: np.ndarray) -> Any:
    """A GP on a neighbour's cube points `n x d` and maximised values `n`, as normal scores
    (the same rank transform the target's values get in :class:`agent.samplers.bo.BoSampler`)."""
    from agent.surrogates.gp import fit_gp, impute_failures, normal_scores

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
        if "_stack" not in self.__dict__:
            self.__dict__["_stack"] = _stacked(self._surfaces)
        if self._stack is not None:  # all surfaces' means in one batched kernel call
            return self._stack.predict_mean(x).mean(dim=0)
        outs = [s.posterior(x).mean.squeeze(-1) for s in self._surfaces]
        return torch.stack(outs, dim=0).mean(dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.neighbour_average(x) + self.offset


def observation_distances(surfaces: Sequence[Any], U: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distance of each source surface to the target, from the target's own observations only.

    Paper 003's target distance (eq. 2: mean absolute difference of the two datasets' normalised
    responses over shared configurations) with the target's evaluated configurations as the shared
    set: the source's response there comes from its GP surface. Both sides are rank-normalised
    (normal scores), so tasks with different scales compare. Use it when the target has no dataset
    sample to compute meta-features from (imported histories, benchmark tables).
    Args: ``U`` `n x d` cube points of the target, ``y`` `n` maximised values (``n >= 2``).
    """
    from agent.surrogates.gp import impute_failures, normal_scores

    z = normal_scores(impute_failures(np.asarray(y, dtype=float)))
    X = torch.as_tensor(np.asarray(U), dtype=torch.double)
    with torch.no_grad():
        means = _stacked(surfaces)
        if means is not None:
            preds = means.predict_mean(X).numpy()
        else:
            preds = np.stack([s.posterior(X).mean.reshape(-1).numpy() for s in surfaces])
    return np.array([float(np.abs(normal_scores(m) - z).mean()) for m in preds])


def _stacked(surfaces: Sequence[Any]) -> Any:
    """The surfaces as one batched predictor (:class:`agent.surrogates.gp_stack._GPStack`), or None."""
    from agent.surrogates.gp_stack import _GPStack, _is_stackable, _kernel_parts

    if not surfaces or not all(_is_stackable(s) for s in surfaces):
        return None
    if len({_kernel_parts(s)[0] for s in surfaces}) != 1:  # type: ignore[index]
        return None
    key = tuple(id(s) for s in surfaces)  # the entry holds the surfaces, so their ids stay theirs
    if key not in _STACKS:
        _STACKS[key] = (_GPStack.of_models(surfaces), list(surfaces))
        while len(_STACKS) > 64:
            _STACKS.pop(next(iter(_STACKS)))
    return _STACKS[key][0]


_STACKS: dict[tuple[int, ...], Any] = {}  # (batched predictor, surfaces) by the surfaces' identities


class ObservationNeighbours:
    """The neighbours' prior mean with neighbours chosen from the target's observations.

    Surfaces of all source tasks are fitted once (:func:`fit_neighbour_surface`); every call with
    the target's observations so far re-ranks them by :func:`observation_distances` and returns a
    :class:`NeighbourMean` over the ``k`` nearest, so the neighbours are re-chosen as trials arrive.
    With fewer than ``min_points`` observations there is nothing to rank by and the mean averages
    every source. ``chosen`` keeps the indices picked at the last call.
    """

    def __init__(
        self,
        sources: Sequence[tuple[np.ndarray, np.ndarray]],
        k: int = 3,
        min_points: int = 3,
        surfaces: Sequence[Any] | None = None,
    ) -> None:
        """``surfaces`` (already fitted, one per source) skips fitting; ``sources`` is then ignored."""
        from agent.surrogates.gp import torch_threads

        if surfaces is not None:
            self.surfaces = list(surfaces)
        else:
            with torch_threads(1):
                self.surfaces = [fit_neighbour_surface(U, y) for U, y in sources if len(y) >= 3]
        if not self.surfaces:
            raise ValueError("observation-based neighbours need at least one source with 3 evaluations")
        self.k, self.min_points = k, min_points
        self.chosen: list[int] = list(range(len(self.surfaces)))

    def __call__(self, U: np.ndarray | None = None, y: np.ndarray | None = None) -> NeighbourMean:
        if U is None or y is None or len(y) < self.min_points:
            self.chosen = list(range(len(self.surfaces)))
        else:
            self.chosen = [
                int(i) for i in np.argsort(observation_distances(self.surfaces, U, y), kind="stable")[: self.k]
            ]
        return NeighbourMean([self.surfaces[i] for i in self.chosen])
