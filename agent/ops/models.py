"""The best model of a study, registered: ``tune-agent best STUDY --register NAME``.

Trials keep no weights (a study of hundreds of trials would keep hundreds of models nobody asked
for); the best configuration is trained once more, with the seed and split of the trial that found
it, and logged in ``mlflow.pytorch``'s format with a signature and an input example on that trial's
run, then registered in MLflow's model registry with the study's lineage as tags (study, dataset and
fingerprint, job, best value, the neighbours that seeded it, the surrogate).

What is registered predicts from raw inputs: :class:`ServingModel` wraps the trained network with
the standardisation its data module applied and returns class probabilities.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from torch import nn

from agent.errors import StudyError
from agent.execution.trial import quiet_lightning, train_config
from agent.tuning.study import Study


class ServingModel(nn.Module):
    """Raw features in, class probabilities out: ``softmax(net((x - mean) / std))``."""

    def __init__(self, net: nn.Module, mean: np.ndarray | None, std: np.ndarray | None) -> None:
        super().__init__()
        self.net = net
        shape = (1,)
        self.register_buffer("mean", torch.as_tensor(mean if mean is not None else np.zeros(shape), dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std if std is not None else np.ones(shape), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net((x.float() - self.mean) / self.std), dim=-1)


def _serving(module: Any, datamodule: Any) -> ServingModel:
    mean = std = None
    if getattr(datamodule, "standardise", False):
        X_train = np.asarray(datamodule.X[datamodule.train_idx], dtype=np.float32)
        mean = X_train.mean(axis=0, keepdims=True)
        std = np.where(X_train.std(axis=0, keepdims=True) < 1e-8, 1.0, X_train.std(axis=0, keepdims=True))
    module.eval()
    return ServingModel(module, mean, std).eval()


def register_best(study: Study, job: Any, dataset: Any, split: Any, name: str) -> dict[str, Any]:
    """Retrains the best configuration, logs and registers it; returns the version's details."""
    from agent.jobs.base import BenchmarkJob

    if isinstance(job, BenchmarkJob):
        raise StudyError(f"study {study.name!r} runs a benchmark job ({job.name}): it has no model to register")
    best = study.best()
    if best is None:
        raise StudyError(f"study {study.name!r} has no successful trial yet: nothing to register")
    quiet_lightning()
    kept: list[Any] = []
    outcome = train_config(job, dict(best.config), best.number, study.settings, dataset, split, logger=False, keep=kept)
    if not kept or outcome.value is None:
        raise StudyError(f"retraining trial {best.number + 1} of {study.name!r} failed: {outcome.reason or 'no value'}")
    model = _serving(*kept[0])
    example = np.asarray(dataset.X[np.asarray(split[1])[:5]], dtype=np.float32)
    with torch.no_grad():
        predictions = model(torch.from_numpy(example)).numpy()
    tags = study.kb.study_tags(study.record)
    lineage = {
        "tune_agent.study": study.name, "tune_agent.trial": str(best.number + 1), "tune_agent.job": study.record.job,
        "tune_agent.dataset": study.record.dataset, "tune_agent.fingerprint": study.record.fingerprint,
        f"tune_agent.best_{study.settings.metric}": f"{best.value:.6g}",
        f"tune_agent.retrained_{study.settings.metric}": f"{outcome.value:.6g}",
        "tune_agent.neighbours": tags.get("neighbours", "-"), "tune_agent.surrogate": tags.get("surrogate", "-"),
        "tune_agent.config": json.dumps(dict(best.config)),
    }
    version = study.kb.register_model(study.record, best, model, example, predictions, name, lineage)
    return {"name": name, "version": version, "trial": best.number + 1, "value": best.value,
            "retrained_value": outcome.value, "model_uri": f"models:/{name}/{version}"}
