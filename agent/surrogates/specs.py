"""The built-in surrogates, each a :class:`~agent.surrogates.contract.Surrogate` and its spec.

- ``gp``: BoTorch's ``SingleTaskGP`` on the target alone; its prior mean is constant, the warm
  start's meta-feature neighbours' surfaces (paper 000, Algorithm 3) or the observation-chosen
  neighbours' surfaces, as the study's ``prior_mean`` says.
- ``portfolio_gp``: a zero-shot greedy portfolio of history configurations first (the best
  configurations across the sources' GP surfaces, Wistuba et al. 2015's greedy construction), then
  ``gp``.
- ``neighbour_gp``: ``portfolio_gp`` whose GP has the neighbours' prior mean, the neighbours being
  the source tasks nearest to the target by its own observations (paper 003's distance on the
  target's configurations) unless the warm start found meta-feature neighbours.
- ``rgpe``: the best zero-shot configuration, then the ranking-weighted ensemble of the source GPs
  and the target GP (Feurer, Letham, Bakshy 2018; :mod:`agent.surrogates.rgpe`).
- ``tnp``: the best zero-shot configuration, then the fine-tuned Transferable Neural Process
  (paper 004; :mod:`agent.surrogates.tnp`), meta-trained into ``models/tnp.pt``.

RGPE and the TNP attend only to sources whose own GP predicts their surface (the negative-transfer
guard, :meth:`SourceFits.informative`); with none left they prepare as ``gp`` and say why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.surrogates.contract import AcqBudget, StepModel, Surrogate, SurrogateInputs, SurrogateSpec
from agent.surrogates.source_fits import SourceTask

PORTFOLIO_SIZE = 5
TNP_FILE = "tnp.pt"
TNP_META = "tnp.json"  # {"job": ..., "space_signature": ..., "sources": n}: what the TNP was trained on


# -- the GP family -------------------------------------------------------------------------------
class GpSurrogate(Surrogate):
    """The target's own GP, with the prior mean the study asked for."""

    name = "gp"

    def __init__(self, inputs: SurrogateInputs, note: str = "") -> None:
        self.inputs = inputs
        self.mean_kind, self._surfaces = self._prior_mean(inputs)
        self.note = note or "surrogate: gp" + (
            f" with the {self.mean_kind}' prior mean" if self.mean_kind != "constant" else ""
        )

    @staticmethod
    def _prior_mean(inputs: SurrogateInputs) -> tuple[str, list[Any]]:
        if inputs.prior_mean == "neighbours" and inputs.neighbour_keys:
            by_key = {s.key: s for s in inputs.sources}
            surfaces = [inputs.fits.gp(by_key[k], inputs)[0] for k in inputs.neighbour_keys if k in by_key]
            if surfaces:
                return "neighbours", surfaces
        if inputs.prior_mean in ("observations", "neighbours") and inputs.sources and not inputs.neighbour_keys:
            return "observations", [inputs.fits.gp(s, inputs)[0] for s in inputs.sources]
        return "constant", []

    def mean_module(self, train_X: Any, train_Y: Any) -> Any:
        if self.mean_kind == "neighbours":
            from agent.surrogates.neighbour_mean import NeighbourMean

            return NeighbourMean(self._surfaces)
        if self.mean_kind == "observations":
            from agent.surrogates.neighbour_mean import ObservationNeighbours

            chooser = ObservationNeighbours([], k=self.inputs.k, surfaces=self._surfaces)
            return chooser(train_X.numpy(), train_Y.numpy().reshape(-1))
        return None

    def step_model(self, train_X: Any, train_Y: Any, state: dict[str, Any]) -> StepModel:
        from agent.surrogates.gp import fit_gp

        mean = self.mean_module(train_X, train_Y)
        return StepModel(
            fit_gp(
                train_X,
                train_Y,
                mean_module=mean,
                warm_state=state.setdefault("gp", {}),
                covar_module=self.inputs.covar(),
            )
        )


