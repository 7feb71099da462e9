"""Study runs in MLflow: one parent run per study in the job's experiment (see :mod:`agent.knowledge.mlflow`)."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge import layout, study_cache
from agent.knowledge.mlflow.connection import MlflowConnection, runs_view_state
from agent.knowledge.mlflow.retry import TAG_RACE_ATTEMPTS, _unique_key_race
from agent.knowledge.mlflow.store_file import T, store_exists
from agent.knowledge.records import StudyRecord

BEST_MARK = "**Best**"  # where a study description's closing line starts (replaced on every finish)


class MlflowStudies(MlflowConnection):
    """Study runs: created, found, listed (through the study cache), updated, tagged; imported evaluations."""

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
        exp_id = self._experiment_for(settings["job_name"], runs_view_state(space))
        tags = layout.study_tags(name, settings, dataset_summary)
        kind = tags.pop("kind")  # tagged last: searches find the study only once it is complete
        run_tags = {T + k: v for k, v in tags.items()}
        run_tags[T + "owner"] = self.owner or _local_user()
        run = self._create_run(exp_id, name, {**run_tags, "mlflow.note.content": description})
        rid = run.info.run_id
        try:
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
        except BaseException:
            self._drop_unfinished(rid)
            raise
        return self._to_study(self._call(self._client.get_run, rid))

    def _drop_unfinished(self, rid: str) -> None:
        """A study run without its files or its kind tag is no study: it goes, nothing is left RUNNING
        (a store that takes no write at all cannot delete it either; searches skip it, untagged)."""
        try:
            self._client.delete_run(rid)
        except Exception:
            pass

    @staticmethod
    def _dataset_input(settings: Mapping[str, Any], summary: Mapping[str, Any]) -> Any:
        """The study's dataset as an MLflow dataset input (the UI's Dataset column): its name, the
        fingerprint as digest, its statistics as the profile."""
        from mlflow.entities import Dataset, DatasetInput, InputTag

        name = str(settings["dataset_name"])
        profile = {k: v for k, v in summary.items() if isinstance(v, (int, float, str, bool))}
        dataset = Dataset(
            name=name[:500],
            digest=str(settings["fingerprint"])[:36],
            source_type="tune-agent",
            source=json.dumps({"dataset": name}),
            profile=json.dumps(profile, default=str)[:4000],
        )
        return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", "training")])

    def find_study(self, name: str) -> StudyRecord | None:
        if not store_exists(self.tracking_uri):
            return None
        if "'" in name and '"' in name:
            return None  # no filter can quote it, and no study is made with such a name (prepare_study)
        quoted = f'"{name}"' if "'" in name else f"'{name}'"  # MLflow's filters take no escaped quote
        flt = f"tags.`{T}kind` = 'study' and tags.`{T}study` = {quoted}"
        runs = list(self._search(flt))
        return self._to_study(runs[-1]) if runs else None

    def list_studies(self) -> list[StudyRecord]:
        """Every study, oldest first. Ended studies come from :mod:`agent.knowledge.study_cache`
        where an experiment's version tag still matches the cache and every study that was running
        when it was saved still runs, and are read again where they changed since; running studies
        are always read fresh."""
        return self._listing(light=False)

    def study_index(self) -> list[StudyRecord]:
        """Every study as a light record (:attr:`StudyRecord.light`), oldest first: kept in a cache
        file of its own, brought up to date as :meth:`list_studies`' is, a tenth of its size, so a
        start chooses among thousands of historical datasets without reading their whole records."""
        return self._listing(light=True)

    def full_study(self, study: StudyRecord) -> StudyRecord:
        if not study.light:
            return study
        return self._to_study(self._call(self._client.get_run, study.study_id))

    def _listing(self, light: bool) -> list[StudyRecord]:
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
        shape = _light_row if light else _same
        ended: list[StudyRecord] = []
        for e in exps:
            version = e.tags.get(study_cache.VERSION_TAG) or self._first_version(e.experiment_id)
            held = self._listed.get((e.experiment_id, version or "", light))
            if version and held is not None and held[0] <= set(running):  # listed by this object already
                ended += held[1]
                continue
            cached = study_cache.load(key, e.experiment_id, e.creation_time, light) if version else None
            if cached is not None and cached["version"] == version and set(cached["running"]) <= set(running):
                rows, mine = cached["ended"], cached["running"]
            else:
                rows, full_at = self._ended_rows(e.experiment_id, cached, running, shape)
                mine = [rid for rid, r in running.items() if r["experiment_id"] == e.experiment_id]
                if version:
                    entry = {"ended": rows, "running": mine, "full_at": full_at}
                    study_cache.save(key, e.experiment_id, e.creation_time, version, entry, light)
            records = [_record(r) for r in rows]
            if version:
                self._listed = {k: v for k, v in self._listed.items() if k[0] != e.experiment_id or k[2] != light}
                self._listed[(e.experiment_id, version, light)] = (set(mine), records)
            ended += records
        # a resumed study: its fresh record wins over the cached one
        fresh = [_record(shape(r)) for r in running.values()]
        out = [r for r in ended if r.study_id not in running] + fresh
        return sorted(out, key=lambda r: (r.start_time, r.study_id))

    def _ended_rows(
        self,
        experiment_id: str,
        cached: dict[str, Any] | None,
        running: Mapping[str, Any],
        shape: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> tuple[list[dict[str, Any]], float]:
        """The ended studies of an experiment whose cache is stale (as ``shape`` keeps them), and
        when they were last read whole: all of them read again, or (:func:`study_cache.changed_since`)
        the cached ones with those changed since and those that ran and run no longer read again."""
        flt = f"tags.`{T}kind` = 'study' and attributes.status != 'RUNNING'"
        since = study_cache.changed_since(cached)
        if cached is None or since is None:
            return [shape(_cache_row(r)) for r in self._search(flt, [experiment_id])], time.time()
        rows = {r["run_id"]: r for r in cached["ended"]}
        rows.update((r.info.run_id, shape(_cache_row(r))) for r in self._changed_runs(experiment_id, since, rows))
        for rid in (rid for rid in cached["running"] if rid not in running and rid not in rows):
            try:  # ended by a writer that logs no change time, or deleted
                run = self._call(self._client.get_run, rid)
            except StoreError:
                continue
            if run.info.lifecycle_stage == "active" and run.info.status != "RUNNING":
                rows[rid] = shape(_cache_row(run))
        return list(rows.values()), float(cached["full_at"])

    def _changed_runs(self, experiment_id: str, since: int, held: Mapping[str, Mapping[str, Any]]) -> list[Any]:
        """The ended study runs changed since ``since`` that ``held`` does not hold as they are now: on
        an embedded store their change times are compared first (a history imported minutes ago is
        all recent, and is not read again), elsewhere every recent one is read."""
        flt = f"tags.`{T}kind` = 'study' and attributes.status != 'RUNNING' and {_changed_after(since)}"
        times = getattr(self._client, "changed_times", None)
        if times is None:
            return list(self._search(flt, [experiment_id]))
        found = self._call(times, [experiment_id], flt, study_cache.CHANGED_METRIC)
        return self._call(
            self._client.runs, [rid for rid, at in found.items() if (held.get(rid) or {}).get("changed") != int(at)]
        )

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
            tags += [
                RunTag(T + "best_value", repr(float(best_value))),
                RunTag(T + "best_config", layout.to_json(best_config)),
            ]
            now = int(time.time() * 1000)
            metrics.append(Metric("best_objective", best_value, now, 0))
            # the final best configuration, sortable in the UI's run list: numbers as metrics, the
            # rest as tags (only when the study ends: a best that later changed would leave stale keys)
            for key, value in (best_config or {}).items() if status == "finished" else ():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
                    metrics.append(Metric(f"best.{key}", float(value), now, 0))
                else:
                    tags.append(RunTag(f"best.{key}", str(value)[: layout.REASON_LIMIT]))
        run_status = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}.get(status)
        if run_status:
            metrics.append(changed_now())
        self._call(self._client.log_batch, study.study_id, metrics=metrics, tags=tags)
        if run_status:
            self._call(self._client.set_terminated, study.study_id, run_status)
        else:
            self._call(self._client.update_run, study.study_id, status="RUNNING")
        run = self._call(self._client.get_run, study.study_id)
        if status == "finished" and best_value is not None:  # the description ends with the best configuration
            note = run.data.tags.get("mlflow.note.content", "").split(BEST_MARK)[0].rstrip()
            best = ", ".join(f"{k}={layout.short(v)}" for k, v in (best_config or {}).items())
            self._call(
                self._client.set_tag,
                study.study_id,
                "mlflow.note.content",
                f"{note}\n\n{BEST_MARK} {study.settings.get('metric', 'objective')} {best_value:.6g}: {best}",
            )
        if run_status:
            self._studies_changed(run.info.experiment_id)
        return self._to_study(run)

    def log_study_artifacts(self, study: StudyRecord, paths: list[str], artifact_path: str) -> None:
        for path in paths:
            self._call(self._client.log_artifact, study.study_id, path, artifact_path)

    def fetch_study_file(self, study: StudyRecord, artifact_file: str, target: Path) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self._call(self._client.download_artifacts, study.study_id, artifact_file, tmp)
            except StoreError:
                return False
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
        return True

    def log_study_figure(self, study: StudyRecord, figure: Any, artifact_file: str) -> None:
        self._call(self._client.log_figure, study.study_id, figure, artifact_file)

    def set_study_tags(self, study: StudyRecord, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        values = layout.split_long({k: layout.tag_value(v) for k, v in tags.items()})
        batch = [RunTag(T + k, v) for k, v in values.items()]
        for i in range(0, len(batch), 100):  # MLflow takes at most 100 tags per batch
            self._call(self._client.log_batch, study.study_id, tags=batch[i : i + 100])
        # A study whose run is running (created, or running its trials: the lease's tags every few
        # seconds) is read fresh by every listing, so its tags leave the cached listing as it is. One
        # that ends meanwhile logs its own change time after these tags.
        if self._call(self._client.get_run, study.study_id).info.status != "RUNNING":
            self._call(self._client.log_batch, study.study_id, metrics=[changed_now()])
            self._studies_changed(self._experiment_of(study))

    def claim_study_value(self, study: StudyRecord, key: str, value: str) -> str:
        """A write-once MLflow param (``tune_agent.claim.<key>``): MLflow refuses to change a param's
        value, so of two writers of different values one is refused, and both read the winner."""
        from mlflow.entities import Param

        name = f"{T}claim.{key}"
        try:
            self._call(self._client.log_batch, study.study_id, params=[Param(name, value)])
        except StoreError as refused:  # the key may hold another value: read which; else the refusal stands
            held = self._call(self._client.get_run, study.study_id).data.params.get(name)
            if held is None:
                raise refused from None
            return str(held)
        return str(self._call(self._client.get_run, study.study_id).data.params.get(name, ""))

    def study_tags(self, study: StudyRecord) -> dict[str, str]:
        """The study's current tune_agent.* tags (fresh from the store)."""
        run = self._call(self._client.get_run, study.study_id)
        return layout.join_long({k[len(T) :]: v for k, v in run.data.tags.items() if k.startswith(T)})

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

    def load_study_space(self, study: StudyRecord) -> list[dict[str, Any]] | None:
        """The study's ``space.json`` (every study run logs one), or None when it cannot be read."""
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self._call(self._client.download_artifacts, study.study_id, "space.json", tmp)
                return list(json.loads(Path(path).read_text())["params"])
            except (StoreError, OSError, ValueError, KeyError, TypeError):
                return None


