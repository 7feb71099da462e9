"""The arc kernel for conditional search spaces (Swersky et al. 2014, paper 002, eqs. 3-4).

A dimension that is active only under a condition (layer 4's units when the network has at least
four layers) is embedded in the plane as ``omega_i [sin(pi rho_i u_i), cos(pi rho_i u_i)]`` while
active and as the origin while inactive. Two configurations that both leave it inactive are then
equal in it, one active and one inactive are ``omega_i`` apart whatever the active value, and two
active ones are apart by the arc between their angles (eq. 4). Always-active dimensions pass
through scaled by their own lengthscales. A Matérn-5/2 (the paper's base kernel) over the
embedded point gives the covariance; ``omega`` (positive), ``rho`` (in [0, 1]) and the
lengthscales are learned with the GP's marginal likelihood (the paper slice-samples them).

Activity is read from the cube point itself: a child is active when its parent is and the
parent's coordinate lies in the bin of an allowed value (:func:`activity_rules`), so the kernel
works on the continuous points an acquisition optimiser proposes, not only on snapped ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent.config import KERNELS
from agent.errors import SpaceError
from agent.space import Categorical, Int, SearchSpace


@dataclass(frozen=True)
class ActivityRule:
    """Dimension ``dim`` is active iff dimension ``parent`` is and lies in one of ``bins``."""

    dim: int
    parent: int
    bins: tuple[tuple[float, float], ...]


def _value_bin(param: Any, value: Any) -> tuple[float, float]:
    """The slice of the unit interval that decodes to ``value``."""
    if isinstance(param, Categorical):
        i = param.choices.index(value)
        n = len(param.choices)
        return i / n, (i + 1) / n
    if isinstance(param, Int):
        lo, hi = param._edges()  # integer k decodes from (k - 0.5, k + 0.5), in log space if asked
        edge = (lambda v: math.log(max(v, 1e-12))) if param.log else float
        a, b = edge(int(value) - 0.5), edge(int(value) + 0.5)
        return max((a - lo) / (hi - lo), 0.0), min((b - lo) / (hi - lo), 1.0)
    raise SpaceError(f"parameter {param.name!r}: a condition's parent must be an integer or a categorical")


def activity_rules(space: SearchSpace) -> list[ActivityRule]:
    """One rule per conditional dimension, in the space's order (parents come first)."""
    index = {p.name: i for i, p in enumerate(space.params)}
    rules = []
    for i, p in enumerate(space.params):
        if p.condition is None:
            continue
        parent = space[p.condition.parent]
        bins = tuple(sorted(_value_bin(parent, v) for v in p.condition.values))
        rules.append(ActivityRule(i, index[p.condition.parent], bins))
    return rules


def resolve_kernel(requested: str, space: SearchSpace) -> str:
    """``auto`` is the arc kernel exactly when the space has conditions."""
    if requested not in KERNELS:
        raise SpaceError(f"--kernel must be one of {', '.join(KERNELS)}, got {requested!r}")
    if requested == "auto":
        return "arc" if space.has_conditions else "plain"
    if requested == "arc" and not space.has_conditions:
        raise SpaceError("--kernel arc needs a search space with conditional parameters; this one has none")
    return requested


ARC_INITS = ("median", "mode")


def make_arc_kernel(space: SearchSpace, init: str = "median") -> Any:
    """A fresh :class:`ArcKernel` for ``space`` (gpytorch imported only here). ``init``: where the
    fit starts, at the priors' medians (the product's) or their modes (BoTorch's convention)."""
    if init not in ARC_INITS:
        raise ValueError(f"init must be one of {ARC_INITS}, got {init!r}")
    return _arc_class()(space, init)


_ARC: Any = None


def is_arc_kernel(kernel: Any) -> bool:
    """Whether ``kernel`` is an :class:`ArcKernel` (without making the class)."""
    return _ARC is not None and isinstance(kernel, _ARC)


