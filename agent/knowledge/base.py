"""The knowledge-base contract: studies and trials as small frozen records (:mod:`agent.knowledge.records`).
The contract is split as MLflow splits its own stores: :class:`KnowledgeBase` holds studies, trials
and their files, and is a :class:`~agent.knowledge.stores.MetaModelStore`; a store that keeps models
is a :class:`~agent.knowledge.stores.KeptModels` too.

A *study* is one tuning campaign of one job on one dataset; a *trial* is one evaluated (or failed,
or killed) configuration inside it. Backends (:class:`agent.knowledge.mlflow.backend.MlflowKnowledgeBase`,
:class:`agent.knowledge.memory.InMemoryKnowledgeBase`; :func:`agent.knowledge.open_knowledge_base`
picks one by URI) convert their own objects to these records at the edge, so nothing above
``agent/knowledge`` ever sees a backend type. ``tests/knowledge/test_contract.py`` checks every
backend against the contract below.

Contract every backend honours:

- Records are snapshots. A returned :class:`StudyRecord` or :class:`TrialRecord` never changes;
  read the store again (``find_study``, ``trials``) to see later writes.
- Values go through text the way MLflow stores them: ``settings`` and ``best_config`` through JSON
  with sorted keys, a trial's ``config`` through JSON in its own key order; whatever JSON cannot
  hold comes back as its ``str`` (a ``numpy.int64`` comes back as ``"3"``). Study tags and params
  are strings; tag values are cut at 8000 characters, params at 6000, failure reasons at 4000.
- Names are not unique. ``create_study`` always creates a new study; ``find_study`` returns the
  most recently created one of a name. Callers that want one study per name (``tune-agent start``)
  look it up first.
- Order. ``list_studies`` returns studies oldest first. ``trials`` returns a study's trials by
  ``number``, trials sharing a number (a killed trial and the one that re-ran its slot) in the
  order they were started; MLflow orders starts at its clock's 1 ms resolution.
- States. ``start_trial`` makes a trial ``running``; ``finish_trial`` moves it to the state it is
  given (``ok``, ``failed``, ``pruned`` or ``killed``); ``close_running_trials`` moves every ``running`` trial
  of a study to ``killed``. A backend may also report a ``running`` trial as ``killed`` when it knows
  the trial's run was ended without ``finish_trial`` (MLflow: its run was marked FAILED or KILLED).
- ``ok``, ``failed`` and ``pruned`` trials (:data:`COUNTED_STATES`) count against a study's budget; ``killed``
  ones do not, and their slot ``number`` may be used again.
- Metrics. A trial's ``extra`` maps each metric other than ``objective`` and ``duration_s`` to its
  latest value: the one logged at the highest step, the later write winning a tie. The metrics given
  to ``finish_trial`` are logged at step 0; those logged through ``trial_logger`` at Lightning's step.
- Errors. A store that cannot serve a request, or an id it does not hold, raises
  :class:`agent.errors.StoreError` with one line; ``find_study`` and ``load_dataset_sample`` answer
  ``None`` instead for a name or id they do not hold. ``create_study`` raises ``KeyError`` when
  ``settings`` lacks a key it needs (it expects ``StudySettings.to_dict()``).
"""

from __future__ import annotations

import abc
import contextlib
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.knowledge.imports import best_imported
from agent.knowledge.records import (
    IMPORT_ORIGIN,
    TRIAL_KILLED,
    TRIAL_OK,
    TRIAL_RUNNING,
    StudyRecord,
    TrialRecord,
    parse_param,
)
from agent.knowledge.stores import MetaModelStore


