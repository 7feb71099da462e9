"""The history as meta-learning data: one :class:`HistoricalDataset` per (dataset, job, space).

Studies of the same job and search space on the same dataset (same content fingerprint) are merged,
so a dataset tuned twice contributes all its evaluations once. Everything here is read from the
knowledge base alone (dataset samples, summaries and trials logged on study runs), never from the
original files: that is what lets ``dvc repro`` retrain the meta-models from MLflow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.errors import TuneAgentError
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import TRIAL_OK, StudyRecord, TrialRecord, parse_param
from agent.space import SearchSpace, SpaceMatch

# A warm start seeds a dataset's fastest configuration instead of its best when that one is within
# NEAR_BEST of the best (as a share of the dataset's range of values) and the best trains SLOWER
# times longer or more (fit_seconds): the expected gain is negligible, the cost is not.
NEAR_BEST = 0.02
SLOWER = 2.0


@dataclass(frozen=True)
class Evaluation:
    """One finished trial: its configuration, objective (in its study's sense) and validation error."""

    config: Mapping[str, Any]
    value: float
    val_error: float | None
    metrics: Mapping[str, float] = field(default_factory=dict)  # what else it reported (n_params, ...)


@dataclass(frozen=True, eq=False)
class HistoricalDataset:
    key: str  # "<fingerprint>/<job>/<space signature>"
    name: str
    source: str
    kind: str
    job: str
    space_signature: str
    fingerprint: str
    metric: str
    mode: str
    studies: tuple[str, ...]
    study_ids: tuple[str, ...]
    summary: Mapping[str, Any]
    evaluations: tuple[Evaluation, ...]
    sample: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    metafeatures: Mapping[str, float] | None = None

    @property
    def num_classes(self) -> int:
        return int(self.summary.get("num_classes", 0) or (int(self.sample[1].max()) + 1 if self.sample else 0))

    def best(self) -> Evaluation | None:
        ok = [e for e in self.evaluations if math.isfinite(e.value)]
        if not ok:
            return None
        sign = -1.0 if self.mode == "min" else 1.0
        return max(ok, key=lambda e: sign * e.value)

    def warm_pick(self, taken: set[str]) -> Evaluation | None:
        """The evaluation this dataset seeds a study with when the configurations in ``taken``
        (:func:`config_key`) are already seeded: its best one not taken, or, when its trials'
        ``fit_seconds`` are known, the fastest of those within :data:`NEAR_BEST` of that best (by
        this dataset's range of values) if the best trains :data:`SLOWER` times longer or more."""
        sign = -1.0 if self.mode == "min" else 1.0
        ok = [e for e in self.evaluations if math.isfinite(e.value)]
        free = sorted((e for e in ok if config_key(e.config) not in taken), key=lambda e: -sign * e.value)
        if not free:
            return None
        best = free[0]
        span = max(sign * e.value for e in ok) - min(sign * e.value for e in ok)
        near = [e for e in free if sign * (best.value - e.value) <= NEAR_BEST * span and _seconds(e) is not None]
        quick = min(near, key=lambda e: _seconds(e) or 0.0, default=None)
        best_s, quick_s = _seconds(best), None if quick is None else _seconds(quick)
        if quick is not None and best_s is not None and quick_s is not None and best_s >= SLOWER * max(quick_s, 1e-9):
            return quick
        return best

    def ranked_configs(self) -> list[Mapping[str, Any]]:
        """Configurations from best to worst by the study's own objective."""
        sign = -1.0 if self.mode == "min" else 1.0
        ok = [e for e in self.evaluations if math.isfinite(e.value)]
        return [e.config for e in sorted(ok, key=lambda e: -sign * e.value)]


def config_key(config: Mapping[str, Any]) -> str:
    """One configuration as a comparable key (the same values give the same key)."""
    return json.dumps(dict(config), sort_keys=True, default=str)


def _seconds(e: Evaluation) -> float | None:
    value = e.metrics.get("fit_seconds")
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _evaluation(trial: TrialRecord) -> Evaluation | None:
    if trial.state != TRIAL_OK or trial.value is None:
        return None
    acc = trial.extra.get("final_val_acc")
    reported = {k[len("final_") :]: float(v) for k, v in trial.extra.items() if k.startswith("final_")}
    return Evaluation(dict(trial.config), float(trial.value), None if acc is None else 1.0 - float(acc), reported)


def group_studies(
    studies: list[StudyRecord], job: str | None = None, space_signature: str | None = None
) -> dict[str, list[StudyRecord]]:
    groups: dict[str, list[StudyRecord]] = {}
    for s in studies:
        if (job and s.job != job) or (space_signature and s.space_signature != space_signature):
            continue
        groups.setdefault(f"{s.fingerprint}/{s.job}/{s.space_signature}", []).append(s)
    return groups


def load_history(
    kb: KnowledgeBase,
    job: str | None = None,
    space_signature: str | None = None,
    with_samples: bool = True,
    with_evaluations: bool = True,
    exclude_fingerprints: set[str] | None = None,
    studies: list[StudyRecord] | None = None,
) -> list[HistoricalDataset]:
    """Every historical dataset (optionally of one job/space), sorted by name.

    Listing costs one query; evaluations cost one query per study and samples one download per
    dataset, so callers that search neighbours first load those only for the ones they pick
    (:func:`with_evaluations_loaded`).
    """
    out = []
    listed = studies if studies is not None else kb.list_studies()  # a caller that listed them already saves a query
    for key, studies in group_studies(listed, job, space_signature).items():
        first = studies[0]
        if exclude_fingerprints and first.fingerprint in exclude_fingerprints:
            continue
        evaluations = _evaluations(kb, studies) if with_evaluations else ()
        if with_evaluations and not evaluations:
            continue
        summary = _DatasetSummary(kb, first)
        mf = first.tags.get("metafeatures")
        metafeatures = first.metafeatures if first.light else None if mf is None else _floats(mf)
        out.append(
            HistoricalDataset(
                key=key,
                name=first.dataset,
                source=str(_param(first, "dataset.source", first.dataset.split("?")[0])),
                kind=str(_param(first, "dataset.kind", "")),
                job=first.job,
                space_signature=first.space_signature,
                fingerprint=first.fingerprint,
                metric=str(first.settings.get("metric", "")),
                mode=str(first.settings.get("mode", "min")),
                studies=tuple(s.name for s in studies),
                study_ids=tuple(s.study_id for s in studies),
                summary=summary,
                evaluations=evaluations,
                sample=kb.load_dataset_sample(first.study_id) if with_samples else None,
                metafeatures=metafeatures,
            )
        )
    return sorted(out, key=lambda h: (h.name, h.key))


def _param(study: StudyRecord, key: str, default: Any) -> Any:
    return parse_param(study.params[key]) if key in study.params else default


class _DatasetSummary(Mapping[str, Any]):
    """A historical dataset's summary (:meth:`KnowledgeBase.dataset_summary`), parsed on first use:
    a warm start ranks thousands of datasets and reads the summaries of a few."""

    def __init__(self, kb: KnowledgeBase, study: StudyRecord) -> None:
        self._kb, self._study = kb, study
        self._parsed: dict[str, Any] | None = None

    def _summary(self) -> dict[str, Any]:
        if self._parsed is None:  # a light record's dataset.* params are in its whole one
            self._parsed = self._kb.dataset_summary(self._kb.full_study(self._study))
        return self._parsed

    def __getitem__(self, key: str) -> Any:
        return self._summary()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._summary())

    def __len__(self) -> int:
        return len(self._summary())


