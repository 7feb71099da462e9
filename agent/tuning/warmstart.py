"""Warm starting a study from its nearest historical datasets (paper 003 Alg. 3, paper 000 Alg. 3).

Ahead of the first trial: meta-features of the new dataset → the ``k`` nearest historical datasets
run with the same job and search space → their best configurations (distinct: a neighbour whose
best is already seeded gives its next best) are evaluated first → (with
``prior_mean='neighbours'``) the mean of their response surfaces becomes the GP's prior mean.
The method falls back learned → hand-crafted → none when there is no trained extractor or no
history, and says so in one line. What seeded the study is stored on its run so that a resumed
study gets exactly the same seeds.

Know when history does not apply: the new dataset's nearest distance is compared with the
history's own, each historical dataset's distance to its nearest dataset from another source. The
message reports the ratio to their median; when the new dataset is farther from everything than
any historical dataset is from its nearest other-source neighbour (:data:`FAR_FACTOR` times the
largest such distance), it says so and seeds nothing from neighbours: the history's greedy
portfolio (the transfer surrogates' start) and the guarded transfer surrogate lead instead of
configurations of implausible neighbours. Neighbours are picked from distinct sources first (five
class subsets of one source are one piece of evidence, not five).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.config import PRIOR_MEANS  # noqa: F401 - re-exported for callers
from agent.knowledge.history import (
    HistoricalDataset,
    compatible_history,
    config_key,
    load_history,
    surface_data,
    with_evaluations_loaded,
)
from agent.meta.neighbours import HandcraftedFeaturizer, Neighbour, distinct_first, nearest, own_nearest, vectors_for
from agent.meta.own_distances import CACHED_FROM, history_distances
from agent.registry import WARM_STARTS
from agent.samplers.pareto import front_ends
from agent.space import SpaceMatch
from agent.tuning.history_features import attach_samples, refresh_metafeatures
from agent.tuning.warm_choice import CHOICE_FILE, evaluated_choice  # noqa: F401 - CHOICE_FILE re-exported

# A new dataset farther from its nearest historical dataset than FAR_FACTOR x the largest distance
# any historical dataset has to its nearest other-source neighbour is "far from everything".
FAR_FACTOR = 1.0


@dataclass(frozen=True)
class NeighbourInfo:
    name: str
    key: str
    distance: float
    best_config: Mapping[str, Any]
    best_value: float
    # a study of several metrics: the other end of the neighbour's front (its feasible trials that no
    # other beats on every metric), the best on the last metric; None for one metric
    other_end: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class WarmStart:
    method: str
    neighbours: tuple[NeighbourInfo, ...] = ()
    message: str = ""
    prior_mean: str = "constant"
    history: tuple[HistoricalDataset, ...] = field(default=(), repr=False, compare=False)
    distance_ratio: float | None = None  # nearest distance / the history's median nearest-neighbour distance
    far: bool = False  # farther from everything than any historical dataset: neighbours seed nothing
    # every historical dataset's key, nearest first: which sources a transfer surrogate keeps when
    # the history has more than it attends to (not recorded: a resumed study keeps its plan's sources)
    ranked: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def seeds(self) -> list[tuple[dict[str, Any], str]]:
        """Distinct best configurations of the neighbours, nearest first, then (several metrics)
        the other ends of their fronts, with their origin (none when the dataset is far from the
        whole history)."""
        if self.far:
            return []
        out, seen = [], set()
        for config, n in [(n.best_config, n) for n in self.neighbours] + [
            (n.other_end, n) for n in self.neighbours if n.other_end is not None
        ]:
            key = json.dumps(dict(config), sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append((dict(config), f"warm:{self.method}:{n.name}"))
        return out

    def to_record(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "prior_mean": self.prior_mean,
            "message": self.message,
            "neighbours": [asdict(n) for n in self.neighbours],
            "distance_ratio": self.distance_ratio,
            "far": self.far,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> WarmStart:
        neighbours = tuple(NeighbourInfo(**n) for n in record.get("neighbours", ()))
        return cls(
            record["method"],
            neighbours,
            record.get("message", ""),
            record.get("prior_mean", "constant"),
            distance_ratio=record.get("distance_ratio"),
            far=bool(record.get("far", False)),
        )


@dataclass(frozen=True)
class Nearness:
    """How near the new dataset is, against the history's own nearest-neighbour distances."""

    nearest: float
    median: float  # median over historical datasets of the distance to their nearest other-source one
    largest: float

    @property
    def ratio(self) -> float:
        return self.nearest / self.median if self.median > 0 else float("inf")

    @property
    def far(self) -> bool:
        return self.nearest > FAR_FACTOR * self.largest


