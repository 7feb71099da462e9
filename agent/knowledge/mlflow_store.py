"""The MLflow knowledge base: the only module of tune-agent that imports mlflow.

Layout in MLflow (what a person sees in the UI):
- one experiment per job, named ``tune-agent/<job>``;
- one parent run per study, named after the study, tagged ``tune_agent.kind=study`` with the
  dataset name and fingerprint, job, search-space signature, objective, seed, status and best result;
  its artifacts hold ``dataset/summary.json``, ``dataset/sample.npz`` (a fixed seeded sample, so
  meta-feature models can be retrained from MLflow alone), ``space.json`` and the trace plot;
- one nested child run per trial (``mlflow.parentRunId``), named ``<study>/trial-<n>``, with every
  hyperparameter as a param, per-epoch metrics from Lightning's ``MLFlowLogger``, ``objective``,
  ``duration_s`` and tags for state, origin and failure reason.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import urlparse

from agent.errors import StoreError
from agent.knowledge import layout, study_cache
from agent.knowledge.base import (
    IMPORT_ORIGIN,
    TRIAL_KILLED,
    TRIAL_OK,
    TRIAL_RUNNING,
    KnowledgeBase,
    StudyRecord,
    TrialRecord,
)

DEFAULT_TRACKING_URI = "sqlite:///mlflow/mlflow.db"
DEFAULT_ARTIFACT_ROOT = "mlflow/artifacts"
T = "tune_agent."  # tag prefix
SCHEMES = ("", "file", "sqlite", "http", "https")  # what check_reachable accepts


def resolve_tracking_uri(uri: str | None) -> str:
    """``--tracking-uri`` beats ``MLFLOW_TRACKING_URI`` beats the embedded store."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :])


INLINE_TRIALS = "trials.json"  # imported evaluations, inline on their study run


def create_sqlite_store(path: Path) -> None:
    """Create an embedded store's database all at once, or not at all.

    MLflow builds a new sqlite store's ~40 tables over a few seconds; a process killed meanwhile
    left a file on which every later open failed (``table ... already exists``), and two processes
    opening one new store raced each other through the same migrations. Here the schema is built in
    a private file under an exclusive lock and moved into place with one ``os.replace``: the store
    either does not exist yet or is complete. A later opener waits for the lock.

    The schema comes from :func:`schema_template` when there is one (a copy takes milliseconds
    where the migrations take 1.5-4 s), with MLflow's ``Default`` experiment stamped as a fresh
    store would have it; otherwise every migration runs here.
    """
    if path.exists():  # the usual case: no template lookup (nor a first template build) for a store that is there
        return
    template = schema_template()
    if template is None:
        _build_atomically(path, _migrate)
    else:
        _build_atomically(path, lambda partial: _copy_template(template, partial))


def _build_atomically(path: Path, fill: Any) -> None:
    """``fill(partial)`` under ``path``'s lock, then ``partial`` renamed to ``path``."""
    import fcntl

    if path.exists():
        return
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():  # another process created it while this one waited
            return
        partial = path.with_name(f".{path.name}.creating-{os.getpid()}")
        partial.unlink(missing_ok=True)
        fill(partial)
        os.replace(partial, path)


def _migrate(partial: Path) -> None:
    import logging

    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    MlflowClient(f"sqlite:///{partial}").search_experiments(max_results=1)  # runs every migration
    _dispose_engine(f"sqlite:///{partial}")


def schema_template() -> Path | None:
    """An empty store with every migration of the installed MLflow, built once per user under
    ``$XDG_CACHE_HOME/tune-agent`` (``~/.cache``), atomically like any store; None when
    ``TUNE_AGENT_STORE_TEMPLATE=0`` or the cache cannot be written (the store is then migrated in place)."""
    if os.environ.get("TUNE_AGENT_STORE_TEMPLATE", "1") == "0":
        return None
    from importlib.metadata import version

    cache = study_cache.user_cache_dir()
    template = cache / f"mlflow-{version('mlflow')}-empty.db"
    try:
        if not template.exists():
            cache.mkdir(parents=True, exist_ok=True)
            _build_atomically(template, _migrate)
    except OSError:
        return None
    return template


def _copy_template(template: Path, partial: Path) -> None:
    """The template's bytes, with the ``Default`` experiment MLflow creates in a new store given
    this store's creation time and MLflow's default location (``./mlruns/0``)."""
    import shutil
    import sqlite3

    shutil.copyfile(template, partial)
    now = int(time.time() * 1000)
    with sqlite3.connect(partial) as db:
        db.execute("UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
                   "WHERE experiment_id = 0", (str(Path.cwd() / "mlruns" / "0"), now, now))
    db.close()  # the context manager commits; closing is ours


