"""`tune-agent-bench lcbench --scenario DIR --target ...` on a scenario with two fidelity parameters
and a conditional space: the committed toy YAHPO scenario (tests/bench/fixtures/yahpo_toy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOY = Path(__file__).resolve().parent / "fixtures" / "yahpo_toy"


@pytest.mark.slow  # a benchmark run: `pytest -m slow` (keeps the default run under 10 minutes)
def test_benchmark_runs_on_a_conditional_two_fidelity_scenario(cli, tmp_path: Path) -> None:
    res = cli(
        "bench",
        "lcbench",
        "--scenario",
        str(TOY),
        "--target",
        "cost",
        "--minimize",
        "--fidelity",
        "repl=5",
        "--tasks",
        "2",
        "--seeds",
        "1",
        "--budget",
        "9",
        "--workers",
        "1",
        "--methods",
        "random,tpe,gp,rgpe,hts",
        "--out",
        str(tmp_path),
    )
    assert res.code == 0, res.err
    metrics = json.loads((tmp_path / "metrics" / "yahpo_toy.json").read_text())
    assert metrics["tasks"] == 2 and metrics["job"] == "yahpo-yahpo_toy-cost-repl5"
    assert set(metrics["methods"]) == {"random", "tpe", "gp", "rgpe", "hts"}
    assert (tmp_path / "plots" / "yahpo_toy_regret.png").stat().st_size > 0


def test_bad_scenario_target_and_fidelity_are_one_line(cli, tmp_path: Path) -> None:
    import shutil

    bare = tmp_path / "unknown_scenario"  # the toy's files without its descriptor: refused, not guessed
    bare.mkdir()
    for name in ("config_space.json", "encoding.json", "model.onnx"):
        shutil.copy(TOY / name, bare / name)
    for args, message in (
        (["--scenario", str(tmp_path / "missing")], "not found"),
        (["--scenario", str(bare)], "descriptor"),
        (["--scenario", str(TOY), "--target", "nope"], "no output 'nope'"),
        (["--scenario", str(TOY), "--fidelity", "epoch=3"], "no fidelity parameter 'epoch'"),
        (["--scenario", str(TOY), "--fidelity", "repl"], "NAME=NUMBER"),
    ):
        res = cli("bench", "lcbench", *args, "--tasks", "1", "--seeds", "1", "--out", str(tmp_path / "out"))
        assert res.code == 2, (args, res.err)
        assert message in res.err and "Traceback" not in res.err, (args, res.err)


@pytest.mark.slow  # a benchmark command's run: with the benchmarks, out of the default suite
def test_scale_bench_reports_what_each_study_ran_as(cli, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    res = cli(
        "bench",
        "scale",
        "--scenario",
        str(TOY),
        "--task",
        "t1",
        "--sizes",
        "10,20",
        "--methods",
        "gp,rgpe",
        "--budget",
        "7",
        "--out",
        str(out),
    )
    assert res.code == 0, res.err
    runs = json.loads(out.read_text())["runs"]
    # The toy space is conditional, so every GP uses the arc kernel: with 10 history points its
    # source GPs fail the guard's R² check and rgpe runs as gp, and says so; with 20 they pass.
    assert [(r["method"], r["ran_as"], r["history_points"]) for r in runs] == [
        ("gp", "gp", 10),
        ("rgpe", "gp", 10),
        ("gp", "gp", 20),
        ("rgpe", "rgpe", 20),
    ]
    assert all(r["median_ask_s"] > 0 for r in runs)


def test_history_and_sources_options_shape_each_runs_history(cli, tmp_path: Path) -> None:
    from agent.bench.transfer import BenchConfig, run_sources

    tasks = [f"t{i}" for i in range(10)]
    few = run_sources(tasks, "t3", BenchConfig(scenario="x", sources=4))
    assert len(few) == 4 and "t3" not in few and few == sorted(few, key=tasks.index)
    assert few == run_sources(tasks, "t3", BenchConfig(scenario="x", sources=4))  # the same for every method and seed
    assert run_sources(tasks, "t3", BenchConfig(scenario="x")) == [t for t in tasks if t != "t3"]
    res = cli(
        "bench",
        "lcbench",
        "--scenario",
        str(TOY),
        "--target",
        "cost",
        "--minimize",
        "--fidelity",
        "repl=5",
        "--tasks",
        "2",
        "--seeds",
        "1",
        "--budget",
        "4",
        "--workers",
        "1",
        "--methods",
        "gp,rgpe",
        "--history",
        "20",
        "--sources",
        "1",
        "--out",
        str(tmp_path),
    )
    assert res.code == 0, res.err
    metrics = json.loads((tmp_path / "metrics" / "yahpo_toy_history20_sources1.json").read_text())
    assert metrics["history_size"] == 20 and metrics["sources"] == 1 and set(metrics["methods"]) == {"gp", "rgpe"}
    assert not (tmp_path / "metrics" / "yahpo_toy.json").exists()  # the main table is left alone
    bad = cli("bench", "lcbench", "--scenario", str(TOY), "--sources", "0", "--out", str(tmp_path))
    assert bad.code == 2 and "--sources" in bad.err
