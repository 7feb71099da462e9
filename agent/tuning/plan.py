"""The plan of a study: which sampler and surrogate it runs, on which sources, from which initial
configurations, computed once from one read of the history and recorded on the study run
(:data:`PLAN_TAG`), so that ``resume`` rebuilds exactly that sampler, or refuses in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.config import StudySettings
from agent.errors import StudyError
from agent.knowledge.base import KnowledgeBase
from agent.samplers.base import Sampler
from agent.surrogates.contract import Surrogate, SurrogateInputs
from agent.surrogates.source_fits import SourceFits, SourceTask

PLAN_TAG = "surrogate_plan"


@dataclass(frozen=True)
class SurrogatePlan:
    """What a study's sampler was built from; stored on the study run (tag ``surrogate_plan``).

    ``source_keys`` are the historical datasets the surrogate was prepared on; ``meta_model`` the
    hash of the meta-trained network it loaded (None when it needs none); ``initial`` the
    configurations (with origins) evaluated before the design and BO.
    """

    sampler: str
    requested: str
    surrogate: str
    note: str
    models_dir: str
    meta_model: str | None = None
    source_keys: tuple[str, ...] = ()
    initial: tuple[tuple[dict[str, Any], str], ...] = ()

    def to_record(self) -> str:
        return json.dumps({**asdict(self), "initial": [[c, o] for c, o in self.initial]}, sort_keys=True)

    @classmethod
    def from_record(cls, raw: str) -> SurrogatePlan:
        data = json.loads(raw)
        data["source_keys"] = tuple(data.get("source_keys", ()))
        data["initial"] = tuple((dict(c), str(o)) for c, o in data.get("initial", ()))
        return cls(**data)


@dataclass(frozen=True)
class Planned:
    """A study's plan and the surrogate prepared for it (None for the random and tpe samplers and
    paper 001's hts; hts-anchored's is the plain GP it hands over to)."""

    plan: SurrogatePlan
    surrogate: Surrogate | None = None
    sources: tuple[SourceTask, ...] = ()  # HTS's candidate sources
    preferred: str | None = None  # HTS's source: the warm start's nearest neighbour

    def sampler(self, space: Any, settings: StudySettings) -> Sampler:
        """The sampler for ``settings`` (whose ``n_init`` may depend on the plan's initial configs),
        built by its entry in the sampler registry."""
        from agent.samplers import registry as sampler_registry

        return sampler_registry.get(settings.sampler).build(space, settings, self)


def surrogate_names() -> tuple[str, ...]:
    """The registry's surrogates (the benchmark's methods beside the samplers)."""
    from agent.surrogates import registry

    return registry.names()


def surrogate_revision(name: str) -> int:
    """The registry's revision of surrogate ``name`` (0 for a name it does not hold: a sampler)."""
    from agent.registry import SURROGATES
    from agent.surrogates import registry

    return registry.get(name).revision if name in SURROGATES.names() else 0


def kernel_for(space: Any) -> str:
    """The kernel a study of ``space`` gets by default (``--kernel auto``)."""
    from agent.surrogates.arc import resolve_kernel

    return resolve_kernel("auto", space)


def source_cache() -> SourceFits:
    """A cache of source fits to share across studies over the same history (benchmark workers)."""
    return SourceFits()


def _named_source(kb: KnowledgeBase, name: str, keys: set[str]) -> str:
    """The source key of study ``name`` (``--source``); one line when it is not usable history."""
    study = kb.find_study(name)
    if study is None:
        raise StudyError(f"--source: no study named {name!r} in {kb.tracking_uri} (tune-agent history lists them)")
    key = f"{study.fingerprint}/{study.job}/{study.space_signature}"
    if key not in keys:
        raise StudyError(
            f"--source: study {name!r} is not usable history for this study (another job or search "
            "space, too few finished trials, or this study's own dataset)"
        )
    return key


