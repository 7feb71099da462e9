"""The sampler registry: every way a study can choose its next configuration, registered once.

Entries live in :data:`agent.registry.SAMPLERS` (the one registry mechanism, open to other
packages through the ``tune_agent.samplers`` entry points). Each :class:`SamplerSpec` says what
its plan needs from the history (``plan``) and how the sampler is built from the plan
(:meth:`SamplerSpec.build`). The study services (:func:`agent.tuning.plan.plan_sampler`,
``Planned.sampler``), ``resume`` (through the recorded plan) and the benchmark's method list read
it, and ``tests/tuning/test_sampler_contract.py`` runs every registered sampler through the same
ask/tell/resume checks.

- ``bo``: BO on the surrogate the surrogate registry resolves (plan ``surrogate``).
- ``random``, ``tpe``: no history, no surrogate (plan ``none``).
- ``hts``, ``hts-anchored``: paper 001's learned map of a source's best configurations, and ours
  anchored at the identity that hands over to BO on a plain GP (plan ``sources``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.errors import TuneAgentError
from agent.registry import SAMPLERS

PLANS = ("surrogate", "sources", "none")


@dataclass(frozen=True)
class SamplerSpec:
    """A registry entry.

    Attributes:
        plan: what planning reads before the first trial: ``surrogate`` (the history's sources and
            a prepared surrogate), ``sources`` (candidate source tasks, as HTS maps one), ``none``.
        build: ``(space, settings, planned) -> Sampler``, ``planned`` being the study's
            :class:`agent.tuning.plan.Planned`.
        hands_over: with plan ``sources``, whether a plain-GP BO sampler follows the sources' phase.
    """

    name: str
    summary: str
    plan: str
    build: Callable[[Any, Any, Any], Any]
    hands_over: bool = False

    def __post_init__(self) -> None:
        if self.plan not in PLANS:
            raise ValueError(f"sampler {self.name!r}: plan must be one of {PLANS}, got {self.plan!r}")


def _bo(space: Any, settings: Any, planned: Any) -> Any:
    if settings.multi:  # several objectives or constraints: qLogNEHVI over one GP per outcome
        from agent.samplers.multi import MultiObjectiveSampler

        return MultiObjectiveSampler(space, settings, planned.surrogate, planned.plan.initial)
    from agent.samplers.bo import BoSampler

    return BoSampler(space, settings, planned.surrogate, planned.plan.initial)


def _random(space: Any, settings: Any, planned: Any) -> Any:
    from agent.samplers.random_search import RandomSampler

    return RandomSampler(space, settings)


def _tpe(space: Any, settings: Any, planned: Any) -> Any:
    from agent.samplers.tpe import TpeSampler

    return TpeSampler(space, settings)


def _hts(anchored: bool) -> Callable[[Any, Any, Any], Any]:
    def build(space: Any, settings: Any, planned: Any) -> Any:
        from agent.samplers.bo import BoSampler
        from agent.samplers.hts import HtsSampler

        after = BoSampler(space, settings, planned.surrogate) if planned.surrogate is not None else None
        return HtsSampler(space, settings, planned.sources, planned.preferred, anchored=anchored, after=after)

    return build


BO = SamplerSpec("bo", "Bayesian optimisation on the --surrogate (the product's default)", "surrogate", _bo)
RANDOM = SamplerSpec("random", "uniform random configurations", "none", _random)
TPE = SamplerSpec("tpe", "Optuna's TPESampler behind the sampler contract", "none", _tpe)
HTS = SamplerSpec("hts", "paper 001: a learned map of a similar dataset's best configurations", "sources", _hts(False))
HTS_ANCHORED = SamplerSpec(
    "hts-anchored",
    "paper 001's map anchored at the identity, then BO on a plain GP once it stalls",
    "sources",
    _hts(True),
    hands_over=True,
)


def register(spec: SamplerSpec) -> None:
    """Adds ``spec`` in this process (:meth:`agent.registry.Registry.register`)."""
    SAMPLERS.register(spec.name, spec)


def get(name: str) -> SamplerSpec:
    """The sampler named ``name``: a built-in, another package's entry point or one registered here."""
    spec = SAMPLERS.load(name)
    if not isinstance(spec, SamplerSpec) or spec.name != name:
        raise TuneAgentError(f"--sampler {name}: its registry entry is not a SamplerSpec named {name!r}")
    return spec


def names() -> tuple[str, ...]:
    return SAMPLERS.names()


def without_surrogate() -> tuple[str, ...]:
    """The samplers that are methods of their own beside the surrogates (the benchmark's list)."""
    return tuple(name for name in names() if get(name).plan != "surrogate")
