"""An in-memory knowledge base: the whole contract in plain Python, for tests and benchmarks.

Use it where a study's history need not outlive the process: benchmarks that run thousands of
trials, tests of the tuning loop, a quick look at a new job. Open it with
``open_knowledge_base("memory:")`` (or ``memory://NAME``; the name only labels the store, every
call returns a new, empty one). It imports neither MLflow nor, until a logger is asked for,
Lightning.

Records are built with :mod:`agent.knowledge.layout`, as :class:`MlflowKnowledgeBase` builds them,
so both backends return equal records (ids and start times aside). A record is built at most once per write
and handed out as is: its mappings are read-only dicts, so readers share it without copies. Every
method holds one lock, so threads may share a store. A study's files and meta-model runs are kept by
:mod:`agent.knowledge.memory_files`, published meta-models by :mod:`agent.knowledge.memory_meta`.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from agent.errors import StoreError
from agent.knowledge import layout
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.memory_files import FrozenDict, InMemoryFiles, _Run
from agent.knowledge.memory_meta import InMemoryMetaModels
from agent.knowledge.records import TRIAL_RUNNING, MetaModelsRecord, StudyRecord, TrialRecord

SCHEME = "memory"
_RESERVED = ("objective", "duration_s")  # metrics that are TrialRecord fields, not ``extra``


@dataclass(eq=False)
class _Trial(_Run):
    number: int = 0
    config: Mapping[str, Any] = field(default_factory=FrozenDict)
    origin: str = ""
    state: str = TRIAL_RUNNING
    reason: str = ""
    record: TrialRecord | None = None  # built on the first read after a write

    def snapshot(self) -> TrialRecord:
        if self.record is None:
            value = self.latest.get("objective", (0, math.nan))[1]
            duration = self.latest.get("duration_s")
            self.record = TrialRecord(
                trial_id=self.run_id,
                number=self.number,
                state=self.state,
                config=self.config,
                value=value if math.isfinite(value) else None,
                origin=self.origin,
                reason=self.reason,
                duration=None if duration is None else duration[1],
                extra=FrozenDict((k, v) for k, (_, v) in self.latest.items() if k not in _RESERVED),
            )
        return self.record


@dataclass(eq=False)
class _Study:
    study_id: str
    start_time: int
    tags: dict[str, str]
    params: Mapping[str, str]
    space: list[dict[str, Any]]
    description: str
    sample: tuple[Any, Any] | None
    figures: dict[str, bytes] = field(default_factory=dict)
    trials: list[_Trial] = field(default_factory=list)
    in_order: bool = True  # trials were started with non-decreasing numbers
    record: StudyRecord | None = None

    def snapshot(self) -> StudyRecord:
        if self.record is None:
            r = layout.study_record(self.study_id, self.start_time, FrozenDict(self.tags), self.params)
            best = None if r.best_config is None else FrozenDict(r.best_config)
            self.record = replace(r, settings=FrozenDict(r.settings), best_config=best)
        return self.record


class InMemoryKnowledgeBase(InMemoryFiles, InMemoryMetaModels, KnowledgeBase):
    """Studies, trials and meta-model runs in this process's memory. See the module docstring."""

    def __init__(self, uri: str = f"{SCHEME}:") -> None:
        if urlparse(uri).scheme != SCHEME:
            raise StoreError(f"not an in-memory store URI: {uri!r} (use memory: or memory://NAME)")
        self._uri = uri
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._studies: dict[str, _Study] = {}  # creation order
        self._latest: dict[str, _Study] = {}  # name -> most recently created study
        self._trials: dict[str, _Trial] = {}
        self._model_runs: dict[str, tuple[_Run, dict[str, Any]]] = {}
        self._meta_models: dict[str, list[tuple[MetaModelsRecord, dict[str, bytes]]]] = {}

    @property
    def tracking_uri(self) -> str:
        return self._uri

    def open(self) -> None:
        """Ready from construction: there is no file or server to prepare."""
        return None

    def check_artifact_root(self, job: str) -> None:
        """Accepts any: files live in this process's memory, under no artifact root."""
        return None

    def __repr__(self) -> str:
        return f"InMemoryKnowledgeBase({self._uri!r}, studies={len(self._studies)}, trials={len(self._trials)})"

    # -- helpers -------------------------------------------------------------------------------
    def _new_id(self) -> str:
        return f"{next(self._ids):032x}"  # shaped like MLflow's run ids, sorted by creation

    def _study(self, study_id: str) -> _Study:
        try:
            return self._studies[study_id]
        except KeyError:
            raise StoreError(f"tracking store {self._uri}: no study with id {study_id!r}") from None

    def _trial(self, trial_id: str) -> _Trial:
        try:
            return self._trials[trial_id]
        except KeyError:
            raise StoreError(f"tracking store {self._uri}: no trial with id {trial_id!r}") from None

    def _log_metric(self, run: _Run, key: str, value: float, step: int) -> None:
        with self._lock:
            run.log(key, value, step)
            if isinstance(run, _Trial):
                run.record = None

    def _log_params(self, run: _Run, params: Mapping[str, str]) -> None:
        with self._lock:
            run.params.update(params)

    # -- studies -------------------------------------------------------------------------------
    def create_study(
        self,
        name: str,
        settings: Mapping[str, Any],
        space: list[dict[str, Any]],
        dataset_summary: Mapping[str, Any],
        dataset_sample: tuple[Any, Any] | None,
        description: str,
    ) -> StudyRecord:
        tags = {k: v[: layout.TAG_LIMIT] for k, v in layout.study_tags(name, settings, dataset_summary).items()}
        params = FrozenDict(layout.study_params(settings, dataset_summary))
        sample = None
        if dataset_sample is not None:
            import numpy as np

            sample = (np.array(dataset_sample[0]), np.array(dataset_sample[1]))  # our own copy
        with self._lock:
            study = _Study(
                self._new_id(),
                int(time.time() * 1000),
                tags,
                params,
                json.loads(json.dumps(space, default=str)),
                description,
                sample,
            )
            self._studies[study.study_id] = study
            self._latest[name] = study
            return study.snapshot()

    def find_study(self, name: str) -> StudyRecord | None:
        with self._lock:
            study = self._latest.get(name)
            return None if study is None else study.snapshot()

    def list_studies(self) -> list[StudyRecord]:
        with self._lock:
            return [s.snapshot() for s in self._studies.values()]

    def update_study(
        self,
        study: StudyRecord,
        status: str,
        best_value: float | None = None,
        best_config: Mapping[str, Any] | None = None,
    ) -> StudyRecord:
        with self._lock:
            cell = self._study(study.study_id)
            cell.tags["status"] = status
            if best_value is not None:
                cell.tags["best_value"] = repr(float(best_value))
                cell.tags["best_config"] = layout.to_json(best_config)[: layout.TAG_LIMIT]
            cell.record = None
            return cell.snapshot()

    def set_study_tags(self, study: StudyRecord, tags: Mapping[str, Any]) -> None:
        values = layout.split_long({k: layout.tag_value(v) for k, v in tags.items()})
        with self._lock:
            cell = self._study(study.study_id)
            cell.tags.update(values)
            cell.record = None

    def study_tags(self, study: StudyRecord) -> dict[str, str]:
        with self._lock:
            return layout.join_long(self._study(study.study_id).tags)

    def claim_study_value(self, study: StudyRecord, key: str, value: str) -> str:
        with self._lock:
            cell = self._study(study.study_id)
            params = dict(cell.params)
            held = params.setdefault(f"claim.{key}", value)
            cell.params, cell.record = params, None
            return held

    def load_dataset_sample(self, study_id: str) -> tuple[Any, Any] | None:
        with self._lock:
            study = self._studies.get(study_id)
            sample = None if study is None else study.sample
        return None if sample is None else (sample[0].copy(), sample[1].copy())

    def load_study_space(self, study: StudyRecord) -> list[dict[str, Any]] | None:
        with self._lock:
            found = self._studies.get(study.study_id)
            return None if found is None else json.loads(json.dumps(found.space))

    # -- trials --------------------------------------------------------------------------------
    def trials(self, study: StudyRecord) -> list[TrialRecord]:
        with self._lock:
            cell = self._study(study.study_id)
            records = [t.snapshot() for t in cell.trials]
            in_order = cell.in_order
        return records if in_order else sorted(records, key=lambda t: t.number)  # stable: start order

    def start_trial(self, study: StudyRecord, number: int, config: Mapping[str, Any], origin: str) -> TrialRecord:
        stored = FrozenDict(json.loads(layout.config_json(config)))
        with self._lock:
            cell = self._study(study.study_id)
            trial = _Trial(self._new_id(), number=int(number), config=stored, origin=origin)
            if cell.trials and trial.number < cell.trials[-1].number:
                cell.in_order = False
            cell.trials.append(trial)
            self._trials[trial.run_id] = trial
            return trial.snapshot()

    def finish_trial(
        self,
        study: StudyRecord,
        trial: TrialRecord,
        value: float | None,
        state: str,
        reason: str = "",
        duration: float | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> TrialRecord:
        values = {k: float(v) for k, v in (metrics or {}).items()}
        if value is not None:
            values["objective"] = float(value)
        if duration is not None:
            values["duration_s"] = float(duration)
        with self._lock:
            cell = self._trial(trial.trial_id)
            for key, v in values.items():
                if math.isfinite(v):
                    cell.log(key, v, 0)
            cell.state = state
            if reason:
                cell.reason = reason[: layout.REASON_LIMIT]
            cell.record = None
            return cell.snapshot()

    def close_running_trials(self, study: StudyRecord, reason: str) -> list[TrialRecord]:
        with self._lock:  # one step, so no trial is closed twice by two callers
            return super().close_running_trials(study, reason)

    def trial_logger(self, study: StudyRecord, trial: TrialRecord) -> Any:
        from agent.knowledge.memory_logger import MemoryLogger

        with self._lock:
            cell = self._trial(trial.trial_id)
        return MemoryLogger(
            cell.run_id,
            lambda k, v, s: self._log_metric(cell, k, v, s),
            lambda p: self._log_params(cell, p),
            skip=cell.config,
        )

    def metric_history(self, trial: TrialRecord, key: str) -> list[tuple[int, float]]:
        """Every ``(step, value)`` the trial logged for ``key``, in logging order."""
        with self._lock:
            return list(self._trial(trial.trial_id).history.get(key, []))

    def trial_params(self, trial: TrialRecord) -> dict[str, str]:
        """Hyperparameters the trial's logger recorded beyond its configuration."""
        with self._lock:
            return dict(self._trial(trial.trial_id).params)


__all__ = ["InMemoryKnowledgeBase", "SCHEME"]