def nearness(query: np.ndarray, vectors: np.ndarray, sources: list[str], standardise: bool) -> Nearness | None:
    """The query's nearest distance and the history's nearest other-source distances, all measured
    in one standardisation (history and query together, as :func:`nearest` does). Beyond
    :data:`agent.meta.neighbours.OWN_SAMPLE` datasets the history's own distances (median, largest)
    are those of a fixed sample of them to every dataset (memory and time linear in the history)."""
    if len(vectors) < 2:
        return None
    M = np.vstack([np.asarray(vectors, dtype=float), np.asarray(query, dtype=float)[None]])
    if standardise:
        from agent.meta.handcrafted import standardise_columns

        M = standardise_columns(M)[0]
    M = np.nan_to_num(M, nan=0.0)
    own = own_nearest(M[:-1], sources)
    if own.size == 0:
        return None
    to_query = np.sqrt(((M[:-1] - M[-1]) ** 2).sum(axis=1))
    return Nearness(float(to_query.min()), float(np.median(own)), float(own.max()))


def _featurizer(requested: str, models_dir: Path, scope: str | None = None) -> tuple[Any, str]:
    """The featurizer of the registry's entry ``requested`` (``auto``: the learned one unless the
    last evaluation chose the hand-crafted meta-features or none is trained), and a note for the
    warm start's line; an entry whose model is missing falls back to the hand-crafted ones, saying so."""
    if requested == "auto":
        choice = evaluated_choice(models_dir, scope)
        if choice is not None and choice.get("method") == "handcrafted":
            return HandcraftedFeaturizer(), f"auto chose them: {choice.get('why', 'the evaluation of this history')}"
        learned = WARM_STARTS.load("learned")(models_dir)
        if learned is not None:
            return learned, ""
        return HandcraftedFeaturizer(), "auto: no learned extractor is published for this job"  # nothing to nag
    found = WARM_STARTS.load(requested)(models_dir)
    if found is not None:
        return found, ""
    where = "or the store (run `dvc repro`)" if requested == "learned" else "(its entry found no model there)"
    return (
        HandcraftedFeaturizer(),
        f"--warm-start {requested}: no trained meta-feature extractor in {models_dir} {where}",
    )


def plan_warm_start(
    kb: Any,
    job: Any,
    dataset: Any,
    sample: tuple[np.ndarray, np.ndarray],
    summary: Mapping[str, Any],
    requested: str,
    k: int,
    models_dir: Path,
    prior_mean: str | None = None,
    progress: Callable[[str], None] | None = None,
    objectives: Sequence[tuple[str, str]] = (),
    constraints: Sequence[tuple[str, str, float]] = (),
) -> WarmStart:
    """Finds the neighbours of ``dataset`` among historical datasets of the same job and space
    (with several ``objectives`` or any ``constraints``, the ends of their fronts seed the study).
    ``progress`` hears of the one slow step there can be: meta-features stored by an older version,
    recomputed from the samples and stored again (once per store)."""
    WARM_STARTS.check(requested)
    if requested == "none":
        return WarmStart("none", message="warm start off (--warm-start none)")
    # once, light records: the history, the fallback match and the neighbours' records all read it
    listed = kb.study_index()
    history, match, matched_note = _job_history(kb, job, dataset, listed)
    if not history:
        return WarmStart(
            "none", message=f"warm start: no history for job {job.name} with this search space; starting cold"
        )
    featurizer, note = _featurizer(requested, models_dir, f"{job.name}/{job.space.signature()}")
    evaluated_elsewhere = len(history)  # counted while datasets without samples or meta-features are still in
    found, near = _nearest(kb, featurizer, history, listed, (dataset, sample, summary), progress)
    neighbours = _pick_neighbours(
        kb, job, history, found, match, k, {s.study_id: s for s in listed}, objectives, constraints
    )
    far = near is not None and near.far
    prior = prior_mean or ("neighbours" if neighbours and not far else "constant")
    if not neighbours and evaluated_elsewhere and prior_mean in (None, "neighbours"):
        # No meta-feature neighbours (e.g. the history is imported evaluations without dataset
        # samples): choose them from the target's own observations as trials arrive instead.
        message = (
            f"warm start: none of the {evaluated_elsewhere} historical datasets has {featurizer.method} "
            "meta-features; the GP prior mean follows the ones nearest to this study's results"
        )
        return WarmStart(featurizer.method, (), message, "observations", tuple(history))
    head = f"warm start ({featurizer.method} meta-features{'; ' + note if note else ''}{matched_note})"
    return WarmStart(
        featurizer.method,
        tuple(neighbours),
        _neighbours_message(head, neighbours, near, len(history)),
        prior,
        tuple(history),
        distance_ratio=None if near is None else near.ratio,
        far=far,
        ranked=tuple(history[n.index].key for n in found),
    )