@dataclass(frozen=True)
class _PlanArgs:
    """The arguments of one :func:`plan_sampler` call, as its helpers read them."""

    kb: KnowledgeBase
    space: Any
    settings: StudySettings
    warm: Any
    requested: str
    exclude_fingerprint: str
    recorded: SurrogatePlan | None
    progress: Callable[[str], None] | None

    @property
    def models_dir(self) -> Path:
        return Path(self.settings.models_dir)

    def history(self, fits: SourceFits, attend: Collection[str] | None = None) -> list[SourceTask]:
        """The historical datasets of this job and space, the study's own excluded (only those of
        the keys in ``attend``, when given)."""
        from agent.tuning.source_models import history_sources

        return history_sources(
            self.kb,
            self.settings.job_name,
            self.space,
            self.exclude_fingerprint,
            fits.store,
            self.progress,
            attend=attend,
        )


def plan_sampler(
    kb: KnowledgeBase,
    space: Any,
    settings: StudySettings,
    warm: Any,
    requested: str,
    exclude_fingerprint: str,
    fits: SourceFits | None = None,
    recorded: SurrogatePlan | None = None,
    progress: Callable[[str], None] | None = None,
) -> Planned:
    """The study's sampler: ``random``/``tpe``, or BO on the surrogate the registry resolves.

    With ``recorded`` (a resumed study) the same surrogate is rebuilt on the same sources and
    meta-model, with the same initial configurations; anything missing or changed is refused.
    Without ``fits`` (the benchmark's per-worker cache) source models come from, and new ones go
    to, ``models_dir/source_models.jsonl`` (:mod:`agent.tuning.source_models`).
    """
    from agent.samplers import registry as sampler_registry
    from agent.tuning.published import meta_models_dir, open_source_models

    req = _PlanArgs(kb, space, settings, warm, requested, exclude_fingerprint, recorded, progress)
    models_dir = req.models_dir
    meta_dir = models_dir  # where meta-trained networks are read: a benchmark's fold, or as below
    if fits is None:  # the store's published meta-models, fetched once into the cache, and models_dir's own
        fits = SourceFits(open_source_models(kb, models_dir, settings.job_name, space, progress))
        meta_dir = meta_models_dir(kb, models_dir, settings.job_name, space, progress)
    spec = sampler_registry.get(settings.sampler)
    if spec.plan == "sources":
        return _plan_source_sampler(req, fits, spec.hands_over)
    if spec.plan == "none":
        return Planned(SurrogatePlan(settings.sampler, requested, "-", f"sampler: {settings.sampler}", str(models_dir)))
    return _plan_bo(req, fits, meta_dir)


def _plan_source_sampler(req: _PlanArgs, fits: SourceFits, hands_over: bool) -> Planned:
    """A sampler that maps one source onto the target (paper 001): its candidate sources, the one
    it prefers, and with ``hands_over`` the plain GP that BO on the target's trials continues with."""
    from agent.surrogates import registry

    settings = req.settings
    sources = req.history(fits)
    if req.recorded is not None:
        sources = _recorded_sources(sources, req.recorded)
    if not sources:
        raise StudyError(
            f"--sampler {settings.sampler} needs history for job {settings.job_name} with this search space"
        )
    preferred, why = _preferred_source(req, {s.key for s in sources})
    note = (
        f"sampler: {settings.sampler} (paper 001{', map anchored at the identity' if hands_over else ''}) "
        f"from {len(sources)} candidate sources"
        + (
            f", source {next(s.name for s in sources if s.key == preferred)} ({why})"
            if preferred
            else ", source chosen after the initial design"
        )
    )
    after = None
    if hands_over:  # BO on a plain GP of the target's trials once the mapping stalls
        plain = SurrogateInputs(
            req.space, (), req.models_dir, settings.seed, settings.k, "constant", (), SourceFits(), settings.kernel
        )
        after = registry.prepare(registry.resolve("gp", plain), plain)
    return Planned(
        SurrogatePlan(
            settings.sampler, req.requested, "-", note, str(req.models_dir), None, tuple(s.key for s in sources)
        ),
        after,
        sources=tuple(sources),
        preferred=preferred,
    )


def _preferred_source(req: _PlanArgs, keys: set[str]) -> tuple[str | None, str]:
    """The source a paper-001 sampler starts from and why: ``--source``, else the warm start's
    nearest neighbour among ``keys`` (None: chosen after the initial design)."""
    if req.settings.source is not None:
        return _named_source(req.kb, req.settings.source, keys), f"--source {req.settings.source}"
    preferred = next((n.key for n in getattr(req.warm, "neighbours", ()) if n.key in keys), None)
    return preferred, "nearest neighbour"


