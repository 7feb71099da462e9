"""Trained models kept on their trial runs: ``model/`` (a pyfunc on raw rows) and ``network/``
(the pytorch flavour), dropped when pushed out, and registered as they are (no training)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.knowledge.mlflow.connection import MlflowConnection
from agent.knowledge.mlflow.store_file import T
from agent.knowledge.records import StudyRecord, TrialRecord
from agent.knowledge.stores import KeptModels

MODEL = "model"
NETWORK = "network"


def save_model_files(folder: Path, model: Any, example: Any, predictions: Any, network: Any) -> None:
    """:func:`agent.knowledge.save_model_files`: the pyfunc in ``folder/model``, the network in
    ``folder/network``; a folder left by an earlier try is replaced."""
    import contextlib
    import io
    import shutil

    import mlflow.pytorch
    from mlflow.models import infer_signature

    import mlflow
    from agent.knowledge.mlflow.pyfunc import ServingPyfunc

    for warming in _WARMING:  # its scan done once, not again here beside it
        warming.join()
    for name in (MODEL, NETWORK):
        shutil.rmtree(folder / name, ignore_errors=True)
    # MLflow narrates each save on stderr; the study prints its own line for a kept model
    with contextlib.redirect_stderr(io.StringIO()):
        mlflow.pyfunc.save_model(
            str(folder / MODEL),
            python_model=ServingPyfunc(model),
            signature=infer_signature(example, predictions),
            input_example=example,
            pip_requirements=[],
        )
        # pickled (its classes by reference): any module saves; torch.export ("pt2") does not
        mlflow.pytorch.save_model(network, str(folder / NETWORK), pip_requirements=[], serialization_format="pickle")


def save_torch_model_files(folder: Path, network: Any, example: Any, outputs: Any, extra_files: list[str]) -> None:
    """:func:`agent.knowledge.save_torch_model_files`: the pytorch flavour in ``folder/model``."""
    import contextlib
    import io
    import shutil

    import mlflow.pytorch
    from mlflow.models import infer_signature

    for warming in _WARMING:
        warming.join()
    for name in (MODEL, NETWORK):
        shutil.rmtree(folder / name, ignore_errors=True)
    signature = infer_signature(example, outputs) if example is not None and outputs is not None else None
    with contextlib.redirect_stderr(io.StringIO()):
        mlflow.pytorch.save_model(
            network,
            str(folder / MODEL),
            signature=signature,
            input_example=example if signature is not None else None,
            extra_files=extra_files or None,
            pip_requirements=[],
            serialization_format="pickle",
        )


_WARMING: list[Any] = []  # the warm-up thread, once per process


def warm_model_saving() -> None:
    """:func:`agent.knowledge.warm_model_saving`. The map is MLflow's own cache (a private function
    of its requirements checks): where it is missing, saving works as before, only slower."""
    import threading

    if _WARMING:
        return

    def warm() -> None:
        try:
            import mlflow.pyfunc
            import mlflow.pytorch  # noqa: F401
            from mlflow.utils import requirements_utils

            prepare = getattr(requirements_utils, "_init_packages_to_modules_map", None)
            if callable(prepare):
                prepare()
        except Exception:  # a warm-up only: the save does the work itself
            pass

    thread = threading.Thread(target=warm, name="tune-agent-model-saving", daemon=True)
    _WARMING.append(thread)
    thread.start()


class MlflowKeptModels(MlflowConnection, KeptModels):
    """A study's best trials' models kept on their runs (:class:`agent.knowledge.stores.KeptModels`)."""

    def keep_model_files(self, study: StudyRecord, trial: TrialRecord, folder: Path) -> int:
        size = 0
        for name in (MODEL, NETWORK):
            for path in sorted(p for p in (folder / name).rglob("*") if p.is_file()):
                # file by file: a lost answer costs one file's upload again, not the model's
                where = path.parent.relative_to(folder).as_posix()
                self._call(self._client.log_artifact, trial.trial_id, str(path), where)
                size += path.stat().st_size
        return size

    def drop_model(self, study: StudyRecord, trial: TrialRecord, note: str) -> None:
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        run = self._call(self._client.get_run, trial.trial_id)
        repository = get_artifact_repository(run.info.artifact_uri)
        for folder in (MODEL, NETWORK):
            self._call(repository.delete_artifacts, folder)
        self.set_trial_tags(trial, {"model": note})

    def kept_model_uri(self, trial: TrialRecord) -> str | None:
        run = self._call(self._client.get_run, trial.trial_id)
        if not str(run.data.tags.get(T + "model", "")).startswith("kept"):
            return None
        if not any(f.path == MODEL for f in self._call(self._client.list_artifacts, trial.trial_id)):
            return None
        return f"{run.info.artifact_uri.rstrip('/')}/{MODEL}"

    def register_kept_model(self, study: StudyRecord, trial: TrialRecord, name: str, tags: Mapping[str, str]) -> str:
        from mlflow.exceptions import MlflowException

        source = self.kept_model_uri(trial)
        if source is None:
            from agent.errors import StoreError

            raise StoreError(f"trial {trial.number + 1} of {study.name!r} kept no model")
        try:
            self._call(self._client.create_registered_model, name)
        except Exception as exc:  # already registered: a new version of it
            if not isinstance(exc, MlflowException) and "already exists" not in str(exc):
                raise
        version = self._call(self._client.create_model_version, name, source, run_id=trial.trial_id)
        number = str(version.version)
        for key, value in tags.items():
            self._call(self._client.set_model_version_tag, name, number, key, str(value)[:5000])
        self._call(
            self._client.update_model_version,
            name,
            number,
            description=f"Best model of tune-agent study `{study.name}` (trial {trial.number + 1}): the weights "
            "its trial trained, kept on its run.",
        )
        return number

    def set_trial_tags(self, trial: TrialRecord, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        self._call(
            self._client.log_batch, trial.trial_id, tags=[RunTag(T + str(k), str(v)[:5000]) for k, v in tags.items()]
        )
