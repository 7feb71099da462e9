"""Many exact GPs evaluated as one: the stack behind RGPE's ensemble and the source models' means.

The GPs that :func:`agent.surrogates.gp.fit_gp` builds (constant mean, ARD RBF or Matérn-5/2 with
or without an outputscale, or the arc kernel of conditional spaces; Gaussian noise,
``Standardize``) are stacked: their training data (embedded, for the arc kernel), `K^-1 y` and
Cholesky inverses are padded to one `s x N` batch, so all members are evaluated in one batched
kernel call whatever the number of sources. Any other BoTorch model falls back to a loop over
``model.posterior``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from agent.surrogates.source_gp import JITTER


def _matern52(x1: Tensor, x2: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Matérn-5/2 between `... x a x d` and `... x b x d` (lengthscale `... x 1 x d`) → `... x a x b`."""
    diff = (x1 / lengthscale).unsqueeze(-2) - (x2 / lengthscale).unsqueeze(-3)
    d2 = diff.pow(2).sum(-1).clamp_min(1e-30)
    r = d2.sqrt()
    return outputscale[..., None, None] * (1 + math.sqrt(5) * r + 5.0 / 3.0 * d2) * torch.exp(-math.sqrt(5) * r)


def _rbf(x1: Tensor, x2: Tensor, lengthscale: Tensor, outputscale: Tensor) -> Tensor:
    """Squared-exponential kernel, same shapes as :func:`_matern52`."""
    diff = (x1 / lengthscale).unsqueeze(-2) - (x2 / lengthscale).unsqueeze(-3)
    return outputscale[..., None, None] * torch.exp(-0.5 * diff.pow(2).sum(-1))


def _kernel_parts(model: Any) -> tuple[str, Any, Any] | None:
    """(``"matern52"``, ``"rbf"`` or ``"arc"``, base kernel, outputscale or None) of a stackable kernel."""
    from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel

    from agent.surrogates.arc import is_arc_kernel

    kernel = getattr(model, "covar_module", None)
    outputscale = None
    if isinstance(kernel, ScaleKernel):
        kernel, outputscale = kernel.base_kernel, kernel.outputscale
    if is_arc_kernel(kernel):  # a Matérn-5/2 of unit lengthscale over the kernel's embedding
        return "arc", kernel, outputscale
    if isinstance(kernel, MaternKernel) and kernel.nu == 2.5:
        return "matern52", kernel, outputscale
    if isinstance(kernel, RBFKernel):
        return "rbf", kernel, outputscale
    return None


def _is_stackable(model: Any) -> bool:
    from gpytorch.means import ConstantMean

    return (
        _kernel_parts(model) is not None
        and getattr(getattr(model, "covar_module", None), "active_dims", None) is None
        and isinstance(getattr(model, "mean_module", None), ConstantMean)
        and getattr(model, "input_transform", None) is None
        and model.train_inputs[0].dim() == 2
    )


