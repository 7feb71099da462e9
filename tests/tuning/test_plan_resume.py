"""The recorded plan: a study resumes with exactly the surrogate, sources and meta-model it was
planned with, or refuses in one line. Runs on the committed toy YAHPO scenario (two fidelities and a
conditional space), so every trial is a surrogate query, not a training run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

TOY = Path(__file__).resolve().parents[1] / "bench" / "fixtures" / "yahpo_toy"
JOB = f"yahpo:{TOY}"


@pytest.fixture
def history(store, cli, tmp_path: Path):
    """Two source tasks imported with `tune-agent import` (the toy's task t2, and a noisy copy)."""
    from agent.jobs import load_job

    job = load_job(JOB)
    rng = np.random.default_rng(0)
    U = job.space.snap(rng.random((30, job.space.dim)))
    y = np.asarray(job.evaluate_many(U, job.task("t2")))
    rows = [
        {"task": name, **job.space.decode(u), "value": float(v + noise)}
        for name, noise in (("src-a", 0.0), ("src-b", 0.01))
        for u, v in zip(U, y)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "history.csv", index=False)
    (tmp_path / "space.json").write_text(json.dumps({"params": job.space.to_dict()}))
    res = cli(
        "import",
        str(tmp_path / "history.csv"),
        "--space",
        str(tmp_path / "space.json"),
        "--job-name",
        job.name,
        "--metric",
        job.metric,
        "--mode",
        job.mode,
        *store.args,
    )
    assert res.code == 0, res.err
    return job


def _train(job, store, models: Path, steps: int) -> None:
    from agent.pipeline.metamodels import history_sources, tnp_settings, train_tnp

    sources = history_sources(store.kb(), job.name, job.space)
    train_tnp(
        sources, job.name, job.space.signature(), models, tnp_settings({"meta_steps": steps, "hidden": 16, "heads": 2})
    )


def _ask(cli, store, name: str) -> dict:
    res = cli("ask", name, "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    return json.loads(res.out)


def test_resume_rebuilds_the_planned_tnp_and_refuses_a_changed_one(history, store, cli, tmp_path: Path) -> None:
    models = tmp_path / "models"
    _train(history, store, models, steps=3)
    res = cli(
        "create",
        "--job",
        JOB,
        "--dataset",
        "t1",
        "--trials",
        "5",
        "--surrogate",
        "tnp",
        "--warm-start",
        "none",
        "--models-dir",
        str(models),
        "--study-name",
        "planned",
        *store.args,
    )
    assert res.code == 0, res.err
    first = _ask(cli, store, "planned")
    assert first["origin"] == "init:tnp"  # the TNP's learned initial configuration
    assert cli("tell", "planned", "1", "--value", "0.5", "--tracking-uri", store.uri).code == 0
    second = _ask(cli, store, "planned")  # a new process: the sampler comes from the recorded plan
    assert second["origin"] == "bo:logei"
    tags = store.kb().study_tags(store.kb().find_study("planned"))
    plan = json.loads(tags["surrogate_plan"])
    assert plan["surrogate"] == "tnp" and plan["models_dir"] == str(models) and len(plan["source_keys"]) == 2
    assert plan["meta_model"]

    _train(history, store, models, steps=4)  # the network in models/ changes under the study
    res = cli("ask", "planned", "--tracking-uri", store.uri)
    assert res.code == 2
    assert "meta-model" in res.err and "changed" in res.err and len(res.err.strip().splitlines()) == 1


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_random_and_tpe_samplers_run_product_studies(history, store, cli, sampler: str) -> None:
    res = cli(
        "start",
        "--job",
        JOB,
        "--dataset",
        "t1",
        "--trials",
        "4",
        "--sampler",
        sampler,
        "--study-name",
        f"s-{sampler}",
        *store.args,
    )
    assert res.code == 0, res.err
    kb = store.kb()
    trials = kb.trials(kb.find_study(f"s-{sampler}"))
    assert len(trials) == 4 and {t.origin for t in trials} == {sampler}
    assert all(np.isfinite(t.value) for t in trials)
    # conditional parameters are logged only when active
    for t in trials:
        assert ("momentum" in t.config) == (t.config["optimizer"] == "sgd")


def test_benchmark_job_bad_input_is_one_line(cli, store) -> None:
    res = cli("start", "--job", JOB, "--dataset", "nope", "--trials", "2", *store.args)
    assert res.code == 2 and "has no task 'nope'" in res.err
    res = cli("start", "--job", f"{JOB}?target=bogus", "--dataset", "t1", "--trials", "2", *store.args)
    assert res.code == 2 and "no output 'bogus'" in res.err
    res = cli("start", "--job", f"{JOB}?epoch=3", "--dataset", "t1", "--trials", "2", *store.args)
    assert res.code == 2 and "no fidelity parameter 'epoch'" in res.err
    assert not (Path(store.root) / "mlflow.db").exists()


def test_default_study_names_are_short_and_draw_again_on_a_clash() -> None:
    """`<dataset>-<job>-<4 characters>`: a CSV's query marks become dashes, a long dataset name is
    cut, and a name the store already holds is drawn again (the store's lookup is ``taken``)."""
    import re

    from agent.tuning.service import default_study_name

    seen: list[str] = []

    def taken(name: str) -> bool:
        seen.append(name)
        return len(seen) < 3  # the first two draws clash

    name = default_study_name("digits", "cnn", taken)
    assert re.fullmatch(r"digits-cnn-[a-hj-km-np-z2-9]{4}", name) and len(name) <= 20
    assert len(seen) == 3 and name == seen[-1]
    assert default_study_name("/data/mine.csv?label=y", "mlp").startswith("mine.csv-label-y-mlp-")
    long = default_study_name("a_very_long_dataset_name_indeed", "mlp")
    assert long.startswith("a_very_long_data-mlp-") and len(long) == len("a_very_long_data-mlp-") + 4
