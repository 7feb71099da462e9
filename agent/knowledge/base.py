"""The knowledge-base contract: studies and trials as small frozen records.

A *study* is one tuning campaign of one job on one dataset; a *trial* is one evaluated (or failed,
or killed) configuration inside it. Backends (:class:`agent.knowledge.mlflow_store.MlflowKnowledgeBase`)
convert their own objects to these records at the edge, so nothing above ``agent/knowledge`` ever
sees a backend type.

Contract every backend honours:
- ``create_study`` writes nothing visible until the study record is complete.
- ``start_trial`` marks a trial ``running``; ``finish_trial`` moves it to ``ok`` or ``failed``;
  ``close_running_trials`` moves every ``running`` trial of a study to ``killed``.
- ``ok`` and ``failed`` trials count against a study's budget; ``killed`` ones do not.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Mapping

TRIAL_OK = "ok"
TRIAL_FAILED = "failed"
TRIAL_KILLED = "killed"
TRIAL_RUNNING = "running"
COUNTED_STATES = (TRIAL_OK, TRIAL_FAILED)


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


class KnowledgeBase(abc.ABC):
    """Where studies and trials live. See the module docstring for the contract."""

    @abc.abstractmethod
    def create_study(
        self,
        name: str,
        settings: Mapping[str, Any],
        space: list[dict[str, Any]],
        dataset_summary: Mapping[str, Any],
        dataset_sample: tuple[Any, Any] | None,
        description: str,
    ) -> StudyRecord: ...

    @abc.abstractmethod
    def find_study(self, name: str) -> StudyRecord | None: ...

    @abc.abstractmethod
    def list_studies(self) -> list[StudyRecord]: ...

    @abc.abstractmethod
    def trials(self, study: StudyRecord) -> list[TrialRecord]: ...

    @abc.abstractmethod
    def start_trial(
        self, study: StudyRecord, number: int, config: Mapping[str, Any], origin: str
    ) -> TrialRecord: ...

    @abc.abstractmethod
    def finish_trial(
        self,
        study: StudyRecord,
        trial: TrialRecord,
        value: float | None,
        state: str,
        reason: str = "",
        duration: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> TrialRecord: ...

    @abc.abstractmethod
    def close_running_trials(self, study: StudyRecord, reason: str) -> list[TrialRecord]: ...

    @abc.abstractmethod
    def update_study(
        self,
        study: StudyRecord,
        status: str,
        best_value: float | None = None,
        best_config: Mapping[str, Any] | None = None,
    ) -> StudyRecord: ...

    @abc.abstractmethod
    def log_study_figure(self, study: StudyRecord, figure: Any, artifact_file: str) -> None: ...

    @abc.abstractmethod
    def trial_logger(self, study: StudyRecord, trial: TrialRecord) -> Any:
        """A Lightning logger that writes the trial's per-epoch metrics to its record."""
