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
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agent.surrogates.stored_means import JITTER


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


@dataclass(frozen=True)
class Member:
    """What a stack keeps of one exact GP: its kernel's kind, its kernel inputs (embedded for the arc
    kernel) and hyperparameters, its standardised targets and its outcome transform's statistics."""

    kind: str  # "rbf", "matern52" or "arc"
    X: Tensor  # n x d kernel inputs
    targets: Tensor  # n, as the GP was conditioned on them
    ls: Tensor  # 1 x d (ones for the arc kernel: its lengthscales act inside the embedding)
    outputscale: Tensor  # scalar
    noise: Tensor  # scalar
    const: Tensor  # scalar
    y_mean: float
    y_std: float
    arc: tuple[Tensor, Tensor, Tensor] | None = None  # the arc kernel's lengthscale, omega, rho
    rules: Any = None  # the arc kernel whose activity rules every member of its space shares


def member_of(model: Any) -> Member:
    """A stackable model (:func:`_is_stackable`) as a :class:`Member`."""
    tf = getattr(model, "outcome_transform", None)
    stats = (float(tf.means.reshape(())), float(tf.stdvs.reshape(()))) if tf is not None else (0.0, 1.0)
    return _read_member(model, model.train_inputs[0], model.train_targets, stats)


def stack_summary(model: Any) -> dict[str, Any] | None:
    """What a plain-kernel source GP's means need beside its data, as plain numbers (kept with its
    stored fit, so :func:`agent.surrogates.stored_means.stored_means` evaluates them without torch);
    None for a GP that does not stack or has the arc kernel."""
    if not _is_stackable(model):
        return None
    m = member_of(model)
    if m.kind == "arc":
        return None
    return {
        "kind": m.kind,
        "lengthscale": m.ls.reshape(-1).tolist(),
        "outputscale": float(m.outputscale),
        "noise": float(m.noise),
        "constant": float(m.const),
    }


def _read_member(model: Any, X: Tensor, targets: Tensor, stats: tuple[float, float]) -> Member:
    """The :class:`Member` of ``model``'s kernel, noise and mean on inputs ``X`` and ``targets``;
    its tensors are copies (a template model takes the next state after)."""
    with torch.no_grad():
        kind, base, outputscale = _kernel_parts(model)  # type: ignore[misc]
        X = X.double()
        arc = None
        if kind == "arc":
            arc = tuple(t.double().reshape(-1).clone() for t in (base.lengthscale, base.omega, base.rho))
            X = base.embed(X)
            ls = torch.ones(1, X.shape[-1], dtype=torch.double)
        else:
            ls = base.lengthscale.double().reshape(1, -1).clone()
        one = torch.ones((), dtype=torch.double)
        return Member(
            kind=kind,
            X=X.clone(),
            targets=targets.double().reshape(-1).clone(),
            ls=ls,
            outputscale=outputscale.double().reshape(()).clone() if outputscale is not None else one,
            noise=model.likelihood.noise.double().reshape(()).clone(),
            const=model.mean_module.constant.double().reshape(()).clone(),
            y_mean=stats[0],
            y_std=stats[1],
            arc=arc,
            rules=base if kind == "arc" else None,
        )