def _dispose_engine(uri: str) -> None:
    """Close MLflow's cached connections to ``uri`` (best effort: an internal cache)."""
    try:
        from mlflow.tracking._tracking_service.utils import _get_store

        store = _get_store(uri)
        engine = getattr(store, "engine", None)
        if engine is not None:
            engine.dispose()
    except Exception:  # noqa: BLE001 - only tidiness is lost
        pass


def check_reachable(uri: str) -> None:
    """Raises :class:`StoreError` in one line when ``uri`` cannot serve requests."""
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        import requests

        try:
            requests.get(uri.rstrip("/") + "/health", timeout=5).raise_for_status()
        except requests.RequestException as exc:
            reason = type(exc).__name__
            raise StoreError(f"cannot reach tracking server {uri} ({reason})") from None
    elif scheme == "sqlite":
        path = _sqlite_path(uri)
        if path is None or (path.parent != Path("") and not path.parent.exists()):
            raise StoreError(f"tracking store directory does not exist: {uri}")
    elif scheme not in SCHEMES:
        raise StoreError(f"unsupported tracking URI scheme {scheme!r}: {uri}")


def store_exists(uri: str) -> bool:
    """False only when ``uri`` is an embedded sqlite store whose file was never created."""
    path = _sqlite_path(uri)
    return path is None or path.exists()


RETRY_DELAYS = (2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0)  # seconds between tries of an unreachable server
# A trial's epoch metrics are written at most this often, as one batch (and always when training
# ends): one write per epoch cost ~15 ms on sqlite, ~3 s of a 100-epoch trial, and on the driver of
# a parallel study, which replays its workers' records, a whole core (`bench parallel`).
METRICS_FLUSH_SECONDS = 1.0
# The pause before :meth:`MlflowKnowledgeBase._call`'s first, silent retry of an unreachable server.
QUICK_RETRY_SECONDS = 0.2
# Tag of a run this agent created: a token that lets a retry find the run its lost answer made.
CREATE_TOKEN = "tune_agent.create_token"
# How far the tracking server's clock may run behind ours when a retry looks for what the try
# before it made (a model version's creation time is the server's).
CLOCK_SKEW_MS = 60_000
# Tries of an experiment tag write that lost a race with another agent's write of the same key.
TAG_RACE_ATTEMPTS = 4
_UNIQUE_RACE = ("uniqueviolation", "duplicate key value", "unique constraint failed", "integrityerror")


def _unique_key_race(message: str) -> bool:
    """Whether a store's refusal is a unique-key clash (postgres, sqlite, mysql wording)."""
    low = message.lower()
    return any(word in low for word in _UNIQUE_RACE)


def retry_delays() -> tuple[float, ...]:
    """:data:`RETRY_DELAYS`, the first ``TUNE_AGENT_STORE_RETRIES`` of them when that is set."""
    raw = os.environ.get("TUNE_AGENT_STORE_RETRIES")
    if raw is None or not raw.strip().isdigit():
        return RETRY_DELAYS
    return RETRY_DELAYS[: int(raw)]

_UNREACHABLE = ("connectionerror", "connection refused", "max retries exceeded", "failed to establish",
                "remotedisconnected", "connection aborted", "read timed out", "temporarily_unavailable",
                "connection broken", "connection reset", "remote end closed", "incompleteread",
                "error code 502", "error code 503", "error code 504", "bad gateway", "service unavailable")


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the tracking server could not be reached (down, restarting, overloaded),
    as opposed to a refusal or a bad request that retrying cannot fix."""
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    code = str(getattr(exc, "error_code", ""))
    if code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in _UNREACHABLE)


def server_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's own failure (HTTP 5xx, 429), which a second try may not
    meet (a busy database), as MLflow's own single retry used to absorb. ``INTERNAL_ERROR`` is
    also MLflow's code for an error of no known kind: those get the one quick retry too."""
    code = str(getattr(exc, "error_code", ""))
    text = str(exc).lower()
    return code == "INTERNAL_ERROR" or any(f"error code {n}" in text for n in (429, 500, 502, 503, 504))


def explain_mlflow_error(uri: str, exc: Exception) -> str:
    """One line for an MLflow error; refused credentials and permissions say what to do."""
    text = str(exc).strip()
    code = str(getattr(exc, "error_code", ""))
    if code == "UNAUTHENTICATED" or "error code 401" in text:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        who = f"as user {user!r}" if user else "without credentials"
        return (f"tracking server {uri} refused the request {who} (401): set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to an account on that server")
    if code == "PERMISSION_DENIED" or "error code 403" in text:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME", "this user")
        return (f"tracking server {uri}: {user} has no permission for this (403); ask the server's admin for EDIT "
                "on the tune-agent experiments")
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"tracking store {uri}: {first}"


