"""Published meta-models in MLflow: one run per version, in the team's shared experiment.

Layout (what a person sees in the UI): experiment ``tune-agent/knowledge`` (one for the whole
store, never per user, so a teammate reads what another published); one run per version of a
scope (``<job>/<space signature>``), named ``meta-models <scope> v<N>``, tagged
``tune_agent.kind=meta-models`` with its scope, version, engine and history revision. A version
is visible once its run is FINISHED, that is once every file of it is logged. Its artifacts are
``files/<name>`` and ``source_models/<digest>.jsonl``; a study that ends adds a chunk of the
latter to the current version under a name no other publisher can take.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from agent.errors import StoreError
from agent.knowledge.mlflow.connection import EXPERIMENT_KIND, KNOWLEDGE_EXPERIMENT, MODEL_TRAINING, MlflowConnection
from agent.knowledge.mlflow.store_file import T, store_exists
from agent.knowledge.records import MetaModelsRecord

EXPERIMENT = KNOWLEDGE_EXPERIMENT
KIND = "meta-models"
FOLDERS = ("files", "source_models")


class MlflowMetaModels(MlflowConnection):
    """Versions of meta-models as runs of :data:`EXPERIMENT`."""

    def knowledge_experiment_id(self) -> str | None:
        """The knowledge experiment's id, made when missing (a team server's users get EDIT on it)."""
        return self._knowledge_experiment(create=True)

    def _knowledge_experiment(self, create: bool) -> str | None:
        exp = self._call(self._client.get_experiment_by_name, EXPERIMENT)
        if exp is not None or not create:
            return None if exp is None else exp.experiment_id
        location = None
        if self.artifact_root:
            root = self.artifact_root
            location = (root if "://" in root else Path(root).resolve().as_uri()).rstrip("/") + "/knowledge"
        tags = {
            "mlflow.note.content": "What tune-agent learned from the history: one run per version of a job's "
            "meta-models (source models, portfolios, extractor, TNP).",
            EXPERIMENT_KIND: MODEL_TRAINING,
        }
        try:
            return str(self._call(self._client.create_experiment, EXPERIMENT, artifact_location=location, tags=tags))
        except StoreError:
            exp = self._call(self._client.get_experiment_by_name, EXPERIMENT)  # another publisher made it first
            if exp is None:
                raise
            return str(exp.experiment_id)

    def _versions(self, scope: str, experiment_id: str) -> list[Any]:
        flt = f"tags.`{T}kind` = '{KIND}' and tags.`{T}scope` = '{scope}'"
        return [r for r in self._search(flt, [experiment_id]) if r.info.status == "FINISHED"]

    def current_meta_models(self, scope: str) -> MetaModelsRecord | None:
        if not store_exists(self.tracking_uri):
            return None
        experiment = self._knowledge_experiment(create=False)
        if experiment is None:
            return None
        runs = self._versions(scope, experiment)
        if not runs:
            return None
        top = max(_version(r) for r in runs)
        # Publishers that made the same version at once each hold part of it: their files together
        # are the version (whole files: the newest run's copy)
        tops = sorted((r for r in runs if _version(r) == top), key=lambda r: (r.info.start_time, r.info.run_id))
        homes: dict[str, str] = {}
        for run in tops:
            homes.update((name, run.info.run_id) for name in self._artifact_names(run))
        names = tuple(sorted(homes))
        newest = tops[-1]
        tags = newest.data.tags
        return MetaModelsRecord(
            newest.info.run_id,
            tags.get(T + "scope", ""),
            top,
            tags.get(T + "engine", ""),
            tags.get(T + "revision", ""),
            int(newest.info.start_time or 0),
            names,
            tuple(homes[n] for n in names),
        )

    def _artifact_names(self, run: Any) -> tuple[str, ...]:
        """The run's files under :data:`FOLDERS`: read off the folder itself where the artifacts
        are local (no MLflow import for a reading command), else listed through the store."""
        uri = run.info.artifact_uri or ""
        parsed = urlparse(uri)
        if parsed.scheme in ("", "file"):
            root = Path(unquote(parsed.path) if parsed.scheme else uri)
            return tuple(
                sorted(
                    f"{folder}/{p.name}"
                    for folder in FOLDERS
                    if (root / folder).is_dir()
                    for p in (root / folder).iterdir()
                    if p.is_file()
                )
            )
        names: list[str] = []
        for folder in FOLDERS:
            names += [a.path for a in self._call(self._client.list_artifacts, run.info.run_id, folder) if not a.is_dir]
        return tuple(sorted(names))

    def publish_meta_models(
        self, scope: str, engine: str, revision: str, files: Mapping[str, Path]
    ) -> MetaModelsRecord:
        experiment = self._knowledge_experiment(create=True)
        assert experiment is not None
        current = self._versions(scope, experiment)
        version = 1 + max((_version(r) for r in current), default=0)
        tags = {
            T + "kind": KIND,
            T + "scope": scope,
            T + "version": str(version),
            T + "engine": engine,
            T + "revision": revision,
            "mlflow.note.content": f"Meta-models of `{scope}` (version {version}, history revision {revision}, "
            f"engine {engine}): what tune-agent studies of this job and space load.",
        }
        run = self._create_run(experiment, f"meta-models {scope} v{version}", tags)
        rid = run.info.run_id
        try:
            for name, path in files.items():
                self._log_as(rid, name, Path(path))
        except BaseException:
            self._call(self._client.set_terminated, rid, "FAILED")
            raise
        self._call(self._client.set_terminated, rid, "FINISHED")
        return MetaModelsRecord(
            rid, scope, version, engine, revision, int(run.info.start_time or 0), tuple(sorted(files))
        )

    def _log_as(self, run_id: str, name: str, path: Path) -> None:
        """Logs ``path`` as the artifact ``name`` (MLflow keeps a logged file's own base name)."""
        folder, _, base = name.rpartition("/")
        with tempfile.TemporaryDirectory(prefix="tune-agent-publish-") as tmp:
            staged = Path(tmp) / base
            try:
                os.link(path, staged)
            except OSError:
                shutil.copyfile(path, staged)
            self._call(self._refusal_said, self._client.log_artifact, run_id, str(staged), folder or None)

    def _refusal_said(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` with the artifact proxy's refusal (an HTTP error, not MLflow's) as one line."""
        try:
            return fn(*args)
        except OSError as exc:  # requests' HTTPError is an OSError
            status = getattr(getattr(exc, "response", None), "status_code", None)
            if status in (401, 403):
                who = self.owner or "this user"
                raise StoreError(
                    f"{who} has no permission to publish to {EXPERIMENT} ({status}): meta-models are "
                    "published by users with EDIT on it"
                ) from None
            raise

    def add_meta_model_file(self, record: MetaModelsRecord, name: str, path: Path) -> None:
        self._log_as(record.record_id, name, Path(path))

    def fetch_meta_model_file(self, record: MetaModelsRecord, name: str, target: Path) -> None:
        target = Path(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as tmp:
            got = Path(self._call(self._client.download_artifacts, record.home(name), name, tmp))
            os.replace(got, target)  # whole or not at all: a reader never sees half a file


def _version(run: Any) -> int:
    try:
        return int(run.data.tags.get(T + "version", "0"))
    except ValueError:
        return 0
