"""Evaluations made elsewhere as finished MLflow studies (``tune-agent import``, ``bootstrap starter``)."""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge import layout
from agent.knowledge.imports import best_imported
from agent.knowledge.mlflow.connection import runs_view_state
from agent.knowledge.mlflow.store_file import INLINE_TRIALS, T
from agent.knowledge.mlflow.studies import BEST_MARK, MlflowStudies, _local_user, changed_now
from agent.knowledge.records import IMPORT_ORIGIN, TRIAL_OK, StudyRecord, TrialRecord

# Inside ``many_imports`` the listing version of an experiment changes once per VERSION_EVERY studies.
VERSION_EVERY = 50


class MlflowImports(MlflowStudies):
    """Imported studies: each one run whose trials are rows of one artifact."""

    _written: dict[str, int] | None = None  # inside many_imports: studies written per experiment
    _exp_ids: dict[str, str] | None = None  # inside many_imports: experiment ids by job and runs view

    @property
    def import_threads(self) -> int:  # type: ignore[override]  # a property: by the store's kind
        """sqlite: 2 (one prepares while the other commits; 1.5x one on 2 cores); a server: 4."""
        return 4 if self._remote else 2

    @contextlib.contextmanager
    def many_imports(self) -> Iterator[None]:
        """The listing version (:mod:`agent.knowledge.study_cache`) of every study experiment changes
        as the batch begins, so a listing read inside it (the studies a resumed import skips) is
        fresh; then once per :data:`VERSION_EVERY` studies an experiment gets, and at the end. A
        batch inside a batch is part of it."""
        if self._written is not None:
            yield
            return
        for e in self._tune_experiments():
            try:
                self._studies_changed(e.experiment_id)
            except StoreError:
                pass  # a user who may not tag the experiment: its listing is not cached either
        self._written, self._exp_ids = {}, {}
        try:
            yield
        finally:
            written, self._written, self._exp_ids = self._written, None, None
            for exp_id in written:
                self._studies_changed(exp_id)

    def _imported(self, exp_id: str) -> None:
        """A study was imported into ``exp_id``: its listing version changes now or with the batch."""
        if self._written is None:
            self._studies_changed(exp_id)
            return
        self._written[exp_id] = self._written.get(exp_id, 0) + 1
        if self._written[exp_id] % VERSION_EVERY == 0:
            self._studies_changed(exp_id)

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
        """One finished study holding evaluations made elsewhere: four MLflow calls on the store, one upload.

        The rows are one ``trials.json`` artifact of the study run (one MLflow run per row would make
        a 64-row study cost seconds), marked by the tag ``tune_agent.trials_inline``; :meth:`trials`
        reads them back as the same records, and the MLflow UI shows them in the run's artifacts.
        The run is made with every tag but its kind, gets its files (one upload), its dataset input
        and its end, and becomes a study last, in the one batch that also logs its params and best
        metrics: killed at any moment, the store holds the whole study or none (a run without its
        kind tag is no study).
        """
        from mlflow.entities import Param, RunTag

        self._check_artifact_root()
        summary = dataset_summary or {"source": settings["dataset_name"], "kind": "external"}
        exp_id = self._import_experiment(settings["job_name"], space)
        run_tags = layout.study_tags(name, settings, summary)
        kind = run_tags.pop("kind")
        run_tags.update({k: layout.tag_value(v) for k, v in (tags or {}).items()})
        run_tags.update(status="finished", trials_inline="1", owner=self.owner or _local_user())
        prefixed, metrics, note = _best_parts(settings, configs, values, run_tags, description)
        now = int(time.time() * 1000)
        run = self._create_run(exp_id, name, {**prefixed, "mlflow.note.content": note})
        rid = run.info.run_id
        try:
            with tempfile.TemporaryDirectory() as tmp:
                self._import_files(Path(tmp), space, summary, configs, values, dataset_sample)
                self._upload(run, tmp)
            self._call(self._client.log_inputs, rid, [self._dataset_input(settings, summary)])
            self._call(self._client.set_terminated, rid, "FINISHED")
            params = [Param(k, v) for k, v in layout.study_params(settings, summary).items()]
            self._call(
                self._client.log_batch,
                rid,
                metrics=[*metrics, changed_now()],
                params=params,
                tags=[RunTag(T + "kind", kind)],
            )
        except BaseException:
            self._drop_unfinished(rid)
            raise
        self._imported(exp_id)
        return layout.study_record(
            rid, run.info.start_time or now, {k[len(T) :]: v for k, v in prefixed.items() if k.startswith(T)}, {}, name
        )

    def _upload(self, run: Any, folder: str) -> None:
        """``folder``'s files into ``run``'s artifacts: straight into a local artifact folder (the
        client would read the run back first to find it, a sixth call a study), else through MLflow."""
        uri = run.info.artifact_uri or ""
        if uri.startswith("file:") or uri.startswith("/"):
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

            self._call(get_artifact_repository(uri).log_artifacts, folder)
            return
        self._call(self._client.log_artifacts, run.info.run_id, folder)

    def _import_experiment(self, job: str, space: list[dict[str, Any]]) -> str:
        """The id of ``job``'s experiment for ``space``, looked up once per batch."""
        view = runs_view_state(space)
        key = f"{job}/{layout.to_json(view)}"
        if self._exp_ids is None:
            return self._experiment_for(job, view)
        if key not in self._exp_ids:
            self._exp_ids[key] = self._experiment_for(job, view)
        return self._exp_ids[key]

    @staticmethod
    def _import_files(
        folder: Path,
        space: list[dict[str, Any]],
        summary: Mapping[str, Any],
        configs: list[Mapping[str, Any]],
        values: list[float | None],
        sample: tuple[Any, Any] | None,
    ) -> None:
        """An imported study's files, as :meth:`create_study` and the trials' rows lay them out."""
        import numpy as np

        rows = []
        for number, (config, value) in enumerate(zip(configs, values)):
            number_value = None if value is None else float(value)
            finite = number_value is not None and math.isfinite(number_value)
            rows.append({"number": number, "config": dict(config), "value": number_value if finite else None})
        (folder / "dataset").mkdir()
        (folder / "dataset" / "summary.json").write_text(json.dumps(dict(summary), indent=2, default=str))
        (folder / "space.json").write_text(json.dumps({"params": space}, indent=2, default=str))
        (folder / INLINE_TRIALS).write_text(json.dumps({"trials": rows}, indent=2, default=str))
        if sample is not None:
            np.savez_compressed(folder / "dataset" / "sample.npz", X=sample[0], y=sample[1])

    def _inline_trials(self, study_id: str) -> list[TrialRecord]:
        with tempfile.TemporaryDirectory() as tmp:
            path = self._call(self._client.download_artifacts, study_id, INLINE_TRIALS, tmp)
            rows = json.loads(Path(path).read_text())["trials"]
        return [
            TrialRecord(f"{study_id}:{r['number']}", int(r["number"]), TRIAL_OK, r["config"], r["value"], IMPORT_ORIGIN)
            for r in rows
        ]


def _best_parts(
    settings: Mapping[str, Any],
    configs: list[Mapping[str, Any]],
    values: list[float | None],
    run_tags: dict[str, str],
    description: str,
) -> tuple[dict[str, str], list[Any], str]:
    """An imported study's prefixed tags (``run_tags`` and its best), its best metrics and its
    description ending with its best, as a study that ran here ends with them."""
    from mlflow.entities import Metric

    best_value, best_config = best_imported(settings, configs, values)
    note = description
    if best_value is not None:
        run_tags.update(best_value=repr(float(best_value)), best_config=layout.to_json(best_config))
        best = ", ".join(f"{k}={layout.short(v)}" for k, v in (best_config or {}).items())
        note += f"\n\n{BEST_MARK} {settings.get('metric', 'objective')} {best_value:.6g}: {best}"
    prefixed = {T + k: v for k, v in layout.split_long(run_tags).items()}
    now = int(time.time() * 1000)
    metrics = [] if best_value is None else [Metric("best_objective", float(best_value), now, 0)]
    for key, value in (best_config or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            metrics.append(Metric(f"best.{key}", float(value), now, 0))
        else:
            prefixed[f"best.{key}"] = str(value)[: layout.REASON_LIMIT]
    return prefixed, metrics, note