def _nearest(
    kb: Any,
    featurizer: Any,
    history: list[HistoricalDataset],
    listed: list[Any],
    target: tuple[Any, tuple[np.ndarray, np.ndarray], Mapping[str, Any]],
    progress: Callable[[str], None] | None,
) -> tuple[list[Neighbour], Nearness | None]:
    """The historical datasets by distance to ``target`` (the dataset, its sample and summary) in
    ``featurizer``'s meta-features, and how near the nearest is against the history's own."""
    dataset, sample, summary = target
    attach_samples(kb, featurizer, history)
    if featurizer.method == "handcrafted":
        refresh_metafeatures(kb, history, {s.study_id: s for s in listed}, progress)
    vectors = vectors_for(featurizer, history)
    query = featurizer.vector(sample[0], sample[1], dataset.kind, dataset.num_classes, summary)
    found = nearest(query, vectors, len(history), featurizer.standardise)
    sources = [h.source for h in history]
    if len(history) < CACHED_FROM:
        return found, nearness(query, vectors, sources, featurizer.standardise)
    # a large history's own distances are kept between starts (agent.meta.own_distances)
    scope = f"{featurizer.method}\n{kb.tracking_uri}\n{history[0].job}/{history[0].space_signature}"
    to_query, own = history_distances(query, vectors, [h.key for h in history], sources, featurizer.standardise, scope)
    return found, Nearness(to_query, float(np.median(own)), float(own.max())) if own.size else None


def _job_history(
    kb: Any, job: Any, dataset: Any, listed: list[Any]
) -> tuple[list[HistoricalDataset], SpaceMatch | None, str]:
    """The historical datasets of ``job`` and its space (``dataset``'s own excluded), without samples
    or evaluations; when there are none, those of the closest compatible job and space, with the
    match and a note about it (``"; ..."``) for the message."""
    history = load_history(
        kb,
        job=job.name,
        space_signature=job.space.signature(),
        with_samples=False,
        with_evaluations=False,
        exclude_fingerprints={dataset.fingerprint},
        studies=listed,
    )
    if history:
        return history, None, ""
    history, match, other = compatible_history(
        kb,
        job.space,
        with_samples=False,
        with_evaluations=False,
        exclude_fingerprints={dataset.fingerprint},
        studies=listed,
    )
    return history, match, "" if match is None else "; " + match.note(f"job {other}")


