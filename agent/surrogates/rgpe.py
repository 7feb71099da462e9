"""Ranking-weighted Gaussian-process ensemble (RGPE; Feurer, Letham & Bakshy 2018).

This module owns the RGPE transfer surrogate: one GP per finished *source* study (fitted once by
:func:`fit_source_gps`, cached by the caller) plus a GP on the *target* study, mixed with weights
that say how often each model ranks the target's observations best (:func:`rgpe_weights`). Use it
when a study is warm-started from many past studies on the same search space and some of them may
not resemble the target at all: a misleading source gets weight 0 instead of biasing the search.

Conventions: inputs live in the unit cube `[0,1]^d`; targets are maximised. Standardisation is
done *here*, per task: each source's y and the target's y are shifted and scaled to zero mean and
unit variance before fitting, the ensemble is formed on that standardised target scale, and
:class:`RGPE`'s posterior is mapped back to the caller's units (so ``best_f = train_Y.max()`` is
right for LogEI). Everything that touches BoTorch is double precision.

Prediction is fast because the members are stacked into one batched kernel call
(:mod:`agent.surrogates.gp_stack`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from botorch.models.model import Model
from botorch.posteriors.gpytorch import GPyTorchPosterior
from gpytorch.distributions import MultivariateNormal
from torch import Tensor

from agent.surrogates.base import SingleOutputModel
from agent.surrogates.gp import fit_gp, standardise, torch_threads
from agent.surrogates.gp_stack import _predictor
from agent.surrogates.stored_means import JITTER

CHANCE_MIN_POINTS = 5
CHANCE_Z = 1.0
DILUTION_QUANTILE = 0.95
MAX_RANK_POINTS = 100


def _misranked(f: Tensor, y: Tensor) -> Tensor:
    """Ordered pairs misranked by samples `m x S x n` against observations `n` → `m x S`.

    Counts ``[f_j < f_k] xor [y_j < y_k]`` as ``Σ A·(1 - 2B) + Σ B`` with ``A = [f_j < f_k]`` and
    ``B = [y_j < y_k]``: one mat-vec per row of ``f`` instead of a huge boolean reduction.
    """
    below = (y.unsqueeze(-1) < y.unsqueeze(-2)).float().reshape(-1)  # counts < 2^24: float32 is exact
    out = []
    for fm in f:  # one `S x n x n` comparison at a time keeps memory bounded
        A = (fm.unsqueeze(-1) < fm.unsqueeze(-2)).float().reshape(fm.shape[0], -1)
        out.append(A @ (1.0 - 2.0 * below) + below.sum())
    return torch.stack(out).double().round()


def _sample_mvn(mean: Tensor, cov: Tensor, n_samples: int, gen: torch.Generator) -> Tensor:
    """Joint samples: means `... x n`, covariances `... x n x n` → `... x S x n`."""
    n = mean.shape[-1]
    eye = torch.eye(n, dtype=cov.dtype)
    scale = cov.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(1e-12)[..., None, None]
    L, info = torch.linalg.cholesky_ex(cov + 1e-8 * scale * eye)
    if bool((info > 0).any()):
        L, _ = torch.linalg.cholesky_ex(cov + 1e-4 * scale * eye)
    z = torch.randn(*mean.shape[:-1], n_samples, n, generator=gen, dtype=mean.dtype)
    return mean.unsqueeze(-2) + z @ L.transpose(-1, -2)


def _source_losses(
    source_models: Sequence[Model], X: Tensor, y: Tensor, n_samples: int, gen: torch.Generator
) -> Tensor:
    """Ranking loss of each source's posterior samples at the target points → `s x S`."""
    mean, cov = _predictor(source_models).predict(X.unsqueeze(0))
    return _misranked(_sample_mvn(mean[:, 0], cov[:, 0], n_samples, gen), y)