def source_regrets(inputs: SurrogateInputs, sources: Sequence[SourceTask], candidates: np.ndarray) -> np.ndarray:
    """Normalised regret (`sources x candidates`) of ``candidates`` under each source's GP mean,
    scaled by the min and max of the values that GP was fitted to, so 0 is its best observed value
    (predictions above it clip to 0). One posterior call per source over all candidates
    (:meth:`SourceFits.mean_on`); a bootstrap history, whose datasets share one configuration set,
    has as many candidates as that set."""
    rows = []
    means = inputs.fits.means_on(sources, candidates, inputs)
    for a, mean in zip(sources, means):
        low, high = inputs.fits.target_range(a)
        rows.append(np.clip((high - mean) / max(high - low, 1e-12), 0.0, None))
    return np.array(rows)


def greedy_portfolio(regrets: np.ndarray, size: int) -> list[int]:
    """Columns that greedily minimise the mean over rows of the best-so-far regret."""
    best = np.full(regrets.shape[0], np.inf)
    chosen: list[int] = []
    for _ in range(min(size, regrets.shape[1])):
        score = np.minimum(best[:, None], regrets).mean(axis=0)
        score[chosen] = np.inf
        pick = int(np.argmin(score))
        chosen.append(pick)
        best = np.minimum(best, regrets[:, pick])
    return chosen


def portfolio(inputs: SurrogateInputs, sources: Sequence[SourceTask], size: int) -> np.ndarray:
    """``size`` history configurations (cube points `size x d`) chosen greedily across sources."""
    if not sources:
        return np.empty((0, inputs.space.dim))
    return inputs.fits.portfolio(sources, size, inputs, lambda: _portfolio(inputs, sources, size))


def _portfolio(inputs: SurrogateInputs, sources: Sequence[SourceTask], size: int) -> np.ndarray:
    pooled = inputs.space.snap(np.concatenate([s.U for s in sources]))
    _, first = np.unique(np.round(pooled, 9), axis=0, return_index=True)
    candidates = pooled[np.sort(first)]  # distinct configurations, in the order the sources list them
    return candidates[greedy_portfolio(source_regrets(inputs, sources, candidates), size)]


class PortfolioGpSurrogate(GpSurrogate):
    name = "portfolio_gp"

    def __init__(self, inputs: SurrogateInputs) -> None:
        super().__init__(
            inputs,
            note=f"surrogate: portfolio_gp ({PORTFOLIO_SIZE} configurations from "
            f"{len(inputs.sources)} source tasks, then gp)",
        )
        self._start = portfolio(inputs, inputs.sources, PORTFOLIO_SIZE)

    def start_points(self) -> np.ndarray:
        return self._start


class NeighbourGpSurrogate(PortfolioGpSurrogate):
    name = "neighbour_gp"

    def __init__(self, inputs: SurrogateInputs) -> None:
        from dataclasses import replace

        prior = inputs.prior_mean if inputs.prior_mean != "constant" else "observations"
        super().__init__(replace(inputs, prior_mean=prior))
        self.note = (
            f"surrogate: neighbour_gp (portfolio of {PORTFOLIO_SIZE}, then gp with the "
            f"{self.mean_kind}' prior mean over {len(inputs.sources)} source tasks)"
        )


def _gp_fallback(inputs: SurrogateInputs, why: str) -> GpSurrogate:
    from dataclasses import replace

    return GpSurrogate(replace(inputs, prior_mean="constant"), note=f"surrogate: gp ({why})")


# -- transfer surrogates -------------------------------------------------------------------------
class TransferSurrogate(Surrogate):
    """Over the sources that passed the signal check; starts from the greedy portfolio's best
    configuration (on lcbench the TNP's learned initial one reached regret .136 at trial 1 against
    the portfolio's .070)."""

    interleave_random = False

    def __init__(self, inputs: SurrogateInputs, useful: Sequence[SourceTask]) -> None:
        self.inputs = inputs
        self._start = portfolio(inputs, useful, 1)
        self._fallback: GpSurrogate | None = None
        dropped = len(inputs.sources) - len(useful)
        self.note = (
            f"surrogate: {self.name} over {len(useful)} source tasks ({sum(len(s.y) for s in useful)} points)"
            + (f"; {dropped} without a predictable response surface left out" if dropped else "")
        )

    def start_points(self) -> np.ndarray:
        return self._start

    def fallback(self) -> Surrogate:
        """The target's own GP with a constant mean: what ``gp`` would fit on the same trials."""
        if self._fallback is None:
            self._fallback = _gp_fallback(self.inputs, "fallback")
        return self._fallback


