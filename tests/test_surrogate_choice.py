"""`tune-agent start --surrogate gp|rgpe|tnp|auto`: 3-trial studies of a real Lightning job on iris.

The history the transfer surrogates read is imported with `tune-agent import` into the temp sqlite
store under the job's name and search space (two source tasks whose validation loss is a smooth
function of the learning rate, plus one whose losses are noise); the target studies then train the
real `agent.jobs.examples:logistic` job. The study run must record the surrogate actually used.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent.jobs.examples import LogisticJob

JOB = "agent.jobs.examples:logistic"


def _rows(task: str, rng: np.random.Generator, n: int, noise_only: bool = False) -> list[dict]:
    rows = []
    for _ in range(n):
        lr = float(10 ** rng.uniform(-4, 0))
        opt = "sgd" if rng.random() < 0.5 else "adam"
        loss = 0.4 * (np.log10(lr) + 1.5) ** 2 + 0.2 + 0.01 * rng.standard_normal()
        rows.append(
            {
                "task": task,
                "lr": lr,
                "weight_decay": float(10 ** rng.uniform(-6, -2)),
                "optimizer": opt,
                "momentum": float(rng.uniform(0, 0.99)) if opt == "sgd" else np.nan,
                "value": float(rng.random()) if noise_only else float(loss),
            }
        )
    return rows


@pytest.fixture
def history(store, cli, tmp_path: Path):
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"params": LogisticJob().space.to_dict()}))
    rng = np.random.default_rng(0)
    rows = _rows("src-a", rng, 24) + _rows("src-b", rng, 24) + _rows("src-noise", rng, 24, noise_only=True)
    pd.DataFrame(rows).to_csv(tmp_path / "history.csv", index=False)
    res = cli(
        "import",
        str(tmp_path / "history.csv"),
        "--space",
        str(space),
        "--job-name",
        "logistic",
        "--metric",
        "val_loss",
        "--mode",
        "min",
        *store.args,
    )
    assert res.code == 0, res.err
    return store


def _study(cli, store, name: str, surrogate: str, models_dir: Path) -> tuple[dict, list]:
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        JOB,
        "--trials",
        "3",
        "--n-init",
        "1",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--surrogate",
        surrogate,
        "--models-dir",
        str(models_dir),
        "--study-name",
        name,
        *store.args,
    )
    assert res.code == 0, res.err
    kb = store.kb()
    record = kb.find_study(name)
    trials = kb.trials(record)
    return kb.study_tags(record), trials


def _tags(tags: dict, key: str) -> str:
    return tags.get(f"tune_agent.{key}", tags.get(key, ""))


def test_each_surrogate_runs_a_study_and_is_recorded(history, cli, tmp_path) -> None:
    models = tmp_path / "models"  # no TNP here
    for requested, used in (("gp", "gp"), ("rgpe", "rgpe"), ("auto", "rgpe")):
        tags, trials = _study(cli, history, f"iris-{requested}", requested, models)
        assert _tags(tags, "surrogate") == used, (requested, tags)
        assert len(trials) == 3 and all(np.isfinite(t.value) for t in trials)
    # the noise-only source is measured and left out; the two structured ones are kept
    tags, _ = _study(cli, history, "iris-rgpe-2", "rgpe", models)
    note = _tags(tags, "surrogate_note")
    assert "1 without a predictable response surface left out" in note, note


def test_tnp_surrogate_with_a_meta_trained_model(history, cli, tmp_path) -> None:
    from agent.knowledge.history import load_history
    from agent.surrogates.source_fits import source_tasks
    from agent.surrogates.specs import TNP_FILE, TNP_META
    from agent.surrogates.tnp import TNPConfig
    from agent.surrogates.tnp_train import meta_train_tnp

    space = LogisticJob().space
    sources = source_tasks(load_history(history.kb(), job="logistic", with_samples=False), space)
    tnp, _ = meta_train_tnp(
        [(s.U, s.y) for s in sources], TNPConfig(hidden=16, heads=2, meta_steps=5, fine_tune_steps=2)
    )
    models = tmp_path / "models"
    models.mkdir()
    tnp.save(str(models / TNP_FILE))
    (models / TNP_META).write_text(json.dumps({"job": "logistic", "space_signature": space.signature()}))
    tags, trials = _study(cli, history, "iris-tnp", "tnp", models)
    assert _tags(tags, "surrogate") == "tnp"
    assert len(trials) == 3 and all(np.isfinite(t.value) for t in trials)
    # the same negative-transfer guard as RGPE's: the noise-only source is not attended to
    assert "1 without a predictable response surface left out" in _tags(tags, "surrogate_note")


def test_tnp_over_noise_only_history_runs_as_gp(tmp_path) -> None:
    from agent.surrogates import registry
    from agent.surrogates.contract import SurrogateInputs
    from agent.surrogates.source_fits import SourceTask

    rng = np.random.default_rng(3)
    noise = tuple(SourceTask(f"k{i}", f"noise-{i}", rng.random((30, 4)), rng.standard_normal(30)) for i in range(3))
    inputs = SurrogateInputs(_space4(), noise, tmp_path / "no-model-needed")
    surrogate = registry.prepare(registry.Resolution("tnp"), inputs)
    assert surrogate.name == "gp"
    assert "none of the 3 source tasks has a predictable response surface" in surrogate.note


def test_tnp_without_a_model_falls_back_to_rgpe(history, cli, tmp_path) -> None:
    tags, _ = _study(cli, history, "iris-tnp-missing", "tnp", tmp_path / "nothing")
    assert _tags(tags, "surrogate") == "rgpe"
    assert "tnp was asked for but none is meta-trained" in _tags(tags, "surrogate_note")


def test_gp_prior_mean_from_observation_neighbours_when_history_has_no_samples(history, cli, tmp_path) -> None:
    """Imported history has no dataset samples, so meta-features cannot pick neighbours: the GP's
    prior mean then comes from the sources nearest to the study's own observations."""
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        JOB,
        "--trials",
        "3",
        "--n-init",
        "2",
        "--epochs",
        "1",
        "--surrogate",
        "gp",
        "--models-dir",
        str(tmp_path / "models"),
        "--study-name",
        "iris-obs",
        *history.args,
    )
    assert res.code == 0, res.err
    kb = history.kb()
    record = kb.find_study("iris-obs")
    warm = json.loads(_tags(kb.study_tags(record), "warm_start"))
    assert warm["prior_mean"] == "observations"
    trials = kb.trials(record)
    assert len(trials) == 3 and all(np.isfinite(t.value) for t in trials)