def _loo_losses(target_model: Any, idx: Tensor, n_samples: int, gen: torch.Generator) -> Tensor:
    """Ranking loss of the target GP by leave-one-out posteriors (hyperparameters fixed) → `S`.

    Scored on the target's training points ``idx`` (all of them unless subsampled). LOO model
    ``i`` is the GP conditioned on those points but ``i``; a sample counts the pairs ``(i, j)``
    where its value at the held-out ``x_i`` versus ``x_j`` contradicts the observed order.
    """
    X = target_model.train_inputs[0][idx].double()
    y = target_model.train_targets[idx].double()
    n = X.shape[0]
    K = target_model.covar_module(X).to_dense().double()
    m = target_model.mean_module(X).double().expand(n)
    noise = target_model.likelihood.noise.double().reshape(())
    keep = torch.stack([torch.cat([torch.arange(i), torch.arange(i + 1, n)]) for i in range(n)])  # n x n-1
    L = torch.linalg.cholesky(K[keep.unsqueeze(-1), keep.unsqueeze(-2)] + (noise + JITTER) * torch.eye(n - 1).double())
    Kak = K[:, keep].permute(1, 0, 2)  # n(models) x n(points) x n-1
    mean = m + (Kak @ torch.cholesky_solve((y - m)[keep].unsqueeze(-1), L)).squeeze(-1)  # n x n
    W = torch.linalg.solve_triangular(L, Kak.transpose(-1, -2), upper=False)
    f = _sample_mvn(mean, K - W.transpose(-1, -2) @ W, n_samples, gen).transpose(0, 1)  # S x n x n
    held = f.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # S x n x 1
    below = (y.unsqueeze(-1) < y.unsqueeze(-2)).float().reshape(-1)
    A = (held < f).float().reshape(n_samples, -1)
    return (A @ (1.0 - 2.0 * below) + below.sum()).double().round()


def _better_than_chance(src: Tensor, n: int) -> Tensor:
    """Which sources rank the target's points better than a random order would (`s` booleans).

    The negative-transfer guard: a source whose responses say nothing about the target (another
    problem, shuffled values) ranks the target's points like a coin, and dilution alone does not
    drop it while the target GP is still poor. Under a random order the ``2 x`` discordant-pair
    loss has mean ``n(n-1)/2`` and standard deviation ``2 sqrt(n(n-1)(2n+5)/72)`` (Kendall's tau
    null); a source is kept only if its median loss is ``CHANCE_Z`` deviations better. With fewer
    than ``CHANCE_MIN_POINTS`` points there is no evidence either way and every source is kept.
    """
    if n < CHANCE_MIN_POINTS:
        return torch.ones(src.shape[0], dtype=torch.bool)
    pairs = n * (n - 1) / 2
    sd = 2.0 * math.sqrt(n * (n - 1) * (2 * n + 5) / 72.0)
    return src.median(dim=-1).values <= pairs - CHANCE_Z * sd


def rgpe_weights(
    source_models: Sequence[Model],
    target_model: Model | None,
    train_X: Tensor,
    train_Y: Tensor,
    n_samples: int = 256,
    seed: int = 0,
    max_points: int = MAX_RANK_POINTS,
) -> Tensor:
    """Ensemble weights `(n_sources + 1)`: sources in order, the target model last.

    Each weight is the share of posterior samples in which that model misranks the fewest pairs
    of target observations (ties broken at random). Sources are sampled jointly at ``train_X``; the
    target is scored by leave-one-out posteriors of ``target_model`` (a GP fitted to ``train_X``,
    ``train_Y``; fitted here on standardised ``train_Y`` if None). A source whose median loss
    exceeds the target's 95th-percentile loss is dropped (weight 0), the paper's guard against
    weight dilution. With fewer than 2 target points there is no ranking to score: the weight is
    uniform over the sources (all on the target if there are none). Above ``max_points`` target
    points a random subset is ranked (LOO cost grows as `n^4`).
    Args: ``train_X`` `n x d` in the cube, ``train_Y`` `n x 1` (any scale: only its order matters).
    """
    s, n = len(source_models), train_X.shape[0]
    if n < 2 or s == 0:
        w = torch.zeros(s + 1, dtype=torch.double)
        w[:s] = 1.0 / s if s else 0.0
        w[s] = 0.0 if s else 1.0
        return w
    X = train_X.double()
    z, _, _ = standardise(train_Y.double().reshape(-1))
    if target_model is None:
        target_model = fit_gp(X, z.reshape(-1, 1))
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randperm(n, generator=gen)[:max_points].sort().values if n > max_points else torch.arange(n)
    with torch.no_grad():
        src = _source_losses(source_models, X[idx], z[idx], n_samples, gen)
        tgt = _loo_losses(target_model, idx, n_samples, gen)
    diluted = src.median(dim=-1).values > torch.quantile(tgt, DILUTION_QUANTILE)
    src[diluted | ~_better_than_chance(src, len(idx))] = math.inf
    losses = torch.cat([src, tgt.unsqueeze(0)])  # s+1 x S
    ties = torch.rand(losses.shape, generator=gen, dtype=torch.double) * 0.5
    best = (losses + ties).argmin(dim=0)
    return torch.bincount(best, minlength=s + 1).double() / n_samples


