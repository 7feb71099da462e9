"""The knowledge base's records: a study, a trial and a published version of meta-models as small
frozen snapshots, and the states a trial can be in (see :mod:`agent.knowledge.base` for the contract
the stores honour)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TRIAL_OK = "ok"
TRIAL_FAILED = "failed"
TRIAL_KILLED = "killed"
TRIAL_RUNNING = "running"
TRIAL_PRUNED = "pruned"  # stopped early by the study's pruner; its value is the last one it reached
COUNTED_STATES = (TRIAL_OK, TRIAL_FAILED, TRIAL_PRUNED)
CURVE_PREFIX = "curve_"  # a trial's per-epoch values in its extra fields: curve_1, curve_2, ...
IMPORT_ORIGIN = "import"


@dataclass(frozen=True)
class StudyRecord:
    """A study as stored: ``settings`` is everything needed to resume it."""

    study_id: str
    name: str
    job: str
    dataset: str
    fingerprint: str
    space_signature: str
    status: str
    settings: Mapping[str, Any]
    best_value: float | None = None
    best_config: Mapping[str, Any] | None = None
    start_time: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)  # tune_agent.* tags, prefix stripped
    params: Mapping[str, str] = field(default_factory=dict)
    # a record of the study index (:meth:`KnowledgeBase.study_index`): ``tags`` and ``params`` hold
    # only what choosing a history's sources reads, ``settings`` only the metric and mode;
    # :meth:`KnowledgeBase.full_study` gives the whole record
    light: bool = False
    metafeatures: Mapping[str, float] | None = None  # a light record's stored meta-features, parsed


@dataclass(frozen=True)
class MetaModelsRecord:
    """One published version of what the history of one job and search space (its *scope*,
    ``<job>/<space signature>``) taught: the files of :mod:`agent.knowledge.meta_cache`, named
    ``files/<name>`` (whole meta-models, replaced by the next version) and ``source_models/<digest>.jsonl``
    (source-model chunks that ending studies add; content-named, so two publishers never collide)."""

    record_id: str
    scope: str
    version: int
    engine: str  # the source-model format and fit revision the version was built with
    revision: str  # the history it covers (:func:`agent.knowledge.meta_cache.history_revision`)
    created: int = 0  # ms since the epoch
    files: tuple[str, ...] = ()
    # where each file is kept (parallel to ``files``; empty: all in ``record_id``): two publishers
    # that made the same version at once each hold part of it
    homes: tuple[str, ...] = ()

    def home(self, name: str) -> str:
        """The id of the record that keeps file ``name``."""
        return self.homes[self.files.index(name)] if self.homes and name in self.files else self.record_id


@dataclass(frozen=True)
class TrialRecord:
    """One trial: its slot ``number``, configuration, outcome and provenance."""

    trial_id: str
    number: int
    state: str
    config: Mapping[str, Any]
    value: float | None
    origin: str
    reason: str = ""
    duration: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def parse_param(value: str) -> Any:
    first = value[:1]
    if first and not (first.isdigit() or first.isspace() or first in "+-.nNiI"):
        return value  # no int or float starts so (the history's dataset names: thousands a start)
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value