class RgpeSurrogate(TransferSurrogate):
    name = "rgpe"

    def __init__(self, inputs: SurrogateInputs, useful: Sequence[SourceTask]) -> None:
        super().__init__(inputs, useful)
        self._useful = list(useful)
        self._models: list[Any] | None = None

    @property
    def models(self) -> list[Any]:
        """The useful sources' GPs, made on first need (the first BO step, or :meth:`warm_up`): a
        study's first trials (the warm start's configurations, the design) need none of them, and
        restoring them needs torch and GPyTorch (2.6 s of import) and takes about 1 s for 150."""
        if self._models is None:
            self._models = [self.inputs.fits.gp(s, self.inputs)[0] for s in self._useful]
        return self._models

    def warm_up(self) -> None:
        self.models  # noqa: B018 - made now, on the thread that warms the sampler up

    def step_model(self, train_X: Any, train_Y: Any, state: dict[str, Any]) -> StepModel:
        from agent.surrogates.rgpe import build_rgpe

        model = build_rgpe(
            self.models,
            train_X,
            train_Y,
            seed=self.inputs.seed,
            warm_state=state.setdefault("gp", {}),
            covar=self.inputs.covar,
        )
        return StepModel(model, model.source_weight)


class TnpSurrogate(TransferSurrogate):
    name = "tnp"
    # A TNP forward/backward costs ~10x a GP's: fewer L-BFGS restarts and iterations from a larger
    # batched random start.
    budget = AcqBudget(num_restarts=2, raw_samples=512, maxiter=30)
    pending = "liar"  # its posterior is independent per point (diagonal covariance)

    def __init__(self, inputs: SurrogateInputs, useful: Sequence[SourceTask]) -> None:
        from agent.surrogates.tnp import TNP, SourceBank

        super().__init__(inputs, useful)
        self.net = TNP.load(str(inputs.models_dir / TNP_FILE))
        self.bank = SourceBank([(s.U, s.y) for s in useful])

    def step_model(self, train_X: Any, train_Y: Any, state: dict[str, Any]) -> StepModel:
        from agent.surrogates.tnp import build_tnp_model

        return StepModel(build_tnp_model(self.net, self.bank, train_X, train_Y, seed=self.inputs.seed))


def _guarded(inputs: SurrogateInputs) -> list[SourceTask] | None:
    useful = inputs.fits.informative(inputs.sources, inputs)
    return useful or None


def prepare_gp(inputs: SurrogateInputs) -> Surrogate:
    return GpSurrogate(inputs)


def prepare_portfolio_gp(inputs: SurrogateInputs) -> Surrogate:
    return PortfolioGpSurrogate(inputs)


def prepare_neighbour_gp(inputs: SurrogateInputs) -> Surrogate:
    return NeighbourGpSurrogate(inputs)


def prepare_rgpe(inputs: SurrogateInputs) -> Surrogate:
    useful = _guarded(inputs)
    if useful is None:
        return _gp_fallback(
            inputs, f"none of the {len(inputs.sources)} source tasks has a predictable response surface"
        )
    return RgpeSurrogate(inputs, useful)


def prepare_tnp(inputs: SurrogateInputs) -> Surrogate:
    useful = _guarded(inputs)
    if useful is None:
        return _gp_fallback(
            inputs, f"none of the {len(inputs.sources)} source tasks has a predictable response surface"
        )
    return TnpSurrogate(inputs, useful)


GP = SurrogateSpec(
    "gp", "the target's own GP (BoTorch SingleTaskGP), optional neighbours' prior mean", False, prepare_gp
)
PORTFOLIO_GP = SurrogateSpec(
    "portfolio_gp", "greedy zero-shot portfolio of history configurations, then gp", True, prepare_portfolio_gp
)
NEIGHBOUR_GP = SurrogateSpec(
    "neighbour_gp", "portfolio, then gp with the nearest sources' surfaces as prior mean", True, prepare_neighbour_gp
)
# revision 2: a stalled transfer model alternates with the target GP (was: one random step).
RGPE = SurrogateSpec(
    "rgpe",
    "ranking-weighted GP ensemble of the sources and the target (Feurer et al. 2018)",
    True,
    prepare_rgpe,
    revision=2,
)
TNP = SurrogateSpec(
    "tnp",
    "Transferable Neural Process meta-trained on the history (paper 004)",
    True,
    prepare_tnp,
    meta_model=TNP_FILE,
    revision=2,
)