class RGPE(SingleOutputModel):
    """Weighted GP ensemble: mean `Σ w_i μ_i(X)`, covariance `Σ w_i² Σ_i(X)`, one output.

    Members with weight 0 are dropped at construction. Predictions are formed on the standardised
    target scale and mapped back with ``y_mean``/``y_std`` (the caller's units).
    """

    def __init__(self, models: Sequence[Model], weights: Tensor, y_mean: float = 0.0, y_std: float = 1.0) -> None:
        super().__init__()
        weights = torch.as_tensor(weights, dtype=torch.double).reshape(-1)
        if weights.numel() != len(models):
            raise ValueError(f"{len(models)} models but {weights.numel()} weights")
        keep = [i for i in range(len(models)) if float(weights[i]) > 0]
        if not keep:
            raise ValueError("all ensemble weights are zero")
        self.members = [models[i] for i in keep]  # plain list: not registered as submodules
        self.weights = weights[keep]
        self.y_mean, self.y_std = float(y_mean), float(y_std)
        self._predictor = _predictor(self.members)
        # Share of the ensemble on the sources (all members but the target, which build_rgpe puts last).
        self.source_weight = float(weights[: len(models) - 1].sum()) if self.has_target else float(weights.sum())

    has_target = True  # build_rgpe's convention: the last member is the target GP

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: Any = None,
        **kwargs: Any,
    ) -> GPyTorchPosterior:
        """Joint posterior at `b x q x d` (or `q x d`) inputs; observation noise is not added."""
        batch, q, d = X.shape[:-2], X.shape[-2], X.shape[-1]
        mean, cov = self._predictor.predict(X.double().reshape(-1, q, d))  # s x B x q (x q)
        w = self.weights.to(mean)
        mean = torch.einsum("s,sbq->bq", w, mean)
        cov = torch.einsum("s,sbqr->bqr", w.pow(2), cov)
        cov = 0.5 * (cov + cov.transpose(-1, -2)) + 1e-9 * torch.eye(q, dtype=cov.dtype)
        mean = self.y_mean + self.y_std * mean
        cov = self.y_std**2 * cov
        mvn = MultivariateNormal(mean.reshape(*batch, q), cov.reshape(*batch, q, q))
        post = GPyTorchPosterior(mvn)
        return posterior_transform(post) if posterior_transform is not None else post


def build_rgpe(
    source_models: Sequence[Model],
    train_X: Tensor,
    train_Y: Tensor,
    seed: int = 0,
    n_samples: int = 256,
    warm_state: dict | None = None,
    covar: Callable[[], Any] | None = None,
) -> RGPE:
    """Fits the target GP on standardised `n x 1` ``train_Y`` at `n x d` ``train_X`` and mixes it in.

    ``warm_state`` is passed to :func:`fit_gp` so consecutive steps warm-start the target fit;
    ``covar`` makes the target GP's kernel (the sources' GPs were fitted with the same one).
    With no target points the ensemble is the uniform mixture of the sources.
    """
    with torch_threads(1):
        X = train_X.double()
        y = train_Y.double().reshape(-1)
        if y.numel() == 0:
            if not source_models:
                raise ValueError("no target observations and no source models")
            model = RGPE(list(source_models), torch.full((len(source_models),), 1.0 / len(source_models)))
            model.has_target, model.source_weight = False, 1.0
            return model
        z, y_mean, y_std = standardise(y)
        target = fit_gp(X, z.reshape(-1, 1), warm_state=warm_state, covar_module=covar() if covar is not None else None)
        target.eval()
        weights = rgpe_weights(source_models, target, X, z.reshape(-1, 1), n_samples=n_samples, seed=seed)
        return RGPE([*source_models, target], weights, y_mean, y_std)