def _init_arc_hyperparameters(kernel: Any, dim: int, init: str) -> None:
    """Registers the arc kernel's lengthscales (plain dimensions), ``omega`` and ``rho`` (conditional
    ones) with their constraints and priors on ``kernel``, and sets their starting values."""
    import torch
    from gpytorch.constraints import GreaterThan, Interval
    from gpytorch.priors import LogNormalPrior

    n_plain, n_cond = len(kernel.plain), len(kernel.cond)
    # BoTorch's dimension-scaled lengthscale prior (Hvarfner et al. 2024) for the plain
    # dimensions; omega acts as an inverse lengthscale, so it gets the mirrored prior.
    loc = math.sqrt(2) + 0.5 * math.log(dim)
    kernel.register_parameter("raw_lengthscale", torch.nn.Parameter(torch.zeros(n_plain, dtype=torch.double)))
    # Floors as BoTorch's (2.5e-2): a value that underflows to 0 breaks the LogNormal priors.
    kernel.register_constraint("raw_lengthscale", GreaterThan(2.5e-2))
    kernel.register_prior(
        "lengthscale_prior",
        LogNormalPrior(loc, math.sqrt(3)),
        lambda m: m.lengthscale,
        lambda m, v: m._set("raw_lengthscale", v),
    )
    kernel.register_parameter("raw_omega", torch.nn.Parameter(torch.zeros(n_cond, dtype=torch.double)))
    kernel.register_constraint("raw_omega", GreaterThan(1e-3))
    kernel.register_prior(
        "omega_prior", LogNormalPrior(-loc, math.sqrt(3)), lambda m: m.omega, lambda m, v: m._set("raw_omega", v)
    )
    kernel.register_parameter("raw_rho", torch.nn.Parameter(torch.zeros(n_cond, dtype=torch.double)))
    kernel.register_constraint("raw_rho", Interval(0.0, 1.0))
    # "median": lengthscales at the prior's median exp(loc) (about 18 for 19 dimensions) and
    # omega at its inverse. "mode": where BoTorch starts its lengthscales, the prior's mode
    # (about 0.9), omega at half the inverse (an active range's chord then spans about what
    # a plain dimension's range does). The mode start predicts held-out trials better
    # (bench arc's arc_gp_mode row) but gives worse BO on mlp-arch
    # (docs/benchmarks/conditional-spaces.md), so the product starts at the median.
    ls0 = math.exp(loc) if init == "median" else math.exp(loc - 3.0)  # LogNormal(loc, sqrt 3)
    omega0 = 1.0 / ls0 if init == "median" else 0.5 / ls0
    with torch.no_grad():
        kernel._set("raw_lengthscale", torch.full((n_plain,), ls0, dtype=torch.double))
        kernel._set("raw_omega", torch.full((n_cond,), omega0, dtype=torch.double))
        kernel._set("raw_rho", torch.full((n_cond,), 0.9, dtype=torch.double))


def _activity(rules: list[ActivityRule], x: Any) -> Any:
    """``[..., n, n_cond]`` 0/1 activity of the conditional dimensions (one per rule) at points ``x``."""
    import torch

    masks: dict[int, Any] = {}
    out = []
    for r in rules:
        u = x[..., r.parent]
        inside = torch.zeros_like(u, dtype=torch.bool)
        for lo, hi in r.bins:
            inside = inside | ((u >= lo) & (u <= hi))
        m = inside if r.parent not in masks else inside & masks[r.parent]
        masks[r.dim] = m
        out.append(m)
    return torch.stack(out, dim=-1).to(x.dtype)


def _arc_class() -> Any:
    global _ARC
    if _ARC is not None:
        return _ARC
    import torch
    from gpytorch.kernels import Kernel, MaternKernel

    class ArcKernel(Kernel):
        """See the module docstring."""

        has_lengthscale = False

        def __init__(self, space: SearchSpace, init: str = "median") -> None:
            super().__init__()
            self.rules = activity_rules(space)
            conditional = {r.dim for r in self.rules}
            self.plain = [i for i in range(space.dim) if i not in conditional]
            self.cond = [r.dim for r in self.rules]
            _init_arc_hyperparameters(self, space.dim, init)
            self.base = MaternKernel(nu=2.5)
            self.base.raw_lengthscale.requires_grad_(False)
            self.base.lengthscale = 1.0

        def _set(self, name: str, value: Any) -> None:
            constraint = self.constraint_for_parameter_name(name)
            value = torch.as_tensor(value, dtype=torch.double)
            getattr(self, name).data.copy_(constraint.inverse_transform(value))

        @property
        def lengthscale(self) -> Any:
            return self.raw_lengthscale_constraint.transform(self.raw_lengthscale)

        @property
        def omega(self) -> Any:
            return self.raw_omega_constraint.transform(self.raw_omega)

        @property
        def rho(self) -> Any:
            return self.raw_rho_constraint.transform(self.raw_rho)

        def active(self, x: Any) -> Any:
            """``[..., n, n_cond]`` 0/1 activity of the conditional dimensions at points ``x``."""
            return _activity(self.rules, x)

        def embed(self, x: Any) -> Any:
            plain = x[..., self.plain] / self.lengthscale
            if not self.cond:
                return plain
            mask = self.active(x)
            angle = math.pi * self.rho * x[..., self.cond]
            return torch.cat(
                [plain, self.omega * torch.sin(angle) * mask, self.omega * torch.cos(angle) * mask], dim=-1
            )

        def forward(self, x1: Any, x2: Any, diag: bool = False, last_dim_is_batch: bool = False, **params: Any) -> Any:
            return self.base.forward(self.embed(x1), self.embed(x2), diag=diag, **params)

    _ARC = ArcKernel
    return _ARC