def _cache_row(run: Any) -> dict[str, Any]:
    """What a study record is made from, as plain data (:mod:`agent.knowledge.study_cache`)."""
    return {
        "run_id": run.info.run_id,
        "experiment_id": run.info.experiment_id,
        "start_time": run.info.start_time or 0,
        "run_name": run.info.run_name,
        "params": dict(run.data.params),
        "tags": {k[len(T) :]: v for k, v in run.data.tags.items() if k.startswith(T)},
        "changed": _changed_time(run),
    }


def _record(row: Mapping[str, Any]) -> StudyRecord:
    if "light" in row:
        return layout.light_study_record(row)
    return layout.study_record(row["run_id"], row["start_time"], row["tags"], row["params"], row["run_name"])


def _same(row: dict[str, Any]) -> dict[str, Any]:
    return row


def _light_row(row: dict[str, Any]) -> dict[str, Any]:
    """A cache row as the study index keeps it (:func:`agent.knowledge.layout.light_row`)."""
    return {
        **layout.light_row(row["tags"], row["params"]),
        **{k: row[k] for k in ("run_id", "experiment_id", "start_time", "run_name", "changed")},
    }


def _changed_time(run: Any) -> int | None:
    value = run.data.metrics.get(study_cache.CHANGED_METRIC)
    return int(value) if value is not None and math.isfinite(value) else None


def _changed_after(since: int) -> str:
    return f"metrics.`{study_cache.CHANGED_METRIC}` >= {int(since)}"


def changed_now() -> Any:
    """The metric that marks a study run's record as changed now (:mod:`agent.knowledge.study_cache`)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return Metric(study_cache.CHANGED_METRIC, float(now), now, 0)


def _local_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return str(os.getuid())
