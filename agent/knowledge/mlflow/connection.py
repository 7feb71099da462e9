"""The connection to an MLflow store: a lazily made client whose every call is retried and
explained in one line (:mod:`.retry`), searches by page, experiments per job, runs read back as records."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge import layout
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.mlflow.retry import CREATE_TOKEN, RetriedCalls
from agent.knowledge.mlflow.store_file import (
    DEFAULT_ARTIFACT_ROOT,
    DEFAULT_TRACKING_URI,
    T,
    _sqlite_path,
    check_reachable,
    create_sqlite_store,
    resolve_tracking_uri,
    store_exists,
    unwritable,
)
from agent.knowledge.records import TRIAL_KILLED, TRIAL_RUNNING, StudyRecord, TrialRecord

# MLflow 3's UI opens an experiment in the view its kind names; without it, its GenAI view came first
# (MLflow 3.17's UI reads the kind only behind a flag it keeps off: the sidebar's workflow, which the
# link below sets, chooses the view; the tag stays for the UIs that read it)
EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
# A saved view of the experiment's runs table (MLflow >= 3.15 "Views"; the UI's "Save view" writes
# the same tag): the objective and the job's hyperparameters as columns. A bare experiment page
# shows only Run Name, Created, Dataset, Duration, Source and Models, every metric and parameter
# hidden until chosen; the link of :func:`runs_view_url` opens this view with nothing to click.
VIEW_KEY = "tune-agent"
KNOWLEDGE_EXPERIMENT = "tune-agent/knowledge"  # published meta-models (:mod:`.meta_models`): no studies there
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"


def runs_view_state(space: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The runs table's state for a job's studies: each study's dataset and ``best_objective``, each
    trial's ``objective`` and hyperparameters (the trials are grouped under their study's row)."""
    names = [str(p["name"]) for p in space if "name" in p]
    return {
        "selectedColumns": [
            "attributes.`Dataset`",
            "metrics.`objective`",
            "metrics.`best_objective`",
            *(f"params.`{n}`" for n in names),
        ]
    }


def runs_view_url(base: str, experiment_id: str) -> str:
    """The MLflow UI's page of an experiment's runs in its training view with tune-agent's saved
    view (nothing else in the query: the UI drops a saved view when sort or filter keys come with it)."""
    return (
        f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}"
        "&workflowType=machine_learning"
    )


def _view_tag(state: Mapping[str, Any], previous: str | None) -> str | None:
    """The tag's value for ``state``, or None when ``previous`` already holds it."""
    text = json.dumps(dict(state), sort_keys=True)
    if previous:
        try:
            if json.loads(previous).get("state") == text:
                return None
        except (ValueError, AttributeError):
            pass
    now = int(time.time() * 1000)
    return json.dumps(
        {"name": "tune-agent: objective and hyperparameters", "createdAt": now, "updatedAt": now, "state": text}
    )


