"""The best model of a study, registered: ``tune-agent best STUDY --register NAME``.

Trials keep no weights (a study of hundreds of trials would keep hundreds of models nobody asked
for); the best configuration is trained once more, with the seed and split of the trial that found
it, and logged in ``mlflow.pytorch``'s format with a signature and an input example on that trial's
run, then registered in MLflow's model registry with the study's lineage as tags (study, dataset and
fingerprint, job, best value, the neighbours that seeded it, the surrogate).

What is registered is an MLflow pyfunc that predicts from raw rows: :class:`RawClassifier` encodes
them as loading encoded the dataset (:mod:`agent.data.inputs`), and :class:`ServingModel` applies
the standardisation the data module applied and the trained network; class probabilities come out,
one column per class.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from agent.errors import StudyError
from agent.execution.trial import quiet_lightning, train_config
from agent.tuning.study import Study


class ServingModel(nn.Module):
    """Rows of the dataset's ``X`` in, class probabilities out: ``softmax(net((x - mean) / std))``,
    each row first shaped as the job's data module held it (``in_shape``: the mlp flattens images)."""

    mean: torch.Tensor  # buffers, registered in __init__
    std: torch.Tensor

    def __init__(
        self, net: nn.Module, mean: np.ndarray | None, std: np.ndarray | None, in_shape: tuple[int, ...] | None = None
    ) -> None:
        super().__init__()
        self.net = net
        self.in_shape = tuple(in_shape) if in_shape is not None else None
        shape = (1,)
        self.register_buffer(
            "mean", torch.as_tensor(mean if mean is not None else np.zeros(shape), dtype=torch.float32)
        )
        self.register_buffer("std", torch.as_tensor(std if std is not None else np.ones(shape), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_shape is not None:
            x = x.reshape(x.shape[0], *self.in_shape)
        return torch.softmax(self.net((x.float() - self.mean) / self.std), dim=-1)


def _serving(module: Any, datamodule: Any) -> ServingModel:
    mean = std = None
    if getattr(datamodule, "standardise", False):
        X_train = np.asarray(datamodule.X[datamodule.train_idx], dtype=np.float32)
        mean = X_train.mean(axis=0, keepdims=True)
        std = np.where(X_train.std(axis=0, keepdims=True) < 1e-8, 1.0, X_train.std(axis=0, keepdims=True))
    module.eval()
    return ServingModel(module, mean, std, tuple(int(d) for d in np.shape(datamodule.X)[1:])).eval()


class RawClassifier:
    """What is registered: rows as the dataset came (a table's columns, flat pixel values: see
    :class:`agent.data.inputs.RawInputs`) in, class probabilities out, one column per class name.
    A dataset with no raw-input record (an image folder, an .npz) takes rows shaped as its ``X``."""

    def __init__(self, model: ServingModel, inputs: Any, class_names: Sequence[str]) -> None:
        self.model, self.inputs, self.class_names = model.eval(), inputs, [str(c) for c in class_names]

    def predict(self, rows: Any) -> Any:
        import pandas as pd

        X = self.inputs.to_features(rows) if self.inputs is not None else np.asarray(rows, dtype=np.float32)
        with torch.no_grad():
            probabilities = self.model(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))).numpy()
        return pd.DataFrame(probabilities.astype(np.float64), columns=self.class_names)


def register_best(
    study: Study, job: Any, dataset: Any, split: Any, name: str, number: int | None = None
) -> dict[str, Any]:
    """Retrains the best configuration (or trial ``number``'s, from 1), logs and registers it;
    returns the version's details."""
    from agent.jobs.base import BenchmarkJob

    if isinstance(job, BenchmarkJob):
        raise StudyError(f"study {study.name!r} runs a benchmark job ({job.name}): it has no model to register")
    if number is None:
        best = study.best()
    else:
        best = next((t for t in study.trials() if t.number == number - 1 and t.state == "ok"), None)
    if best is None:
        raise StudyError(f"study {study.name!r} has no successful trial yet: nothing to register")
    import lightning.pytorch  # noqa: F401 - first: its import sets the levels that quiet_lightning lowers

    quiet_lightning()
    kept: list[Any] = []
    outcome = train_config(job, dict(best.config), best.number, study.settings, dataset, split, logger=False, keep=kept)
    if not kept or outcome.value is None:
        raise StudyError(f"retraining trial {best.number + 1} of {study.name!r} failed: {outcome.reason or 'no value'}")
    inputs = getattr(dataset, "inputs", None)
    model = RawClassifier(_serving(*kept[0]), inputs, dataset.class_names)
    example = (
        inputs.example if inputs is not None else np.asarray(dataset.X[np.asarray(split[1])[:5]], dtype=np.float32)
    )
    predictions = model.predict(example)
    tags = study.kb.study_tags(study.record)
    lineage = {
        "tune_agent.study": study.name,
        "tune_agent.trial": str(best.number + 1),
        "tune_agent.job": study.record.job,
        "tune_agent.dataset": study.record.dataset,
        "tune_agent.fingerprint": study.record.fingerprint,
        f"tune_agent.best_{study.settings.metric}": f"{best.value:.6g}",
        f"tune_agent.retrained_{study.settings.metric}": f"{outcome.value:.6g}",
        "tune_agent.neighbours": tags.get("neighbours", "-"),
        "tune_agent.surrogate": tags.get("surrogate", "-"),
        "tune_agent.config": json.dumps(dict(best.config)),
    }
    version = study.kb.register_model(study.record, best, model, example, predictions, name, lineage)
    return {
        "name": name,
        "version": version,
        "trial": best.number + 1,
        "value": best.value,
        "retrained_value": outcome.value,
        "model_uri": f"models:/{name}/{version}",
    }