def _plan_bo(req: _PlanArgs, fits: SourceFits, meta_dir: Path) -> Planned:
    """BO on the surrogate the registry resolves for ``req.requested`` (a resumed study: the recorded
    one, on the same meta-model), its missing source models fitted, and the initial configurations."""
    from agent.surrogates import registry
    from agent.tuning.source_models import fit_missing, sources_used

    settings, recorded = req.settings, req.recorded
    sources = _bo_sources(req, fits)
    inputs = SurrogateInputs(
        req.space,
        tuple(sources),
        meta_dir,
        settings.seed,
        settings.k,
        settings.prior_mean or "constant",
        tuple(n.key for n in getattr(req.warm, "neighbours", ())),
        fits,
        settings.kernel,
    )
    resolution = registry.Resolution(recorded.surrogate) if recorded else registry.resolve(req.requested, inputs)
    version = registry.get(resolution.name).meta_model_version(meta_dir)
    if recorded is not None and version != recorded.meta_model:
        raise StudyError(
            f"the {resolution.name} meta-model in {meta_dir} changed since the study started "
            f"({recorded.meta_model} -> {version}); resume with --models-dir pointing at the original"
        )
    fit_missing(fits, sources_used(resolution.name, inputs), inputs, req.progress)
    surrogate = registry.prepare(resolution, inputs)
    if recorded is not None:
        initial = list(recorded.initial)
    else:
        initial = _initial_configs(req.space, req.warm, surrogate)
    plan = SurrogatePlan(
        "bo",
        req.requested,
        surrogate.name,
        surrogate.note,
        str(req.models_dir),
        version,
        tuple(s.key for s in sources),
        tuple(initial),
    )
    return Planned(plan, surrogate)


def _bo_sources(req: _PlanArgs, fits: SourceFits) -> list[SourceTask]:
    """The sources BO's surrogate is prepared on: none for a plain GP with a constant prior mean,
    a resumed study's recorded ones, else the history, cut to the most relevant when it is long."""
    from agent.tuning.source_models import MAX_SOURCES, most_relevant

    needs_history = req.requested != "gp" or req.settings.prior_mean in ("neighbours", "observations")
    if req.recorded is not None:
        return _recorded_sources(req.history(fits, set(req.recorded.source_keys)), req.recorded)
    if not needs_history:
        return []
    ranked = tuple(getattr(req.warm, "ranked", ()))
    if len(ranked) > MAX_SOURCES:  # the nearest by meta-features: the others' records are not read
        if req.progress is not None:
            req.progress(
                f"history: {len(ranked)} source datasets; the surrogate attends to the {MAX_SOURCES} nearest "
                "by meta-features"
            )
        return req.history(fits, set(ranked[:MAX_SOURCES]))
    sources = req.history(fits)
    if len(sources) > MAX_SOURCES:
        return most_relevant(
            sources, getattr(req.warm, "ranked", ()), fits, req.space, req.settings.kernel, req.progress
        )
    return sources


def _recorded_sources(sources: list[SourceTask], recorded: SurrogatePlan) -> list[SourceTask]:
    by_key = {s.key: s for s in sources}
    missing = [k for k in recorded.source_keys if k not in by_key]
    if missing:
        raise StudyError(
            f"{len(missing)} of the {len(recorded.source_keys)} historical datasets this study's "
            f"surrogate was built on are gone from the store (e.g. {missing[0]}); it cannot resume as it started"
        )
    return [by_key[k] for k in recorded.source_keys]


def _initial_configs(space: Any, warm: Any, surrogate: Any) -> list[tuple[dict[str, Any], str]]:
    """Warm-start seeds, then the surrogate's start points, without repeats."""
    from agent.samplers.acquisition import point_key

    out: list[tuple[dict[str, Any], str]] = []
    seen: set[tuple[float, ...]] = set()
    points = [(c, o) for c, o in (warm.seeds if warm is not None else [])]
    points += [(space.decode(u), f"init:{surrogate.name}") for u in surrogate.start_points()]
    for config, origin in points:
        key = point_key(space.snap(space.encode(config))[0])
        if key not in seen:
            seen.add(key)
            out.append((dict(config), origin))
    return out