class StateMembers:
    """Members built straight from stored hyperparameters (:func:`agent.surrogates.gp.gp_state`) of
    GPs that :func:`agent.surrogates.gp.make_gp` would construct, without constructing one per GP:
    a single template model per kernel takes each state in turn, and what the stack needs is read
    off it. About 0.3 ms a member, against about 8 ms to rebuild each BoTorch model."""

    def __init__(self, covar: Any = None) -> None:
        self.covar = covar
        self._template: Any = None

    def member(self, X: Tensor, Y: Tensor, state: dict[str, Any]) -> Member:
        """The member of the GP on ``X`` (`n x d`) and ``Y`` (`n x 1`) with hyperparameters ``state``;
        ``ValueError`` (``RuntimeError``) when the state's names (shapes) do not fit the template's."""
        from botorch.models.transforms.outcome import Standardize

        from agent.surrogates.gp import load_state, make_gp

        if self._template is None:
            self._template = make_gp(X, Y, covar_module=self.covar() if self.covar is not None else None)
            self._template.eval()
            if not _is_stackable(self._template):
                raise ValueError("the template GP cannot be stacked")
        load_state(self._template, state)
        with torch.no_grad():
            transform = Standardize(m=1)
            targets, _ = transform(Y.double())
            transform.eval()
        return _read_member(self._template, X, targets, (float(transform.means), float(transform.stdvs)))


class _GPStack:
    """`s` exact GPs padded into one batch; ``predict`` gives all members' joint posteriors.

    Arc-kernel GPs (conditional spaces) stack too: each member's inputs go through its own
    embedding (:meth:`_inputs`, all members at once), over which the kernel is a Matérn-5/2 of unit
    lengthscale, so a suggestion on a conditional space costs one batched call, not one per source.
    Built from models (:meth:`of_models`) or from :class:`Member` records (stored states, no model).
    """

    def __init__(self, members: Sequence[Member]) -> None:
        kinds = {m.kind for m in members}
        if len(kinds) != 1:
            raise ValueError(f"cannot stack GPs with different kernels {sorted(kinds)}")
        self.kernel = _rbf if kinds == {"rbf"} else _matern52
        s = len(members)
        dd: dict[str, Any] = {"dtype": torch.double}
        self.arc = _ArcEmbedding(members) if kinds == {"arc"} else None
        n_max = max(m.X.shape[0] for m in members)
        d = members[0].X.shape[-1]
        self.X = torch.zeros(s, n_max, d, **dd)
        self.alpha = torch.zeros(s, n_max, **dd)
        self.Linv = torch.zeros(s, n_max, n_max, **dd)
        self.ls = torch.ones(s, 1, d, **dd)
        self.os, self.const, self.y_mean, self.y_std = (torch.zeros(s, **dd) for _ in range(4))
        with torch.no_grad():
            for i, m in enumerate(members):
                self._load(i, m)

    @classmethod
    def of_models(cls, models: Sequence[Any]) -> _GPStack:
        return cls([member_of(m) for m in models])

    def _inputs(self, X: Tensor) -> Tensor:
        """Query points `1 x ... x d` as the kernel takes them: unchanged, or embedded per member
        (`s x ... x d'`) for arc-kernel GPs."""
        return X if self.arc is None else self.arc(X[0])

    def _load(self, i: int, m: Member) -> None:
        n = m.X.shape[0]
        K = self.kernel(m.X, m.X, m.ls, m.outputscale) + (m.noise + JITTER) * torch.eye(n, dtype=torch.double)
        L = torch.linalg.cholesky(K)
        resid = (m.targets - m.const).unsqueeze(-1)
        self.alpha[i, :n] = torch.cholesky_solve(resid, L).squeeze(-1)
        self.Linv[i, :n, :n] = torch.linalg.solve_triangular(L, torch.eye(n, dtype=torch.double), upper=False)
        self.X[i, :n], self.ls[i], self.os[i], self.const[i] = m.X, m.ls, m.outputscale, m.const
        self.y_mean[i], self.y_std[i] = m.y_mean, m.y_std

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

    def __init__(self, members: Sequence[Member]) -> None:
        first = members[0].rules
        if any(m.rules.rules != first.rules for m in members):
            raise ValueError("cannot stack arc kernels of different spaces")
        self.active, self.plain, self.cond = first.active, first.plain, first.cond
        self.ls, self.omega, self.rho = (torch.stack([m.arc[j] for m in members]) for j in range(3))  # type: ignore[index]
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
    return _GPStack.of_models(models) if stackable else _ModelLoop(models)