class KnowledgeBase(MetaModelStore):
    """Where studies and trials live, with their files and the meta-models built from them (a
    :class:`~agent.knowledge.stores.MetaModelStore`). See the module docstring for the contract. A
    store with a model registry is a :class:`~agent.knowledge.stores.KeptModels` too."""

    import_threads = 1  # how many import_evaluations import_many runs at once (thread-safe stores: more)

    @property
    @abc.abstractmethod
    def tracking_uri(self) -> str:
        """The store's URI, resolved (``sqlite:///...``, ``http://...``, ``memory://name``)."""

    @abc.abstractmethod
    def open(self) -> None:
        """Make the store ready now rather than on first use (an embedded store is created, whole,
        if absent), so that processes sharing it later find it complete; :class:`StoreError` when
        it cannot serve. Idempotent and cheap once open."""

    @abc.abstractmethod
    def check_artifact_root(self, job: str) -> None:
        """Refuses, before a study of ``job`` is prepared, an artifact root given for it that this
        store cannot use."""

    # -- studies -------------------------------------------------------------------------------
    @abc.abstractmethod
    def create_study(
        self,
        name: str,
        settings: Mapping[str, Any],
        space: list[dict[str, Any]],
        dataset_summary: Mapping[str, Any],
        dataset_sample: tuple[Any, Any] | None,
        description: str,
    ) -> StudyRecord:
        """A new study with status ``created``, visible to readers only once it is complete.

        Its ``tags`` are those of :func:`agent.knowledge.layout.study_tags`, its ``params`` those of
        :func:`agent.knowledge.layout.study_params`. ``space`` and ``description`` are kept for
        people (MLflow shows them) and not read back. ``dataset_sample`` (numeric ``X``, ``y``
        arrays) is kept for :meth:`load_dataset_sample`. Never refuses an existing name.
        """

    @abc.abstractmethod
    def find_study(self, name: str) -> StudyRecord | None:
        """The most recently created study named ``name``, or None."""

    @abc.abstractmethod
    def list_studies(self) -> list[StudyRecord]:
        """Every study (imported ones included, meta-model runs not), oldest first."""

    def study_index(self) -> list[StudyRecord]:
        """Every study as :meth:`list_studies` gives them, possibly as light records (``light``:
        only what choosing a history's sources reads), which a store with thousands of studies
        keeps far cheaper to read; :meth:`full_study` gives a light record's whole one."""
        return self.list_studies()

    def full_study(self, study: StudyRecord) -> StudyRecord:
        """``study``'s whole record (itself unless it is a light one)."""
        if not study.light:
            return study
        return next((s for s in self.list_studies() if s.study_id == study.study_id), study)

    @abc.abstractmethod
    def update_study(
        self,
        study: StudyRecord,
        status: str,
        best_value: float | None = None,
        best_config: Mapping[str, Any] | None = None,
    ) -> StudyRecord:
        """Sets the status (``running``, ``finished``, ``failed``, ``interrupted``) and, when
        ``best_value`` is given, the best result; a ``None`` best keeps the stored one.
        Returns the study as now stored."""

    @abc.abstractmethod
    def set_study_tags(self, study: StudyRecord, tags: Mapping[str, Any]) -> None:
        """Adds or overwrites tags; non-string values are stored as JSON (sorted keys)."""

    @abc.abstractmethod
    def study_tags(self, study: StudyRecord) -> dict[str, str]:
        """The study's current tags, read fresh (``study.tags`` is the snapshot of its record)."""

    @abc.abstractmethod
    def claim_study_value(self, study: StudyRecord, key: str, value: str) -> str:
        """Sets the study's write-once ``key`` to ``value`` unless it holds one already; returns
        the value it holds after the call (``value`` when this call set it). Of several processes
        claiming one key at once, exactly one sees its own value (the study's lease)."""

    @staticmethod
    def dataset_summary(study: StudyRecord) -> dict[str, Any]:
        """The dataset statistics given to ``create_study``, from the record's ``dataset.*``
        params: numbers parsed back to ``int`` or ``float``, anything else as text."""
        prefix = "dataset."
        return {k[len(prefix) :]: parse_param(v) for k, v in study.params.items() if k.startswith(prefix)}

    @abc.abstractmethod
    def load_dataset_sample(self, study_id: str) -> tuple[Any, Any] | None:
        """The ``(X, y)`` sample given to ``create_study`` as numpy arrays, or None when the study
        has none or the id is unknown."""

    def load_study_space(self, study: StudyRecord) -> list[dict[str, Any]] | None:
        """The search space given to ``create_study`` (``SearchSpace.to_dict`` form), so a command
        that only reads a study needs not import its job; None when the store does not keep it."""
        return None

    @abc.abstractmethod
    def log_study_figure(self, study: StudyRecord, figure: Any, artifact_file: str) -> None:
        """Saves a matplotlib ``figure`` with the study as ``artifact_file`` (its suffix picks
        the format); a second figure under the same name replaces the first."""

    @abc.abstractmethod
    def log_study_artifacts(self, study: StudyRecord, paths: list[str], artifact_path: str) -> None:
        """Keeps the files at ``paths`` with the study under the folder ``artifact_path`` (a report);
        files of the same name replace earlier ones."""

    def fetch_study_file(self, study: StudyRecord, artifact_file: str, target: Path) -> bool:
        """Copies the file :meth:`log_study_artifacts` kept as ``artifact_file`` (``report/x.png``)
        to ``target``; False when the store has no such file (or keeps none)."""
        return False

    def import_evaluations(
        self,
        name: str,
        settings: Mapping[str, Any],
        space: list[dict[str, Any]],
        configs: list[Mapping[str, Any]],
        values: list[float | None],
        description: str,
        dataset_summary: Mapping[str, Any] | None = None,
        dataset_sample: tuple[Any, Any] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> StudyRecord:
        """One ``finished`` study holding evaluations made elsewhere (with ``tags`` as :meth:`set_study_tags`).

        Trial ``i`` is ``configs[i]`` with value ``values[i]`` (``None`` if missing or not finite),
        state ``ok``, origin ``import``; pairs beyond the shorter list are dropped. The dataset summary
        is ``dataset_summary`` (default ``{"source": settings["dataset_name"], "kind": "external"}``),
        the sample ``dataset_sample`` (default none); its best is the best finite value in
        ``settings["mode"]`` (:func:`best_imported`). Backends override this for speed (MLflow: the
        study appears whole, already ``finished``); the records must stay the same.
        """
        summary = dataset_summary or {"source": settings["dataset_name"], "kind": "external"}
        record = self.create_study(name, settings, space, summary, dataset_sample, description)
        for number, (config, value) in enumerate(zip(configs, values)):
            trial = self.start_trial(record, number, config, IMPORT_ORIGIN)
            number_value = None if value is None else float(value)
            finite = number_value is not None and math.isfinite(number_value)
            self.finish_trial(record, trial, number_value if finite else None, TRIAL_OK)
        if tags:
            self.set_study_tags(record, tags)
        return self.update_study(record, "finished", *best_imported(settings, configs, values))

    @contextlib.contextmanager
    def many_imports(self) -> Iterator[None]:
        """Around many :meth:`import_evaluations`: a store may list them to other readers together."""
        yield

    # -- trials --------------------------------------------------------------------------------
    @abc.abstractmethod
    def trials(self, study: StudyRecord) -> list[TrialRecord]:
        """Every trial of ``study`` in every state, by ``number`` then start order."""

    @abc.abstractmethod
    def start_trial(self, study: StudyRecord, number: int, config: Mapping[str, Any], origin: str) -> TrialRecord:
        """A ``running`` trial in slot ``number``; slots are not checked (the study picks them)."""

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
    ) -> TrialRecord:
        """Ends ``trial`` in ``state`` and returns it as now stored.

        ``value`` becomes the trial's ``value``, ``duration`` its ``duration`` and ``metrics`` go
        to ``extra``; values that are not finite are not stored. A non-empty ``reason`` is kept.
        Finishing a trial again overwrites its state and adds to what it stored.
        """

    def close_running_trials(self, study: StudyRecord, reason: str) -> list[TrialRecord]:
        """Finishes every ``running`` trial of ``study`` as ``killed``; returns them in
        :meth:`trials` order."""
        return [
            self.finish_trial(study, t, None, TRIAL_KILLED, reason)
            for t in self.trials(study)
            if t.state == TRIAL_RUNNING
        ]

    trial_writers = False  # whether trial_writer gives one (an in-memory store's trials train in its process)

    def trial_writer(self, study: StudyRecord, trial: TrialRecord) -> Any:
        """What writes a trial trained in another process into the trial's record, with no
        Lightning import here (``log_params`` of text, ``log_metrics``, ``finalize``); None when the
        store has none (:attr:`trial_writers`)."""
        return None

    @abc.abstractmethod
    def trial_logger(self, study: StudyRecord, trial: TrialRecord) -> Any:
        """A Lightning ``Logger`` whose metrics land in the trial's ``extra``; hyperparameters
        already in ``trial.config`` are not logged again. It does not change the trial's state."""