def _pick_neighbours(
    kb: Any,
    job: Any,
    history: list[HistoricalDataset],
    found: list[Neighbour],
    match: SpaceMatch | None,
    k: int,
    studies: Mapping[str, Any],
    objectives: Sequence[tuple[str, str]] = (),
    constraints: Sequence[tuple[str, str, float]] = (),
) -> list[NeighbourInfo]:
    """Up to ``k`` of the ``found`` datasets with a configuration to seed (in ``job``'s space, translated
    through ``match`` when the history is another space's): distinct sources first, then the nearest
    of the rest; nearest first. Each seeds a configuration no nearer neighbour seeds
    (:meth:`~agent.knowledge.history.HistoricalDataset.warm_pick`: its best one not taken, or a much
    faster one of nearly the same value). Loads the evaluations of each dataset it looks at into ``history``.
    With several ``objectives`` (or ``constraints``), a neighbour whose trials reported them gives
    the two ends of its feasible front (:func:`~agent.samplers.pareto.front_ends`); one that did
    not, its best trial."""
    neighbours: list[NeighbourInfo] = []
    distance = {n.index: n.distance for n in found}

    def here(config: Mapping[str, Any]) -> dict[str, Any]:
        return dict(config) if match is None else job.space.decode(job.space.translate(config, match))

    taken: set[str] = set()  # configurations seeded already: a neighbour whose best is taken gives its next
    for i in distinct_first([n.index for n in found], [h.source for h in history]):
        if len(neighbours) == k:
            break
        h = history[i] = with_evaluations_loaded(kb, history[i], studies)
        ends = (
            front_ends(h.evaluations, h.metric, objectives, constraints) if len(objectives) > 1 or constraints else None
        )
        if ends is not None:
            first, last = ends
            other = here(last.config) if last is not first else None
            neighbours.append(NeighbourInfo(h.name, h.key, distance[i], here(first.config), first.value, other))
            continue
        pick = h.warm_pick(taken)
        if pick is not None:
            taken.add(config_key(pick.config))
            neighbours.append(NeighbourInfo(h.name, h.key, distance[i], here(pick.config), pick.value))
    neighbours.sort(key=lambda x: x.distance)
    return neighbours


def _neighbours_message(head: str, neighbours: list[NeighbourInfo], near: Nearness | None, n_history: int) -> str:
    """The warm start's one line: the neighbours and their distances against the history's own, or
    that the dataset is far from every historical dataset and no neighbour seeds."""
    names = ", ".join(f"{n.name} ({n.distance:.3g})" for n in neighbours)
    if near is None:
        return f"{head}: nearest {names}"
    if near.far:
        return (
            f"{head}: this dataset is far from all {n_history} historical datasets (nearest "
            f"{neighbours[0].name if neighbours else '-'} at {near.nearest:.3g}, "
            + (
                f"{near.nearest / near.largest:.1f}x the farthest any of them is from its nearest "
                "other-source neighbour"
                if near.largest > 0
                else "where each of them has an other-source twin at distance 0"
            )
            + "); no neighbour seeds: "
            "the history's portfolio and the guarded transfer surrogate lead"
        )
    return f"{head}: nearest {names}; {near.ratio:.2g}x the history's median nearest-neighbour distance"


def neighbour_mean_factory(warm: WarmStart, space: Any, kb: Any = None) -> Callable[[], Any] | None:
    """A factory of the neighbours' prior mean, or None for a constant mean."""
    if warm.prior_mean != "neighbours" or not warm.neighbours:
        return None
    from agent.surrogates.gp import torch_threads
    from agent.surrogates.neighbour_mean import NeighbourMean, fit_neighbour_surface

    history = {h.key: h for h in warm.history if h.evaluations}
    if kb is not None and any(n.key not in history for n in warm.neighbours):
        keys = {n.key for n in warm.neighbours}
        listed = kb.study_index()
        studies = {s.study_id: s for s in listed}
        for h in load_history(
            kb, space_signature=space.signature(), with_samples=False, with_evaluations=False, studies=listed
        ):
            if h.key in keys:
                history[h.key] = with_evaluations_loaded(kb, h, studies)
    surfaces = []
    with torch_threads(1):
        for n in warm.neighbours:
            neighbour = history.get(n.key)
            if neighbour is None:
                continue
            U, y = surface_data(neighbour, space)
            if len(y) >= 3:
                surfaces.append(fit_neighbour_surface(U, y))
    if not surfaces:
        return None
    return lambda *observations: NeighbourMean(surfaces)