def test_auto_picks_the_tnp_once_history_and_meta_training_cover_enough_tasks(tmp_path) -> None:
    from agent.surrogates import registry
    from agent.surrogates.contract import SurrogateInputs
    from agent.surrogates.source_fits import SourceTask
    from agent.surrogates.specs import TNP_FILE, TNP_META

    rng = np.random.default_rng(0)
    many = tuple(
        SourceTask(f"k{i}", f"t{i}", rng.random((50, 4)), rng.standard_normal(50))
        for i in range(registry.TNP_MIN_SOURCES)
    )
    models = tmp_path / "models"
    models.mkdir()
    (models / TNP_FILE).write_bytes(b"")  # resolve reads only the meta file
    space = _space4()
    for trained_on, sources, expected in (
        (registry.TNP_MIN_SOURCES, many, "tnp"),
        (5, many, "rgpe"),
        (registry.TNP_MIN_SOURCES, many[:5], "rgpe"),
    ):
        (models / TNP_META).write_text(
            json.dumps({"job": "x", "space_signature": space.signature(), "sources": trained_on})
        )
        resolution = registry.resolve("auto", SurrogateInputs(space, sources, models))
        assert resolution.name == expected, (trained_on, len(sources), resolution)
        if expected == "rgpe":
            assert f"the TNP waits for {registry.TNP_MIN_SOURCES} source tasks" in resolution.why
    # a TNP meta-trained for another search space is never used
    (models / TNP_META).write_text(json.dumps({"job": "x", "space_signature": "other", "sources": 99}))
    assert registry.resolve("auto", SurrogateInputs(space, many, models)).name == "rgpe"


def _space4():
    from agent.space import Float, SearchSpace

    return SearchSpace([Float(f"x{i}", 0.0, 1.0) for i in range(4)])
