"""The best model of a study, registered: ``tune-agent best STUDY --register NAME``.

A study keeps the trained models of its best trials on their runs (:mod:`agent.execution.keep`),
so the best trial's model is registered as it trained, with no training: a new version in MLflow's
model registry, whose source is the trial run's ``model/``, with the study's lineage as tags (study,
dataset and fingerprint, job, best value, the neighbours that seeded it, the surrogate). A trial
that kept no model (``--keep-models 0``, or pushed out of the kept ones) is trained once more with
its seed and split, and that model is logged on its run and registered.

What is registered is an MLflow pyfunc that predicts from raw rows (:mod:`agent.jobs.serving`):
class probabilities come out, one column per class.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from agent.errors import StoreError, StudyError
from agent.execution.trial import quiet_lightning, train_config
from agent.jobs.base import BenchmarkJob
from agent.jobs.serving import RawClassifier, serving_example, serving_model
from agent.knowledge.records import TRIAL_OK, TrialRecord
from agent.knowledge.stores import kept_models
from agent.tuning.study import Study


def register_best(
    study: Study, load: Callable[[], tuple[Any, Any, Any]], name: str, number: int | None = None
) -> dict[str, Any]:
    """Registers the best trial's model (or trial ``number``'s, from 1) as a new version of
    ``name``: the model the trial kept, with no training, or, where it kept none, its
    configuration trained once more (``load()`` gives the job, the dataset and the split; one line
    on stderr says so first). Returns the version's details."""
    best = _chosen(study, number)
    models = kept_models(study.kb)
    if models is None:
        raise StoreError(f"{study.kb.tracking_uri} has no model registry: use an MLflow tracking store")
    tags = study.kb.study_tags(study.record)
    lineage = {
        "tune_agent.study": study.name,
        "tune_agent.trial": str(best.number + 1),
        "tune_agent.job": study.record.job,
        "tune_agent.dataset": study.record.dataset,
        "tune_agent.fingerprint": study.record.fingerprint,
        f"tune_agent.best_{study.settings.metric}": f"{best.value:.6g}",
        "tune_agent.neighbours": tags.get("neighbours", "-"),
        "tune_agent.surrogate": tags.get("surrogate", "-"),
        "tune_agent.config": json.dumps(dict(best.config)),
    }
    out = {"name": name, "trial": best.number + 1, "value": best.value}
    if models.kept_model_uri(best) is not None:
        version = models.register_kept_model(study.record, best, name, lineage | {"tune_agent.source": "kept"})
        return out | {"version": version, "source": "kept", "model_uri": f"models:/{name}/{version}"}
    job, dataset, split = load()
    if isinstance(job, BenchmarkJob):
        raise StudyError(f"study {study.name!r} runs a benchmark job ({job.name}): it has no model to register")
    if getattr(job, "owns_data", False):  # a user's project: its model is kept while its trial trains
        raise StudyError(
            f"trial {best.number + 1} of {study.name!r} kept no model (its run's tune_agent.model tag says why); "
            "register a trial that kept one (--trial N), or run the project with --keep-models"
        )
    took = f"about {best.duration:.0f} s, as its trial took" if best.duration else "as long as its trial took"
    print(f"trial {best.number + 1} kept no model: training it again to register it ({took})", file=sys.stderr)
    import lightning.pytorch  # noqa: F401 - first: its import sets the levels that quiet_lightning lowers

    quiet_lightning()
    kept: list[Any] = []
    outcome = train_config(job, dict(best.config), best.number, study.settings, dataset, split, logger=False, keep=kept)
    if not kept or outcome.value is None:
        raise StudyError(f"retraining trial {best.number + 1} of {study.name!r} failed: {outcome.reason or 'no value'}")
    model = RawClassifier(serving_model(*kept[0]), getattr(dataset, "inputs", None), dataset.class_names)
    example = serving_example(dataset, split[1])
    lineage[f"tune_agent.retrained_{study.settings.metric}"] = f"{outcome.value:.6g}"
    version = models.register_model(study.record, best, model, example, model.predict(example), name, lineage)
    return out | {
        "version": version,
        "source": "retrained",
        "retrained_value": outcome.value,
        "model_uri": f"models:/{name}/{version}",
    }


def _chosen(study: Study, number: int | None) -> TrialRecord:
    """The study's best trial, or its successful trial ``number`` (from 1)."""
    if number is None:
        best = study.best()
    else:
        best = next((t for t in study.trials() if t.number == number - 1 and t.state == TRIAL_OK), None)
    if best is None:
        raise StudyError(f"study {study.name!r} has no successful trial yet: nothing to register")
    return best