class _GPStack:
    """`s` exact GPs padded into one batch; ``predict`` gives all members' joint posteriors.

    Arc-kernel GPs (conditional spaces) stack too: each member's inputs go through its own
    embedding (:meth:`_inputs`, all members at once), over which the kernel is a Matérn-5/2 of unit
    lengthscale, so a suggestion on a conditional space costs one batched call, not one per source.
    """

    def __init__(self, models: Sequence[Any]) -> None:
        kinds = {_kernel_parts(m)[0] for m in models}  # type: ignore[index]
        if len(kinds) != 1:
            raise ValueError(f"cannot stack GPs with different kernels {sorted(kinds)}")
        self.kernel = _rbf if kinds == {"rbf"} else _matern52
        s = len(models)
        dd: dict[str, Any] = {"dtype": torch.double}
        self.arc = _ArcEmbedding([_kernel_parts(m)[1] for m in models]) if kinds == {"arc"} else None  # type: ignore[index]
        n_max = max(m.train_inputs[0].shape[0] for m in models)
        d = self.arc.width if self.arc is not None else models[0].train_inputs[0].shape[-1]
        self.X = torch.zeros(s, n_max, d, **dd)
        self.alpha = torch.zeros(s, n_max, **dd)
        self.Linv = torch.zeros(s, n_max, n_max, **dd)
        self.ls = torch.ones(s, 1, d, **dd)
        self.os, self.const, self.y_mean, self.y_std = (torch.zeros(s, **dd) for _ in range(4))
        with torch.no_grad():
            for i, m in enumerate(models):
                self._load(i, m)

    def _inputs(self, X: Tensor) -> Tensor:
        """Query points `1 x ... x d` as the kernel takes them: unchanged, or embedded per member
        (`s x ... x d'`) for arc-kernel GPs."""
        return X if self.arc is None else self.arc(X[0])

    def _load(self, i: int, m: Any) -> None:
        X = m.train_inputs[0].double()
        n = X.shape[0]
        _, base, outputscale = _kernel_parts(m)  # type: ignore[misc]
        if self.arc is not None:
            X = base.embed(X)  # its own embedding; unit lengthscales over it
            ls = torch.ones(1, X.shape[-1], dtype=torch.double)
        else:
            ls = base.lengthscale.double().reshape(1, -1)
        os_ = outputscale.double().reshape(()) if outputscale is not None else torch.ones((), dtype=torch.double)
        K = self.kernel(X, X, ls, os_) + (m.likelihood.noise.double().reshape(()) + JITTER) * torch.eye(n).double()
        L = torch.linalg.cholesky(K)
        const = m.mean_module.constant.double().reshape(())
        resid = (m.train_targets.double() - const).unsqueeze(-1)
        self.alpha[i, :n] = torch.cholesky_solve(resid, L).squeeze(-1)
        self.Linv[i, :n, :n] = torch.linalg.solve_triangular(L, torch.eye(n).double(), upper=False)
        self.X[i, :n], self.ls[i], self.os[i], self.const[i] = X, ls, os_, const
        tf = getattr(m, "outcome_transform", None)
        self.y_mean[i] = tf.means.reshape(()) if tf is not None else 0.0
        self.y_std[i] = tf.stdvs.reshape(()) if tf is not None else 1.0

    def predict_mean(self, X: Tensor) -> Tensor:
        """Posterior means only: `... x d` → `s x ...` in each model's units (no covariance work)."""
        Xf = self._inputs(X.double().reshape(1, -1, X.shape[-1]))  # 1 (or s) x M x d
        Kxs = self.kernel(Xf, self.X, self.ls, self.os)  # s x M x N
        mean = self.const[:, None] + (Kxs @ self.alpha.unsqueeze(-1)).squeeze(-1)
        mean = self.y_mean[:, None] + self.y_std[:, None] * mean
        return mean.reshape(len(self.os), *X.shape[:-1]).to(X.dtype)

    def means_at(self, X: Tensor) -> Tensor:
        """Posterior means at many points, `M x d` → `s x M`, in each model's units: distances by
        ``torch.cdist`` (no `s x M x N x d` difference tensor), for thousands of candidates at once."""
        s = len(self.os)
        Xf = self._inputs(X.double().reshape(1, -1, X.shape[-1])).expand(s, -1, -1)  # s x M x d
        r = torch.cdist(Xf / self.ls, self.X / self.ls, compute_mode="donot_use_mm_for_euclid_dist")  # s x M x N
        if self.kernel is _rbf:
            K = torch.exp(-0.5 * r.pow(2))
        else:
            K = (1 + math.sqrt(5) * r + 5.0 / 3.0 * r.pow(2)) * torch.exp(-math.sqrt(5) * r)
        mean = self.const[:, None] + self.os[:, None] * (K @ self.alpha.unsqueeze(-1)).squeeze(-1)
        return self.y_mean[:, None] + self.y_std[:, None] * mean

    def predict(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """`B x q x d` → means `s x B x q` and covariances `s x B x q x q` in each model's units."""
        Xs = self._inputs(X.unsqueeze(0))  # 1 (or s) x B x q x d
        ls, os_ = self.ls.unsqueeze(1), self.os.unsqueeze(1)  # s x 1 x 1 x d, s x 1
        Kxs = self.kernel(Xs, self.X.unsqueeze(1), ls, os_)  # s x B x q x N
        s, B, q, N = Kxs.shape
        mean = self.const[:, None, None] + (Kxs.reshape(s, B * q, N) @ self.alpha.unsqueeze(-1)).reshape(s, B, q)
        V = (Kxs.reshape(s, B * q, N) @ self.Linv.transpose(-1, -2)).reshape(s, B, q, N)
        cov = self.kernel(Xs, Xs, ls, os_) - V @ V.transpose(-1, -2)
        scale = self.y_std[:, None, None]
        return self.y_mean[:, None, None] + scale * mean, cov * scale.pow(2).unsqueeze(-1)


class _ArcEmbedding:
    """The arc embeddings of `s` arc kernels of one space, applied all at once: plain dimensions
    over each member's lengthscales, conditional ones on each member's arcs (``omega``, ``rho``),
    activity read once from the point (it depends on the space alone)."""

    def __init__(self, kernels: Sequence[Any]) -> None:
        first = kernels[0]
        if any(k.rules != first.rules for k in kernels):
            raise ValueError("cannot stack arc kernels of different spaces")
        self.active, self.plain, self.cond = first.active, first.plain, first.cond
        with torch.no_grad():
            self.ls = torch.stack([k.lengthscale.double() for k in kernels])  # s x p
            self.omega = torch.stack([k.omega.double() for k in kernels])  # s x c
            self.rho = torch.stack([k.rho.double() for k in kernels])  # s x c
        self.width = len(self.plain) + 2 * len(self.cond)

    def __call__(self, X: Tensor) -> Tensor:
        """`... x d` → `s x ... x d'`."""
        shape = (self.ls.shape[0],) + (1,) * (X.dim() - 1)
        plain = X[..., self.plain].unsqueeze(0) / self.ls.reshape(*shape, -1)
        if not self.cond:
            return plain
        mask = self.active(X).unsqueeze(0)
        omega, rho = self.omega.reshape(*shape, -1), self.rho.reshape(*shape, -1)
        angle = math.pi * rho * X[..., self.cond].unsqueeze(0)
        return torch.cat([plain, omega * torch.sin(angle) * mask, omega * torch.cos(angle) * mask], dim=-1)


class _ModelLoop:
    """Fallback predictor for arbitrary single-output BoTorch models (same interface)."""

    def __init__(self, models: Sequence[Any]) -> None:
        self.models = list(models)

    def predict(self, X: Tensor) -> tuple[Tensor, Tensor]:
        mvns = [m.posterior(X).mvn for m in self.models]
        return torch.stack([p.mean for p in mvns]), torch.stack([p.covariance_matrix for p in mvns])


def _predictor(models: Sequence[Any]) -> _GPStack | _ModelLoop:
    stackable = all(_is_stackable(m) for m in models) and len({_kernel_parts(m)[0] for m in models}) == 1  # type: ignore[index]
    return _GPStack(models) if stackable else _ModelLoop(models)
