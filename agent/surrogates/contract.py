"""The surrogate contract: what a surrogate declares (:class:`SurrogateSpec`), what it is given
(:class:`SurrogateInputs`), and what it does once prepared for a study (:class:`Surrogate`).

A surrogate is prepared once per study (fit the source GPs, load a meta-trained network, pick a
portfolio) and then asked, at every BO step, for a BoTorch ``Model`` of the target
(:meth:`Surrogate.step_model`). The sampler (:class:`agent.samplers.bo.BoSampler`) owns
everything else — initial design, failure imputation, normal scores, the acquisition, interleaved
random steps, the cold-start fallback — so a surrogate only decides what it knows.

The sources themselves, and what is fitted to them, are :mod:`agent.surrogates.source_fits`.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.space import SearchSpace
from agent.surrogates.source_fits import SourceFits, SourceTask


@dataclass(frozen=True)
class AcqBudget:
    """How hard the acquisition is maximised (BoTorch ``optimize_acqf`` arguments).

    A neural surrogate whose gradient steps are dear trades restarts and iterations for a larger
    batched random start.
    """

    num_restarts: int = 4
    raw_samples: int = 128
    maxiter: int = 60


@dataclass(frozen=True)
class StepModel:
    """The model of one BO step and how much of it comes from the history.

    ``source_weight`` is the share of the prediction that the source tasks carry (1 for a model that
    is all history, 0 when a negative-transfer guard has dropped every source; a target-only model
    has none and reports 1, meaning "no reason to fall back").
    """

    model: Any  # a BoTorch ``Model``
    source_weight: float = 1.0


@dataclass(frozen=True)
class SurrogateInputs:
    """Everything a surrogate may use to prepare itself for one study.

    Attributes:
        sources: the history for this job and space (excluding the study's own dataset).
        neighbour_keys: keys of the warm start's meta-feature neighbours, nearest first (used by
            the neighbours' prior mean).
        prior_mean: ``neighbours``, ``observations`` or ``constant`` (GP-family surrogates).
        models_dir: where meta-trained networks live (``dvc repro`` output, or a benchmark fold).
        kernel: ``plain`` (BoTorch's default) or ``arc`` (paper 002, conditional spaces), for
            every GP the surrogate fits: the target's, and RGPE's source GPs.
    """

    space: SearchSpace
    sources: tuple[SourceTask, ...] = ()
    models_dir: Path = Path("models")
    seed: int = 0
    k: int = 3
    prior_mean: str = "constant"
    neighbour_keys: tuple[str, ...] = ()
    fits: SourceFits = field(default_factory=SourceFits, compare=False)
    kernel: str = "plain"

    def covar(self) -> Any:
        """A fresh kernel for one GP fit (``None``: BoTorch's default)."""
        if self.kernel == "arc":
            from agent.surrogates.arc import make_arc_kernel

            return make_arc_kernel(self.space)
        return None


class Surrogate(abc.ABC):
    """A surrogate prepared for one study.

    Attributes:
        name: the registry name it runs as (a transfer surrogate whose guard dropped every source
            runs as ``gp`` and says so).
        note: one line saying what it chose and why (shown to the user, stored on the study).
        budget: how hard the acquisition is maximised on its models.
        interleave_random: whether the sampler's interleaved random steps apply (GP family).
        pending: how trials still running enter a BO step. ``"joint"``: the model's posterior is
            joint over points, so the acquisition is BoTorch's MC ``qLogEI``/``qUCB`` with the
            running points as ``X_pending`` (a point near a running one gains little). ``"liar"``:
            the posterior is independent per point (the TNP's), which would make ``X_pending``
            blind to nearness, so each running point joins the observations at the worst observed
            score (constant liar, Ginsbourger et al. 2010) before the model is built.
    """

    name: str = ""
    note: str = ""
    budget: AcqBudget = AcqBudget()
    interleave_random: bool = True
    pending: str = "joint"

    def start_points(self) -> np.ndarray:
        """Cube points `k x d` evaluated before any model is fitted (portfolio, learned inits)."""
        return np.empty((0, 0))

    def fallback(self) -> Surrogate | None:
        """The surrogate the sampler alternates with once this one stalls (``None``: it never
        does; the GP family relies on interleaved random steps instead)."""
        return None

    @abc.abstractmethod
    def step_model(self, train_X: Any, train_Y: Any, state: dict[str, Any]) -> StepModel:
        """The model for one BO step on double tensors `n x d`, `n x 1` (maximised normal scores).

        ``state`` is a dict the sampler keeps between steps (e.g. warm-started GP hyperparameters).
        """


@dataclass(frozen=True)
class SurrogateSpec:
    """A registry entry.

    Attributes:
        needs_history: without sources it cannot run (the study falls back to ``gp``).
        meta_model: the file in ``models_dir`` it needs (``None``: needs no meta-training); its
            hash is recorded on the study, and ``resume`` refuses when it changed.
        prepare: builds the :class:`Surrogate` for one study from its inputs.
        revision: bumped whenever what the surrogate (or the sampler around it) suggests changes,
            so the benchmark's journal recomputes its runs instead of reusing stale ones.
    """

    name: str
    summary: str
    needs_history: bool
    prepare: Callable[[SurrogateInputs], Surrogate]
    meta_model: str | None = None
    revision: int = 1

    def meta_model_version(self, models_dir: Path) -> str | None:
        """The hash of the meta-model this surrogate would load from ``models_dir``, or None."""
        if self.meta_model is None:
            return None
        path = Path(models_dir) / self.meta_model
        if not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
