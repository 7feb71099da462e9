"""One engine: the benchmark evaluates exactly the configurations a `tune-agent start` study logs.

For a fixed seed and task, method M's run in the transfer benchmark (in-memory knowledge base) and
a `tune-agent start --job yahpo:lcbench --surrogate M` study on a sqlite MLflow store holding the
same history (imported with `tune-agent import`) must try the same configurations in the same
order, for M in gp, rgpe and tnp. Also: the benchmark's report on a tiny protocol.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent.jobs.yahpo import yahpo_root

FOLDER = yahpo_root() / "lcbench"
pytestmark = pytest.mark.skipif(
    not (FOLDER / "model.onnx").is_file(), reason=f"the shared YAHPO lcbench scenario is not at {FOLDER}"
)
TASK, SEED, BUDGET = "3945", 2, 7
N_SOURCES = 8  # of LCBench's 34 tasks: enough for the transfer surrogates, a third of the fitting time
TINY_TNP = {"meta_steps": 5, "hidden": 16, "heads": 2, "fine_tune_steps": 2}


@pytest.fixture(scope="module")
def protocol(tmp_path_factory):
    from agent.bench.transfer import BenchConfig, fold_of, make_histories, tnp_fold_dir
    from agent.jobs import load_job

    cache = tmp_path_factory.mktemp("cache")
    config = BenchConfig(scenario=str(FOLDER), history_size=12, budget=BUDGET, cache_dir=str(cache))
    job = load_job(config.job_spec)
    histories = make_histories(job, config)
    fold = tnp_fold_dir(job, histories, fold_of(job.scenario.instances.index(TASK)), config, TINY_TNP)
    return config, job, histories, fold


@pytest.fixture(scope="module")
def product_store(protocol, tmp_path_factory):
    """A sqlite MLflow store holding the same history, imported once with `tune-agent import`."""
    from agent.cli import main

    _, job, histories, _ = protocol
    root = tmp_path_factory.mktemp("store")
    sources = [t for t in job.scenario.instances if t != TASK][:N_SOURCES]
    rows = [{"task": t, **job.space.decode(u), "value": float(v)} for t in sources for u, v in zip(*histories[t])]
    pd.DataFrame(rows).to_csv(root / "history.csv", index=False)
    (root / "space.json").write_text(json.dumps({"params": job.space.to_dict()}))
    args = ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifact-root", str(root / "art")]
    with pytest.raises(SystemExit) as done:
        main(
            [
                "import",
                str(root / "history.csv"),
                "--space",
                str(root / "space.json"),
                "--job-name",
                job.name,
                "--metric",
                job.metric,
                "--mode",
                job.mode,
                *args,
            ]
        )
        raise SystemExit(0)
    assert done.value.code == 0
    return args


@pytest.mark.parametrize("method", ["gp", "rgpe", "tnp"])
def test_benchmark_run_equals_a_product_study(protocol, product_store, method: str, cli, tmp_path: Path) -> None:
    from agent.bench.transfer import history_store, run_method
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

    config, job, histories, fold = protocol
    sources = [t for t in job.scenario.instances if t != TASK][:N_SOURCES]
    models = str(fold) if method == "tnp" else str(tmp_path / "models")
    bench_configs, _, _ = run_method(
        config.job_spec, TASK, method, history_store(job, histories, sources), SEED, BUDGET, models
    )

    res = cli(
        "start",
        "--job",
        config.job_spec,
        "--dataset",
        TASK,
        "--trials",
        str(BUDGET),
        "--seed",
        str(SEED),
        "--warm-start",
        "none",
        "--surrogate",
        method,
        "--models-dir",
        models,
        "--study-name",
        f"product-{method}",
        *product_store,
    )
    assert res.code == 0, res.err
    kb = MlflowKnowledgeBase(product_store[1], product_store[3])
    record = kb.find_study(f"product-{method}")
    trials = sorted(kb.trials(record), key=lambda t: t.number)
    assert kb.study_tags(record)["surrogate"] == method
    assert len(trials) == BUDGET
    product_configs = [dict(t.config) for t in trials]
    for a, b in zip(bench_configs, product_configs):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-9), (method, k, a, b)


def test_tiny_benchmark_writes_a_report_named_after_the_scenario(tmp_path: Path, monkeypatch) -> None:
    from agent.bench.run import run_transfer_benchmark

    # no transfer method: their source fits (33 LCBench tasks) took 29 of this test's 37 s, and the
    # benchmark's transfer runs are covered by test_benchmark_run_equals_a_product_study
    report = run_transfer_benchmark(
        ["random", "tpe", "gp"],
        tmp_path,
        folder=str(FOLDER),
        tasks=1,
        seeds=1,
        budget=6,
        workers=1,
        cache_dir=str(tmp_path / "cache"),
    )
    metrics = json.loads((tmp_path / "metrics" / "lcbench.json").read_text())
    assert metrics["methods"].keys() == {"random", "tpe", "gp"} == report["methods"].keys()
    for entry in metrics["methods"].values():
        assert set(entry) == {"regret@1", "regret@3", "regret@5", "rank@5"}
        assert 0.0 <= entry["regret@5"] <= entry["regret@1"] <= 1.0
    rows = (tmp_path / "plots" / "lcbench_regret.csv").read_text().splitlines()
    assert rows[0] == "trial,random,tpe,gp" and len(rows) == 7
    # a second call reuses every finished run from the journal
    again = run_transfer_benchmark(
        ["gp"], tmp_path, folder=str(FOLDER), tasks=1, seeds=1, budget=6, workers=1, cache_dir=str(tmp_path / "cache")
    )
    assert again["runs_from_journal"] == {"gp": 1}
    assert np.isclose(again["methods"]["gp"]["regret@5"], metrics["methods"]["gp"]["regret@5"])
    # other engine code: the journalled run is not reused (a stale journal once fed a whole table)
    from agent.bench import fingerprint

    monkeypatch.setattr(fingerprint, "engine_fingerprint", lambda module: "changed-code")
    changed = run_transfer_benchmark(
        ["gp"], tmp_path, folder=str(FOLDER), tasks=1, seeds=1, budget=6, workers=1, cache_dir=str(tmp_path / "cache")
    )
    assert changed["runs_from_journal"] == {"gp": 0}


def test_unknown_method_is_one_line_and_exit_2(cli) -> None:
    res = cli("bench", "lcbench", "--methods", "foo", "--tasks", "1", "--seeds", "1")
    assert res.code == 2
    assert "unknown method 'foo'" in res.err and "Traceback" not in res.err
    bad = cli("bench", "lcbench", "--methods", "random", "--tasks", "1", "--seeds", "1", "--tag", "../x")
    assert bad.code == 2 and "--tag takes letters" in bad.err and "Traceback" not in bad.err


def test_a_tagged_side_run_writes_its_own_files(cli, tmp_path: Path) -> None:
    res = cli(
        "bench",
        "lcbench",
        "--methods",
        "random",
        "--tasks",
        "1",
        "--seeds",
        "1",
        "--budget",
        "3",
        "--workers",
        "1",
        "--tag",
        "side",
        "--out",
        str(tmp_path),
    )
    assert res.code == 0, res.err
    metrics = json.loads((tmp_path / "metrics" / "lcbench_side.json").read_text())
    assert metrics["tag"] == "side" and set(metrics["methods"]) == {"random"} and len(metrics["engine"]) == 16
    import torch

    # what else the figures depend on: the numerical libraries and the CPU
    assert metrics["environment"]["torch"] == torch.__version__.split("+")[0] and "botorch" in metrics["environment"]
    assert (tmp_path / "plots" / "side" / "lcbench_regret.csv").is_file()
    assert not (tmp_path / "metrics" / "lcbench.json").exists()  # the main table is left alone


def test_a_run_without_interleaved_random_steps_is_a_side_run_of_its_own(cli, tmp_path: Path) -> None:
    """--random-every reaches every BO study of the run, its journal key and its file's name."""
    from dataclasses import replace

    from agent.bench.transfer import BenchConfig
    from agent.bench.transfer_run import protocol_key

    args = ["bench", "lcbench", "--methods", "gp", "--tasks", "1", "--seeds", "1", "--budget", "3", "--workers", "1"]
    res = cli(*args, "--random-every", "0", "--out", str(tmp_path))
    assert res.code == 0, res.err
    metrics = json.loads((tmp_path / "metrics" / "lcbench_random_every0.json").read_text())
    assert metrics["random_every"] == 0 and set(metrics["methods"]) == {"gp"}
    config = BenchConfig(scenario=str(FOLDER))
    assert protocol_key(replace(config, random_every=0), "gp") != protocol_key(config, "gp")


def test_versus_sequential_pairs_runs_and_bounds_the_difference() -> None:
    from agent.bench.run import versus_sequential

    rng = np.random.default_rng(0)
    sequential = rng.random((40, 3))
    batched = sequential + 0.05 + rng.normal(0, 0.01, (40, 3))  # worse by .05 on every run
    config = {"report_at": [1, 3]}
    out = versus_sequential(
        {"regret": {"gp": batched.tolist()}, "config": config}, {"regret": {"gp": sequential.tolist()}}
    )
    row = out["gp"]["@3"]
    assert row["sequential"] == round(float(sequential[:, 2].mean()), 4)
    assert 0.045 < row["batched_minus_sequential"] < 0.055
    low, high = row["ci95"]
    assert 0.04 < low < row["batched_minus_sequential"] < high < 0.06
    assert row["wilcoxon_p"] < 1e-6
    # identical runs: no difference, p 1, an interval of zero width
    same = versus_sequential(
        {"regret": {"gp": sequential.tolist()}, "config": config}, {"regret": {"gp": sequential.tolist()}}
    )["gp"]["@1"]
    assert same["batched_minus_sequential"] == 0.0 and same["wilcoxon_p"] == 1.0 and same["ci95"] == [0.0, 0.0]