class MlflowKnowledgeBase(KnowledgeBase):
    """Studies and trials in an MLflow tracking store (sqlite file or ``mlflow server``)."""

    def __init__(self, tracking_uri: str | None = None, artifact_root: str | None = None) -> None:
        self._tracking_uri = resolve_tracking_uri(tracking_uri)
        check_reachable(self._tracking_uri)
        self.artifact_root = artifact_root
        self._root_given = artifact_root is not None  # an explicit root must be honoured or refused
        if artifact_root is None and self._tracking_uri == DEFAULT_TRACKING_URI:
            self.artifact_root = DEFAULT_ARTIFACT_ROOT
        self._client_instance: Any = None

    @property
    def tracking_uri(self) -> str:
        return self._tracking_uri

    @property
    def _client(self) -> Any:
        # Created on first use: opening a sqlite URI creates the database file.
        if self._client_instance is None:
            import logging

            from mlflow import MlflowClient

            logging.getLogger("mlflow").setLevel(logging.WARNING)
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            # MLflow prints "View run ... / View experiment ..." links on stdout twice per trial
            # against a server; the study's own lines say where things are.
            os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "1")
            # A server that went down: MLflow's default 7 silent retries took ~250 s; :meth:`_call`
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
                self._client_instance = MlflowClient(self.tracking_uri)
            except Exception as exc:  # noqa: BLE001 - SQLAlchemy's errors for a file that is no store
                if path is None:
                    raise
                first = (str(getattr(exc, "orig", "") or exc).strip().splitlines() or [type(exc).__name__])[0]
                raise StoreError(f"tracking store {self.tracking_uri} cannot be opened ({first}); move {path} aside "
                                 "and a new store is made on next use") from None
        return self._client_instance

    def open(self) -> None:
        self._call(self._client.search_experiments, max_results=1)

    def _check_artifact_root(self) -> None:
        """A local artifact root must take files before a study run is created: a read-only one
        used to fail 30 s later with a traceback and a study run left RUNNING without its files."""
        root = self.artifact_root
        if not root or ("://" in root and not root.startswith("file:")):
            return
        path = Path(root[len("file://"):] if root.startswith("file://") else root)
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path, prefix=".tune-agent-write-check-"):
                pass
        except OSError as exc:
            raise StoreError(f"artifact root {path} is not writable ({exc.strerror or type(exc).__name__}); "
                             "give a writable --artifact-root") from None

    # -- helpers -------------------------------------------------------------------------------
    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` with MLflow's errors as one line; a tracking server that cannot be reached is
        retried with backoff (:data:`RETRY_DELAYS`, about two minutes in all), each wait announced
        on stderr, before the error is raised."""
        from mlflow.exceptions import MlflowException

        delays = retry_delays()
        attempt = 0
        quick = True  # one silent retry at once: a dropped keep-alive connection is not an outage
        while True:
            try:
                return fn(*args, **kwargs)
            except (MlflowException, OSError) as exc:
                down = self._remote and unreachable(exc)
                if quick and self._retry_at_once(exc):
                    quick = False
                    time.sleep(QUICK_RETRY_SECONDS)
                    continue
                if down and attempt < len(delays):
                    delay = delays[attempt]
                    attempt += 1
                    sys.stderr.write(f"tracking server {self.tracking_uri} unreachable, retrying ({attempt}/{len(delays)}) "
                                     f"in {delay:g} s\n")
                    sys.stderr.flush()
                    time.sleep(delay)
                    continue
                if down:
                    raise StoreError(f"tracking server {self.tracking_uri} unreachable; gave up after {len(delays)} "
                                     f"retries over {sum(delays):g} s") from None
                if isinstance(exc, MlflowException):
                    raise StoreError(explain_mlflow_error(self.tracking_uri, exc)) from None
                raise

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
            lambda: next(iter(self._client.search_runs([experiment_id], f"tags.`{CREATE_TOKEN}` = '{token}'",
                                                       max_results=1)), None))

    def _retry_at_once(self, exc: BaseException) -> bool:
        """Whether a failed request earns the one silent retry at once: a server (not a sqlite
        file) that could not be reached or failed on its side."""
        return self._remote and (unreachable(exc) or server_error(exc))

    @property
    def _remote(self) -> bool:
        return urlparse(self.tracking_uri).scheme in ("http", "https")

    def _tune_experiments(self) -> list[Any]:
        """tune-agent's experiments (``tune-agent/<job>``), with their tags."""
        return [e for e in self._call(self._client.search_experiments, max_results=1000) if e.name.startswith("tune-agent/")]

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

    def _experiment_for(self, job: str) -> str:
        name = f"tune-agent/{job}"
        exp = self._call(self._client.get_experiment_by_name, name)
        location = None
        if self.artifact_root:
            root = self.artifact_root
            location = root if "://" in root else Path(root).resolve().as_uri()
            location = f"{location.rstrip('/')}/{job}"
        if exp is not None:
            if self._root_given and location and exp.artifact_location.rstrip("/") != location.rstrip("/"):
                raise StoreError(f"experiment {name!r} already keeps its artifacts in {exp.artifact_location}; "
                                 f"--artifact-root {self.artifact_root} cannot move them (drop the option or use "
                                 "another store)")
            return exp.experiment_id
        tags = {"mlflow.note.content": f"tune-agent studies of job `{job}`: one parent run per study."}
        try:
            return self._call(self._client.create_experiment, name, artifact_location=location, tags=tags)
        except StoreError:
            # Another process (a parallel worker, a second agent) created it first: use theirs.
            exp = self._call(self._client.get_experiment_by_name, name)
            if exp is None:
                raise
            return exp.experiment_id

    def _to_study(self, run: Any) -> StudyRecord:
        tags = {k[len(T):]: v for k, v in run.data.tags.items() if k.startswith(T)}
        return layout.study_record(run.info.run_id, run.info.start_time, tags, dict(run.data.params), run.info.run_name)

    def _to_trial(self, run: Any) -> TrialRecord:
        tags, metrics = run.data.tags, run.data.metrics
        state = tags.get(T + "state", TRIAL_RUNNING)
        if state == TRIAL_RUNNING and run.info.status in ("FAILED", "KILLED"):
            state = TRIAL_KILLED
        value = metrics.get("objective")
        return TrialRecord(
            trial_id=run.info.run_id,
            number=int(tags.get(T + "trial", -1)),
            state=state,
            config=json.loads(tags.get(T + "config", "{}")),
            value=None if value is None or not math.isfinite(value) else float(value),
            origin=tags.get(T + "origin", ""),
            reason=tags.get(T + "reason", ""),
            duration=metrics.get("duration_s"),
            extra={k: v for k, v in metrics.items() if k not in ("objective", "duration_s")},
        )

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
        import numpy as np
        from mlflow.entities import Param, RunTag

        self._check_artifact_root()
        exp_id = self._experiment_for(settings["job_name"])
        tags = layout.study_tags(name, settings, dataset_summary)
        kind = tags.pop("kind")  # tagged last: searches find the study only once it is complete
        run_tags = {T + k: v for k, v in tags.items()}
        run = self._create_run(exp_id, name, {**run_tags, "mlflow.note.content": description})
        rid = run.info.run_id
        params = layout.study_params(settings, dataset_summary)
        self._call(self._client.log_batch, rid, params=[Param(k, v) for k, v in params.items()])
        self._call(self._client.log_inputs, rid, [self._dataset_input(settings, dataset_summary)])
        self._call(self._client.log_dict, rid, dict(dataset_summary), "dataset/summary.json")
        self._call(self._client.log_dict, rid, {"params": space}, "space.json")
        if dataset_sample is not None:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "sample.npz"
                np.savez_compressed(path, X=dataset_sample[0], y=dataset_sample[1])
                self._call(self._client.log_artifact, rid, str(path), "dataset")
        self._call(self._client.log_batch, rid, tags=[RunTag(T + "kind", kind)])
        return self._to_study(self._call(self._client.get_run, rid))

    @staticmethod
    def _dataset_input(settings: Mapping[str, Any], summary: Mapping[str, Any]) -> Any:
        """The study's dataset as an MLflow dataset input (the UI's Dataset column): its name, the
        fingerprint as digest, its statistics as the profile."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        name = str(settings["dataset_name"])
        profile = {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))}
        dataset = Dataset(name=name[:500], digest=str(settings["fingerprint"])[:36], source_type="tune-agent",
                          source=json.dumps({"dataset": name}), profile=json.dumps(profile, default=str)[:4000])
        return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])

    def find_study(self, name: str) -> StudyRecord | None:
        if not store_exists(self.tracking_uri):
            return None
        safe = name.replace("'", "\\'")
        flt = f"tags.`{T}kind` = 'study' and tags.`{T}study` = '{safe}'"
        runs = list(self._search(flt))
        return self._to_study(runs[-1]) if runs else None

    def list_studies(self) -> list[StudyRecord]:
        """Every study, oldest first. Ended studies come from :mod:`agent.knowledge.study_cache`
        where an experiment's version tag still matches the cache and every study that was running
        when it was saved still runs; running studies are always read fresh."""
        if not store_exists(self.tracking_uri):
            return []
        exps = self._tune_experiments()
        ids = [e.experiment_id for e in exps]
        flt = f"tags.`{T}kind` = 'study'"
        if not ids:
            return []
        if not study_cache.enabled():
            return [self._to_study(r) for r in self._search(flt, ids)]
        key = self._store_key()
        # Versions are read (above) before any search: a write that lands after this point
        # leaves a version that differs from the one saved below.
        running = {r.info.run_id: _cache_row(r) for r in self._search(flt + " and attributes.status = 'RUNNING'", ids)}
        rows: dict[str, dict[str, Any]] = {}
        stale = []
        versions: dict[str, str | None] = {}
        for e in exps:
            version = versions[e.experiment_id] = e.tags.get(study_cache.VERSION_TAG) or self._first_version(e.experiment_id)
            cached = study_cache.load(key, e.experiment_id, e.creation_time, version) if version else None
            if cached is None or not set(cached["running"]) <= set(running):
                stale.append(e)
            else:
                rows.update((r["run_id"], r) for r in cached["ended"])
        if stale:
            ended: dict[str, list[dict[str, Any]]] = {e.experiment_id: [] for e in stale}
            for r in self._search(flt + " and attributes.status != 'RUNNING'", list(ended)):
                ended[r.info.experiment_id].append(_cache_row(r))
            for e in stale:
                rows.update((r["run_id"], r) for r in ended[e.experiment_id])
                version = versions[e.experiment_id]
                if version:
                    study_cache.save(key, e.experiment_id, e.creation_time, version, {
                        "ended": ended[e.experiment_id],
                        "running": [rid for rid, r in running.items() if r["experiment_id"] == e.experiment_id]})
        rows.update(running)  # a resumed study: its fresh record wins over the cached one
        ordered = sorted(rows.values(), key=lambda r: (r["start_time"], r["run_id"]))
        return [layout.study_record(r["run_id"], r["start_time"], r["tags"], r["params"], r["run_name"]) for r in ordered]

    def _store_key(self) -> str:
        path = _sqlite_path(self.tracking_uri)
        return f"sqlite:{path.resolve()}" if path is not None else self.tracking_uri

    def _first_version(self, experiment_id: str) -> str | None:
        """A version for an experiment that has none (a store written before the cache): setting
        a new one before searching is always safe, it can only make other caches stale. None
        where this user may not tag the experiment (the listing is then not cached)."""
        try:
            return self._studies_changed(experiment_id)
        except StoreError:
            return None

    def _studies_changed(self, experiment_id: str) -> str:
        """A new version tag on the experiment, after a write that ended a study or changed an
        ended one (:mod:`agent.knowledge.study_cache`)."""
        import uuid

        version = uuid.uuid4().hex
        for attempt in range(TAG_RACE_ATTEMPTS):
            try:
                self._call(self._client.set_experiment_tag, experiment_id, study_cache.VERSION_TAG, version)
                return version
            except StoreError as exc:
                # MLflow's store sets a tag by looking it up, then inserting or updating: two agents
                # ending studies at the same moment can both find it absent, and the second insert
                # breaks the key's uniqueness. The tag exists now, so a second try updates it.
                if attempt + 1 == TAG_RACE_ATTEMPTS or not _unique_key_race(str(exc)):
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def update_study(
        self,
        study: StudyRecord,
        status: str,
        best_value: float | None = None,
        best_config: Mapping[str, Any] | None = None,
    ) -> StudyRecord:
        from mlflow.entities import Metric, RunTag

        tags = [RunTag(T + "status", status)]
        metrics = []
        if best_value is not None:
            tags += [RunTag(T + "best_value", repr(float(best_value))), RunTag(T + "best_config", layout.to_json(best_config))]
            now = int(time.time() * 1000)
            metrics.append(Metric("best_objective", best_value, now, 0))
            # the final best configuration, sortable in the UI's run list: numbers as metrics, the
            # rest as tags (only when the study ends: a best that later changed would leave stale keys)
            for key, value in (best_config or {}).items() if status == "finished" else ():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
                    metrics.append(Metric(f"best.{key}", float(value), now, 0))
                else:
                    tags.append(RunTag(f"best.{key}", str(value)[:layout.REASON_LIMIT]))
        self._call(self._client.log_batch, study.study_id, metrics=metrics, tags=tags)
        run_status = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}.get(status)
        if run_status:
            self._call(self._client.set_terminated, study.study_id, run_status)
        else:
            self._call(self._client.update_run, study.study_id, status="RUNNING")
        run = self._call(self._client.get_run, study.study_id)
        if run_status:
            self._studies_changed(run.info.experiment_id)
        return self._to_study(run)

    def register_model(self, study: StudyRecord, trial: TrialRecord, model: Any, example: Any, predictions: Any,
                       name: str, tags: Mapping[str, str]) -> str:
        import mlflow
        import mlflow.pytorch
        from mlflow.models import infer_signature

        signature = infer_signature(example, predictions)
        mlflow.set_tracking_uri(self.tracking_uri)

        # A retry (the server's answer lost) finds the version an earlier try made from this
        # trial's run since this call began: one version, not two.
        began = int(time.time() * 1000) - CLOCK_SKEW_MS

        def made() -> str | None:
            versions = [v for v in self._client.search_model_versions(f"name = '{name}' and run_id = '{trial.trial_id}'")
                        if v.creation_timestamp >= began]
            return str(max(int(v.version) for v in versions)) if versions else None

        def log() -> str:
            import contextlib
            import io

            # MLflow narrates the registration on stderr; the command prints the version it made
            with mlflow.start_run(run_id=trial.trial_id), contextlib.redirect_stderr(io.StringIO()):
                info = mlflow.pytorch.log_model(model, name="model", signature=signature, input_example=example,
                                                registered_model_name=name, pip_requirements=[])
            return str(info.registered_model_version)

        status = self._call(self._client.get_run, trial.trial_id).info.status
        try:
            version = self._call_once(log, made)
        finally:
            # start_run reopens the trial's run, and a try that failed inside it ended it FAILED:
            # the run goes back to how the study left it
            self._call(self._client.set_terminated, trial.trial_id, status)
        for key, value in tags.items():
            self._call(self._client.set_model_version_tag, name, version, key, str(value)[:5000])
        self._call(self._client.update_model_version, name, version,
                   description=f"Best configuration of tune-agent study `{study.name}` (trial {trial.number + 1}), "
                               f"retrained with its seed and split.")
        return version

    def log_study_artifacts(self, study: StudyRecord, paths: list[str], artifact_path: str) -> None:
        for path in paths:
            self._call(self._client.log_artifact, study.study_id, path, artifact_path)

    def log_study_figure(self, study: StudyRecord, figure: Any, artifact_file: str) -> None:
        self._call(self._client.log_figure, study.study_id, figure, artifact_file)

    def set_study_tags(self, study: StudyRecord, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        values = layout.split_long({k: layout.tag_value(v) for k, v in tags.items()})
        batch = [RunTag(T + k, v) for k, v in values.items()]
        for i in range(0, len(batch), 100):  # MLflow takes at most 100 tags per batch
            self._call(self._client.log_batch, study.study_id, tags=batch[i:i + 100])
        self._studies_changed(self._experiment_of(study))

    def study_tags(self, study: StudyRecord) -> dict[str, str]:
        """The study's current tune_agent.* tags (fresh from the store)."""
        run = self._call(self._client.get_run, study.study_id)
        return layout.join_long({k[len(T):]: v for k, v in run.data.tags.items() if k.startswith(T)})

    def load_dataset_sample(self, study_id: str) -> tuple[Any, Any] | None:
        """A study's logged dataset sample ``(X, y)``, or None if it has none."""
        import numpy as np

        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self._call(self._client.download_artifacts, study_id, "dataset/sample.npz", tmp)
            except StoreError:
                return None
            with np.load(path) as data:
                return data["X"], data["y"]

    # -- external evaluations ------------------------------------------------------------------
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
    ) -> StudyRecord:
        """One finished study holding evaluations made elsewhere, its trials inline.

        Three MLflow calls per row made a 64-row study cost 2 s on sqlite (a 240-dataset starter
        history took minutes); the rows are one ``trials.json`` artifact of the study run instead,
        marked by the tag ``tune_agent.trials_inline``, and :meth:`trials` reads them back as the
        same records. The study run shows them in the MLflow UI's artifact view.
        """
        from mlflow.entities import RunTag

        summary = dataset_summary or {"source": settings["dataset_name"], "kind": "external"}
        record = self.create_study(name, settings, space, summary, dataset_sample, description)
        rows = []
        for number, (config, value) in enumerate(zip(configs, values)):
            finite = value is not None and math.isfinite(float(value))
            rows.append({"number": number, "config": dict(config), "value": float(value) if finite else None})
        self._call(self._client.log_dict, record.study_id, {"trials": rows}, INLINE_TRIALS)
        self._call(self._client.log_batch, record.study_id, tags=[RunTag(T + "trials_inline", "1")])
        return self.update_study(record, "finished")

    def _inline_trials(self, study_id: str) -> list[TrialRecord]:
        import mlflow.artifacts

        with tempfile.TemporaryDirectory() as tmp:
            path = self._call(mlflow.artifacts.download_artifacts, run_id=study_id, artifact_path=INLINE_TRIALS,
                              dst_path=tmp, tracking_uri=self.tracking_uri)
            rows = json.loads(Path(path).read_text())["trials"]
        return [TrialRecord(f"{study_id}:{r['number']}", int(r["number"]), TRIAL_OK, r["config"], r["value"], IMPORT_ORIGIN)
                for r in rows]

    # -- meta-model runs -----------------------------------------------------------------------
    def start_model_run(self, kind: str, params: Mapping[str, Any], description: str) -> tuple[str, Any]:
        """A run in experiment ``tune-agent/meta-models`` and a Lightning logger writing to it."""
        from lightning.pytorch.loggers import MLFlowLogger
        from mlflow.entities import Param

        exp_id = self._experiment_for("meta-models")
        tags = {T + "kind": "meta-model", T + "model": kind, "mlflow.note.content": description}
        run = self._create_run(exp_id, kind, tags)
        rid = run.info.run_id
        self._call(self._client.log_batch, rid, params=[Param(k, str(v)[:layout.PARAM_LIMIT]) for k, v in params.items()])
        kb = self

        class ModelRunLogger(MLFlowLogger):
            """Lightning's MLflow logger, each write retried as every store call is (MLflow's own
            retries are off: see ``_client``), a metrics write's rows made once."""

            def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
                rows = _metric_rows(metrics, step)
                kb._call(lambda: self.experiment.log_batch(run_id=self.run_id, metrics=rows, **self._log_batch_kwargs))

            def log_hyperparams(self, params: Any) -> None:
                kb._call(MLFlowLogger.log_hyperparams, self, params)

            def finalize(self, status: str = "success") -> None:
                kb._call(MLFlowLogger.finalize, self, status)

        return rid, ModelRunLogger(tracking_uri=self.tracking_uri, run_id=rid)

    def finish_model_run(self, run_id: str, metrics: Mapping[str, float], artifacts: list[str]) -> None:
        from mlflow.entities import Metric

        unreadable = [p for p in artifacts if not Path(p).is_file()]
        if unreadable:
            raise StoreError(f"cannot read model artifact {unreadable[0]}")
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        self._call(self._client.log_batch, run_id, metrics=batch)
        for path in artifacts:
            self._call(self._client.log_artifact, run_id, path, "model")
        self._call(self._client.set_terminated, run_id, "FINISHED")

    # -- trials --------------------------------------------------------------------------------
    def trials(self, study: StudyRecord) -> list[TrialRecord]:
        run = self._call(self._client.get_run, study.study_id)
        if run.data.tags.get(T + "trials_inline") == "1":
            return self._inline_trials(study.study_id)
        flt = f"tags.`mlflow.parentRunId` = '{study.study_id}'"
        # The search returns runs by start time (ties by run id); a stable sort keeps that order
        # among trials sharing a number, as the contract asks.
        records = [self._to_trial(r) for r in self._search(flt, [run.info.experiment_id])]
        return sorted(records, key=lambda t: t.number)

    def start_trial(
        self, study: StudyRecord, number: int, config: Mapping[str, Any], origin: str
    ) -> TrialRecord:
        from mlflow.entities import Param

        exp_id = self._experiment_of(study)
        summary = ", ".join(f"{k}={_short(v)}" for k, v in config.items())
        tags = {
            "mlflow.parentRunId": study.study_id,
            T + "kind": "trial",
            T + "study": study.name,
            T + "trial": str(number),
            T + "state": TRIAL_RUNNING,
            T + "origin": origin,
            T + "config": layout.config_json(config),  # keeps the space's order
            T + "dataset": study.dataset,
            T + "job": study.job,
            "mlflow.note.content": f"Trial {number} of study `{study.name}` ({origin}): {summary}",
        }
        run = self._create_run(exp_id, f"{study.name}/trial-{number + 1}", tags)
        params = [Param(k, str(v)) for k, v in config.items()]
        self._call(self._client.log_batch, run.info.run_id, params=params)
        return self._to_trial(run)

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
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        values = dict(metrics or {})
        if value is not None:
            values["objective"] = value
        if duration is not None:
            values["duration_s"] = duration
        batch = [Metric(k, float(v), now, 0) for k, v in values.items() if math.isfinite(float(v))]
        tags = [RunTag(T + "state", state)] + ([RunTag(T + "reason", reason[:layout.REASON_LIMIT])] if reason else [])
        self._call(self._client.log_batch, trial.trial_id, metrics=batch, tags=tags)
        status = {"ok": "FINISHED", "pruned": "FINISHED", "failed": "FAILED"}.get(state, "KILLED")
        self._call(self._client.set_terminated, trial.trial_id, status)
        return self._to_trial(self._call(self._client.get_run, trial.trial_id))

    def trial_logger(self, study: StudyRecord, trial: TrialRecord) -> Any:
        from lightning.pytorch.loggers import MLFlowLogger

        kb = self

        class TrialLogger(MLFlowLogger):
            """Keeps the trial's params as logged: hyperparameters already set are skipped. Epoch
            metrics are gathered and written as one batch at most every ``METRICS_FLUSH_SECONDS``
            and when training ends; metrics and params that cannot reach the tracking server are
            kept, and written in order by the next call that can, at the latest when training ends
            (retried then as every store call is): an outage does not stop or fail the training."""

            @property
            def _pending(self) -> list[tuple[Any, tuple[Any, ...]]]:
                return self.__dict__.setdefault("_unwritten", [])

            def _write(self, method: Any, *args: Any) -> None:
                self._pending.append((method, args))
                failed_at = self.__dict__.get("_failed_at")
                if failed_at is not None and time.monotonic() - failed_at < RETRY_DELAYS[0] * 2:
                    return  # the server was down a moment ago: keep it, training goes on
                written_at = self.__dict__.get("_written_at")
                if method is _METRICS and written_at is not None and time.monotonic() - written_at < METRICS_FLUSH_SECONDS:
                    return  # gathered into the next batch
                # while the server was up, a failure is retried once at once (a dropped connection, a
                # busy database), as kb._call does; only an unreachable server's is kept for later
                tries = 1 if failed_at is not None else 2
                for attempt in range(tries):
                    if attempt:
                        time.sleep(QUICK_RETRY_SECONDS)
                    try:
                        self._flush()
                        return
                    except Exception as exc:
                        down = kb._remote and unreachable(exc)
                        if attempt + 1 < tries and kb._retry_at_once(exc):
                            continue
                        if not down:
                            raise
                if failed_at is None:
                    sys.stderr.write(f"tracking server {kb.tracking_uri} unreachable: keeping this trial's epoch "
                                     "metrics to write when it is back\n")
                self.__dict__["_failed_at"] = time.monotonic()

            def _flush(self) -> None:
                kept = len(self._pending)
                while self._pending:
                    method, args = self._pending[0]
                    if method is _METRICS:  # every consecutive metrics entry in one batch
                        n = next((i for i, (m, _) in enumerate(self._pending) if m is not _METRICS), len(self._pending))
                        rows = [row for _, (batch,) in self._pending[:n] for row in batch]
                        self.experiment.log_batch(run_id=self.run_id, metrics=rows, **self._log_batch_kwargs)
                        del self._pending[:n]
                        self.__dict__["_written_at"] = time.monotonic()  # of epoch metrics: the first goes at once
                    else:
                        method(self, *args)
                        self._pending.pop(0)
                if self.__dict__.pop("_failed_at", None) is not None:
                    sys.stderr.write(f"tracking server {kb.tracking_uri} back: wrote {kept} kept batch(es)\n")

            def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
                self._write(_METRICS, _metric_rows(metrics, step))

            def log_hyperparams(self, params: Any) -> None:
                known = set(trial.config)
                extra = {k: v for k, v in dict(vars(params) if not isinstance(params, Mapping) else params).items() if k not in known}
                if extra:
                    self._write(MLFlowLogger.log_hyperparams, extra)

            def finalize(self, status: str = "success") -> None:
                if self._pending:
                    kb._call(self._flush)
                kb._call(MLFlowLogger.finalize, self, status)

        logger = TrialLogger(tracking_uri=self.tracking_uri, run_id=trial.trial_id)
        # Lightning would fetch the run on first use to learn its experiment (and fail the trial if
        # the server is down at that moment); we know it.
        logger._experiment_id = self._experiment_of(study)
        logger._initialized = True
        return logger

    def _experiment_of(self, study: StudyRecord) -> str:
        cache = self.__dict__.setdefault("_experiments", {})
        if study.study_id not in cache:
            cache[study.study_id] = self._call(self._client.get_run, study.study_id).info.experiment_id
        return cache[study.study_id]


_METRICS = object()  # a TrialLogger's pending entry of epoch metrics (a list of mlflow Metric)


def _metric_key(key: str) -> str:
    """A metric name as MLflow accepts it (what Lightning's MLFlowLogger keeps of it)."""
    import re

    return re.sub(r"[^a-zA-Z0-9_/. -]+", "", key)


def _metric_rows(metrics: Mapping[str, float], step: int | None) -> list[Any]:
    """One logger write's metric rows, stamped now: made once, so that a retry sends the same
    rows and a write the server had already taken is kept once."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(key=_metric_key(k), value=float(v), timestamp=now, step=step or 0)
            for k, v in metrics.items() if not isinstance(v, str)]


def _cache_row(run: Any) -> dict[str, Any]:
    """What a study record is made from, as plain data (:mod:`agent.knowledge.study_cache`)."""
    return {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id, "start_time": run.info.start_time or 0,
            "run_name": run.info.run_name, "params": dict(run.data.params),
            "tags": {k[len(T):]: v for k, v in run.data.tags.items() if k.startswith(T)}}


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