class MlflowConnection(RetriedCalls, KnowledgeBase):
    """The store's client, its calls retried (:class:`RetriedCalls`), searches and experiments; what
    every part of :class:`agent.knowledge.mlflow.backend.MlflowKnowledgeBase` builds on."""

    def __init__(
        self, tracking_uri: str | None = None, artifact_root: str | None = None, fast_reads: bool = False
    ) -> None:
        self._fast_reads = fast_reads  # reads of an embedded store without MLflow (:mod:`.sqlite_reads`)
        self._tracking_uri = resolve_tracking_uri(tracking_uri)
        check_reachable(self._tracking_uri)
        self.artifact_root = artifact_root
        self._root_given = artifact_root is not None  # an explicit root must be honoured or refused
        if artifact_root is None and self._tracking_uri == DEFAULT_TRACKING_URI:
            self.artifact_root = DEFAULT_ARTIFACT_ROOT
        self._client_instance: Any = None
        # the ended studies this object listed, parsed, by (experiment id, listing version), with the
        # ids of the studies that ran then (:meth:`MlflowStudies.list_studies`)
        self._listed: dict[tuple[str, str, bool], tuple[set[str], list[Any]]] = {}

    @property
    def tracking_uri(self) -> str:
        return self._tracking_uri

    @property
    def _client(self) -> Any:
        # Created on first use: opening a sqlite URI creates the database file.
        if self._client_instance is None:
            path = _sqlite_path(self.tracking_uri)
            if self._fast_reads and path is not None and path.is_file():
                from agent.knowledge.mlflow.sqlite_reads import KNOWN_REVISIONS, SqliteReads, revision

                if revision(path) in KNOWN_REVISIONS:
                    self._client_instance = SqliteReads(path, self._mlflow_client)
                    return self._client_instance
            self._client_instance = self._mlflow_client()
        return self._client_instance

    def _mlflow_client(self) -> Any:
        import logging

        from mlflow import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        # its SQLAlchemy errors come back to _call as exceptions, said there in one line
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        # MLflow prints "View run ... / View experiment ..." links on stdout twice per trial
        # against a server; the study's own lines say where things are.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
        # A server that went down: MLflow's default 7 silent retries take ~250 s; :meth:`_call`
        # retries instead, saying so on stderr within seconds. MLflow's own retries would also
        # re-send a POST whose answer was lost, and a run created twice is a duplicate trial:
        # none are left to it, and :meth:`_call`'s first, silent retry absorbs a single dropped
        # connection as MLflow's would.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        path = _sqlite_path(self.tracking_uri)
        if path is not None:
            create_sqlite_store(path)
        try:
            return MlflowClient(self.tracking_uri)
        except Exception as exc:
            if path is None:
                raise
            first = (str(getattr(exc, "orig", "") or exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StoreError(
                f"tracking store {self.tracking_uri} cannot be opened ({first}); move {path} aside "
                "and a new store is made on next use"
            ) from None

    def open(self) -> None:
        self._call(self._client.search_experiments, max_results=1)

    def _check_artifact_root(self) -> None:
        """A local artifact root must take files before a study run is created: otherwise a read-only
        one fails 30 s later, with a traceback and a study run left RUNNING without its files."""
        root = self.artifact_root
        if not root or ("://" in root and not root.startswith("file:")) or self.__dict__.get("_root_checked"):
            return
        path = Path(root[len("file://") :] if root.startswith("file://") else root)
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".tune-agent-write-check-") as probe:
                probe.write(b"\0" * 65536)  # a full disk still makes an empty file: write what a sample needs
                probe.flush()
                os.fsync(probe.fileno())
        except OSError as exc:
            raise unwritable(f"artifact root {path} is not writable", exc).hinted(
                "give a writable --artifact-root"
            ) from None
        self.__dict__["_root_checked"] = True  # once per process: a study checks before its preparation

    # -- helpers -------------------------------------------------------------------------------
    def _call_once(self, make: Any, find: Any) -> Any:
        """``make()`` through :meth:`_call`, in effect once: a server can do the work and lose its
        answer (killed or cut off in between), and a plain retry would do it again. Every retry
        first asks ``find()`` for what an earlier try made, and makes it only when that is None."""
        tried = False

        def attempt() -> Any:
            nonlocal tried
            if tried:
                found = find()
                if found is not None:
                    return found
            tried = True
            return make()

        return self._call(attempt)

    def _create_run(self, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> Any:
        """``create_run`` exactly once (a second run would be a duplicate trial): the run carries a
        fresh token, by which a retry finds it."""
        import uuid

        token = uuid.uuid4().hex
        return self._call_once(
            lambda: self._client.create_run(experiment_id, run_name=run_name, tags={**tags, CREATE_TOKEN: token}),
            lambda: next(
                iter(self._client.search_runs([experiment_id], f"tags.`{CREATE_TOKEN}` = '{token}'", max_results=1)),
                None,
            ),
        )

    def _tune_experiments(self) -> list[Any]:
        """tune-agent's experiments of studies (``tune-agent/<job>``), with their tags."""
        return [
            e
            for e in self._call(self._client.search_experiments, max_results=1000)
            if e.name.startswith("tune-agent/") and e.name != KNOWLEDGE_EXPERIMENT
        ]

    def runs_view(self, job: str, space: list[Mapping[str, Any]], ui: str) -> str | None:
        """The link (:func:`runs_view_url`, the UI at ``ui``) to ``job``'s experiment with its saved
        runs view for ``space``, written when it has another or none; None when there is no such
        experiment (never made here: on a server, the experiment is this user's own)."""
        name, _ = self._experiment_location(job)
        if self._call(self._client.get_experiment_by_name, name) is None:
            return None
        return runs_view_url(ui, self._experiment_for(job, runs_view_state(space)))

    def _experiment_ids(self) -> list[str]:
        return [e.experiment_id for e in self._tune_experiments()]

    def _search(self, filter_string: str, experiment_ids: list[str] | None = None) -> Iterator[Any]:
        ids = experiment_ids if experiment_ids is not None else self._experiment_ids()
        if not ids:
            return
        token = None
        while True:
            page = self._call(
                self._client.search_runs,
                ids,
                filter_string,
                max_results=1000,
                order_by=["attributes.start_time ASC"],
                page_token=token,
            )
            yield from page
            token = page.token
            if not token:
                return

    @property
    def owner(self) -> str | None:
        """Who writes to a tracking server: its user (``MLFLOW_TRACKING_USERNAME``); None on a
        local store. On a server with users every owner's studies of a job go to the owner's own
        experiment, which MLflow's permissions then guard: the team reads it (the server's default
        permission), only its owner (who created it: MANAGE) can log to, tag or delete its runs."""
        return os.environ.get("MLFLOW_TRACKING_USERNAME") or None if self._remote else None

    def _experiment_location(self, job: str) -> tuple[str, str | None]:
        """The job's experiment name and where its artifacts go (None: MLflow's default)."""
        name = f"tune-agent/{job}" + (f"/{self.owner}" if self.owner else "")
        location = None
        if self.artifact_root:
            root = self.artifact_root
            location = root if "://" in root else Path(root).resolve().as_uri()
            location = f"{location.rstrip('/')}/{job}" + (f"/{self.owner}" if self.owner else "")
        return name, location

    def _conflict(self, exp: Any, name: str, location: str | None) -> None:
        if self._root_given and location and exp.artifact_location.rstrip("/") != location.rstrip("/"):
            raise StoreError(
                f"experiment {name!r} already keeps its artifacts in {exp.artifact_location}; "
                f"--artifact-root {self.artifact_root} cannot move them (drop the option or use "
                "another store)"
            )

    def check_artifact_root(self, job: str) -> None:
        """An explicit ``--artifact-root`` that ``job``'s experiment cannot take, or that takes no
        files, refused now: before a study's preparation, not after it."""
        if not self._root_given:
            return
        self._check_artifact_root()
        if not store_exists(self.tracking_uri):
            return
        name, location = self._experiment_location(job)
        exp = self._call(self._client.get_experiment_by_name, name)
        if exp is not None:
            self._conflict(exp, name, location)

    def _experiment_for(self, job: str, view: Mapping[str, Any] | None = None) -> str:
        """The id of ``job``'s experiment, made when missing; ``view`` (:func:`runs_view_state`)
        becomes its saved runs view when it differs from the one it has."""
        name, location = self._experiment_location(job)
        exp = self._call(self._client.get_experiment_by_name, name)
        if exp is not None:
            self._conflict(exp, name, location)
            missing = {}
            if exp.tags.get(EXPERIMENT_KIND) is None:  # made before the tag: the UI opened it in its GenAI view
                missing[EXPERIMENT_KIND] = MODEL_TRAINING
            value = _view_tag(view, exp.tags.get(VIEW_TAG)) if view is not None else None
            if value is not None:
                missing[VIEW_TAG] = value
            for key, value in missing.items():
                try:
                    self._call(self._client.set_experiment_tag, exp.experiment_id, key, value)
                except StoreError:
                    pass  # another owner's experiment: theirs to tag
            return exp.experiment_id
        whose = f" by {self.owner}" if self.owner else ""
        tags = {
            "mlflow.note.content": f"tune-agent studies of job `{job}`{whose}: one parent run per study.",
            EXPERIMENT_KIND: MODEL_TRAINING,
        }
        if view is not None:
            tags[VIEW_TAG] = _view_tag(view, None) or ""
        try:
            return self._call(self._client.create_experiment, name, artifact_location=location, tags=tags)
        except StoreError:
            # Another process (a parallel worker, a second agent) created it first: use theirs.
            exp = self._call(self._client.get_experiment_by_name, name)
            if exp is None:
                raise
            return exp.experiment_id

    def _to_study(self, run: Any) -> StudyRecord:
        tags = {k[len(T) :]: v for k, v in run.data.tags.items() if k.startswith(T)}
        return layout.study_record(run.info.run_id, run.info.start_time, tags, dict(run.data.params), run.info.run_name)

    def _to_trial(self, run: Any) -> TrialRecord:
        tags, metrics = run.data.tags, run.data.metrics
        state = tags.get(T + "state", TRIAL_RUNNING)
        if state == TRIAL_RUNNING and run.info.status in ("FAILED", "KILLED"):
            state = TRIAL_KILLED
        value = metrics.get("objective")
        return TrialRecord(
            trial_id=run.info.run_id,
            # stores written before the slot tag held the slot (from 0) in the trial tag
            number=int(tags[T + "slot"]) if T + "slot" in tags else int(tags.get(T + "trial", -1)),
            state=state,
            config=json.loads(tags.get(T + "config", "{}")),
            value=None if value is None or not math.isfinite(value) else float(value),
            origin=tags.get(T + "origin", ""),
            reason=tags.get(T + "reason", ""),
            duration=metrics.get("duration_s"),
            extra={k: v for k, v in metrics.items() if k not in ("objective", "duration_s")},
        )

    def _store_key(self) -> str:
        path = _sqlite_path(self.tracking_uri)
        return f"sqlite:{path.resolve()}" if path is not None else self.tracking_uri

    def _experiment_of(self, study: StudyRecord) -> str:
        cache = self.__dict__.setdefault("_experiments", {})
        if study.study_id not in cache:
            cache[study.study_id] = self._call(self._client.get_run, study.study_id).info.experiment_id
        return cache[study.study_id]