MIN_SHARED = 2  # hyperparameters another space must share (by name and type) for its history to count


def compatible_history(
    kb: KnowledgeBase,
    space: SearchSpace,
    with_samples: bool = True,
    with_evaluations: bool = True,
    exclude_fingerprints: set[str] | None = None,
    studies: list[StudyRecord] | None = None,
) -> tuple[list[HistoricalDataset], SpaceMatch | None, str]:
    """History of another job/space for a space that has none of its own: of every (job, space)
    group in the store, the one whose configurations share the most hyperparameters with ``space``
    (at least :data:`MIN_SHARED`, matched by name and type; then the most datasets). Returns its
    datasets, the match and the job's name; ``([], None, "")`` when nothing is close enough."""
    groups: dict[tuple[str, str], list[StudyRecord]] = {}
    for st in studies if studies is not None else kb.list_studies():
        if st.space_signature != space.signature() and st.status == "finished":
            groups.setdefault((st.job, st.space_signature), []).append(st)
    best: tuple[tuple[int, int], str, str, SpaceMatch] | None = None
    for (job, signature), studies in groups.items():
        configs = [t.config for t in kb.trials(studies[0]) if t.state == TRIAL_OK][:50]
        match = space.match(configs) if configs else None
        if match is None or len(match.matched) < MIN_SHARED:
            continue
        rank = (len(match.matched), len({st.fingerprint for st in studies}))
        if best is None or rank > best[0]:
            best = (rank, job, signature, match)
    if best is None:
        return [], None, ""
    _, job, signature, match = best
    history = load_history(
        kb,
        job=job,
        space_signature=signature,
        with_samples=with_samples,
        with_evaluations=with_evaluations,
        exclude_fingerprints=exclude_fingerprints,
        studies=studies,
    )
    return history, match, job


def _evaluations(kb: KnowledgeBase, studies: list[StudyRecord]) -> tuple[Evaluation, ...]:
    return tuple(e for s in studies for t in kb.trials(s) if (e := _evaluation(t)) is not None)


def with_evaluations_loaded(
    kb: KnowledgeBase, h: HistoricalDataset, studies: Mapping[str, StudyRecord]
) -> HistoricalDataset:
    """``h`` with its evaluations read from its studies (``studies`` maps study ids to records)."""
    from dataclasses import replace

    if h.evaluations:
        return h
    return replace(h, evaluations=_evaluations(kb, [studies[i] for i in h.study_ids if i in studies]))


def _floats(raw: str) -> dict[str, float]:
    import json

    return {k: float("nan") if v is None else float(v) for k, v in json.loads(raw).items()}


def surface_data(
    h: HistoricalDataset, space: SearchSpace, match: SpaceMatch | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A neighbour's evaluations as cube points and maximised values; with ``match`` (history of
    another space) each configuration is translated into ``space`` (:meth:`SearchSpace.translate`)."""
    sign = -1.0 if h.mode == "min" else 1.0
    rows, values = [], []
    for e in h.evaluations:
        try:
            rows.append(space.encode(e.config) if match is None else space.translate(e.config, match))
        except TuneAgentError:
            continue
        values.append(sign * e.value)
    return np.array(rows).reshape(-1, space.dim), np.array(values)
