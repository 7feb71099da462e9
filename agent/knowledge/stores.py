"""The parts of the store contract beside studies and trials (:mod:`agent.knowledge.base`), each a
small abstract class, as MLflow splits its own stores:

- :class:`MetaModelStore`: the runs that train meta-models and the published versions of them
  (every store: the MLflow one and the in-memory one);
- :class:`KeptModels`: the trained models of a study's best trials, kept as artifacts of their
  runs, and the model registry (stores that keep artifacts: MLflow's). :func:`kept_models` gives a
  store's, or None.

``tests/knowledge/test_contract.py`` runs the contract over the backends that implement each part.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.knowledge.records import MetaModelsRecord, StudyRecord, TrialRecord


class MetaModelStore(abc.ABC):
    """Meta-model training runs and the published versions of a job's meta-models."""

    @abc.abstractmethod
    def start_model_run(self, kind: str, params: Mapping[str, Any], description: str) -> tuple[str, Any]:
        """A run for training a meta-model ``kind`` and a Lightning ``Logger`` writing to it.
        Model runs are not studies: ``list_studies`` never returns them."""

    @abc.abstractmethod
    def finish_model_run(self, run_id: str, metrics: Mapping[str, float], artifacts: list[str]) -> None:
        """Logs the finite ``metrics``, keeps a copy of each file in ``artifacts`` (as
        ``model/<file name>``) and ends the run. A path that is not a readable file raises
        :class:`agent.errors.StoreError` before anything is logged."""

    @abc.abstractmethod
    def current_meta_models(self, scope: str) -> MetaModelsRecord | None:
        """The newest published version of ``scope``'s meta-models with its files listed, or None."""

    @abc.abstractmethod
    def publish_meta_models(
        self, scope: str, engine: str, revision: str, files: Mapping[str, Path]
    ) -> MetaModelsRecord:
        """A new version of ``scope``'s meta-models holding ``files`` (artifact name -> local
        file); it becomes :meth:`current_meta_models`. :class:`StoreError` where the user may not
        write (a READ user on a team server)."""

    @abc.abstractmethod
    def add_meta_model_file(self, record: MetaModelsRecord, name: str, path: Path) -> None:
        """Adds ``path`` to version ``record`` as artifact ``name`` (a new name: never replaces)."""

    @abc.abstractmethod
    def fetch_meta_model_file(self, record: MetaModelsRecord, name: str, target: Path) -> None:
        """Copies artifact ``name`` of version ``record`` to the file ``target``."""


class KeptModels(abc.ABC):
    """The trained weights of a study's best trials (:mod:`agent.execution.keep`) and the model
    registry they are registered in."""

    @abc.abstractmethod
    def keep_model_files(self, study: StudyRecord, trial: TrialRecord, folder: Path) -> int:
        """Keeps the model files :func:`agent.knowledge.save_model_files` wrote in ``folder`` on
        ``trial``'s run (``model/``, ``network/``) without reopening it; returns their bytes."""

    @abc.abstractmethod
    def drop_model(self, study: StudyRecord, trial: TrialRecord, note: str) -> None:
        """Deletes what :meth:`keep_model_files` kept on ``trial``'s run; its ``model`` tag becomes ``note``."""

    @abc.abstractmethod
    def set_trial_tags(self, trial: TrialRecord, tags: Mapping[str, Any]) -> None:
        """Sets ``tune_agent.<key>`` tags on ``trial``'s run (what it kept, and why)."""

    @abc.abstractmethod
    def kept_model_uri(self, trial: TrialRecord) -> str | None:
        """Where ``trial``'s kept pyfunc lies (an artifact URI), None when it kept none."""

    @abc.abstractmethod
    def register_kept_model(self, study: StudyRecord, trial: TrialRecord, name: str, tags: Mapping[str, str]) -> str:
        """Registers ``trial``'s kept model as a new version of ``name`` tagged ``tags``, with no
        training and no change to the run; returns the version."""

    @abc.abstractmethod
    def register_model(
        self,
        study: StudyRecord,
        trial: TrialRecord,
        model: Any,
        example: Any,
        predictions: Any,
        name: str,
        tags: Mapping[str, str],
    ) -> str:
        """Logs ``model`` (any object with ``predict(rows)``, as an MLflow pyfunc with a signature
        from ``example`` -> ``predictions``) on ``trial``'s run and registers it as a new version of
        ``name`` tagged ``tags``; returns the version."""


def kept_models(store: Any) -> KeptModels | None:
    """``store`` as the keeper of its best trials' models, or None when it keeps none."""
    return store if isinstance(store, KeptModels) else None
