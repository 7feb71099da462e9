"""The LCBench leave-one-task-out harness and its baselines, on a tiny real run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.bench.lcbench import BenchConfig, make_histories, normalised_regret, run_benchmark, write_report
from agent.bench.methods import TpeSearch, greedy_portfolio, make_methods
from agent.bench.yahpo import YahpoScenario

FOLDER = Path("/work/shared/benchmarks/yahpo/lcbench")
pytestmark = pytest.mark.skipif(not FOLDER.is_dir(), reason="shared YAHPO lcbench files are not here")


@pytest.fixture(scope="module")
def scenario() -> YahpoScenario:
    return YahpoScenario.load(FOLDER)


def test_tiny_run_writes_the_report(scenario: YahpoScenario, tmp_path: Path) -> None:
    config = BenchConfig(tasks=scenario.instances[:2], seeds=1, budget=6, history_size=20,
                         report_at=(1, 3, 5, 10), workers=1, reference_size=1000)
    result = run_benchmark(scenario, make_methods(["random", "gp", "portfolio_gp"]), config)
    write_report(result, tmp_path / "metrics" / "lcbench.json", tmp_path / "plots")
    metrics = json.loads((tmp_path / "metrics" / "lcbench.json").read_text())
    assert set(metrics) == {"tasks", "seeds", "methods", "suggest_seconds", "wall_seconds", "runs_from_journal"}
    assert metrics["tasks"] == 2 and metrics["seeds"] == 1
    assert set(metrics["methods"]) == {"random", "gp", "portfolio_gp"}
    for entry in metrics["methods"].values():
        assert set(entry) == {"regret@1", "regret@3", "regret@5", "rank@5"}  # 10 > budget: left out
        assert 1.0 <= entry["rank@5"] <= 3.0
    for curves in result["regret"].values():
        curves = np.asarray(curves)
        assert curves.shape == (2, 6)
        assert ((curves >= 0) & (curves <= 1)).all()
        assert (np.diff(curves, axis=1) <= 1e-12).all()
    rows = (tmp_path / "plots" / "lcbench_regret.csv").read_text().splitlines()
    assert rows[0] == "trial,random,gp,portfolio_gp" and len(rows) == 1 + 6
    assert (tmp_path / "plots" / "lcbench_regret.png").stat().st_size > 0


def test_histories_are_fixed_and_differ_between_tasks(scenario: YahpoScenario) -> None:
    a, b = make_histories(scenario, 10, seed=0), make_histories(scenario, 10, seed=0)
    assert len(a) == 34
    np.testing.assert_array_equal(a["3945"][0], b["3945"][0])
    assert not np.allclose(a["3945"][0], a["7593"][0])
    U, y = a["3945"]
    np.testing.assert_array_equal(U, scenario.space.snap(U))
    assert y.shape == (10,)


def test_tpe_suggests_valid_configurations(scenario: YahpoScenario) -> None:
    tpe = TpeSearch(scenario.space)
    tpe.start(0, [], seed=3)
    U, y = np.empty((0, 7)), np.empty(0)
    for _ in range(13):  # past TPE's 10 startup trials
        u = tpe.suggest(U, y)
        scenario.space.validate(scenario.space.decode(u))
        np.testing.assert_allclose(u, scenario.space.snap(u)[0])
        U, y = np.vstack([U, u]), np.append(y, scenario.evaluate("3945", u[None]))
    # Observations it did not propose are added as trials.
    extra = scenario.space.snap(np.full((1, 7), 0.3))
    u = tpe.suggest(np.vstack([U, extra]), np.append(y, 50.0))
    assert u.shape == (7,) and len(tpe._study.trials) == 15


def test_regret_and_portfolio_helpers() -> None:
    np.testing.assert_allclose(normalised_regret(np.array([10.0, 30.0, 20.0, 60.0]), 0.0, 50.0),
                               [0.8, 0.4, 0.4, 0.0])
    regrets = np.array([[0.0, 1.0, 0.4], [1.0, 0.0, 0.4]])
    assert greedy_portfolio(regrets, 2) == [2, 0]


def test_journal_resumes_an_interrupted_run(scenario: YahpoScenario, tmp_path: Path) -> None:
    """Finished (method, task, seed) runs are journalled; the next call reuses them, runs only
    what is missing, and gives the same curves."""
    journal = tmp_path / "runs.jsonl"
    config = BenchConfig(tasks=scenario.instances[:2], seeds=1, budget=4, history_size=10, workers=1, reference_size=500)
    first = run_benchmark(scenario, make_methods(["random"]), config, journal=journal)
    assert len(journal.read_text().splitlines()) == 2 and first["runs_from_journal"] == {"random": 0}
    with journal.open("a") as fh:
        fh.write('{"key": "cut sh')  # an interruption mid-line is skipped
    lines = []
    second = run_benchmark(scenario, make_methods(["random", "tpe"]), config, journal=journal, progress=lines.append)
    assert second["regret"]["random"] == first["regret"]["random"]
    assert second["runs_from_journal"] == {"random": 2, "tpe": 0}
    assert len(second["regret"]["tpe"]) == 2
    assert any("[2/2]" in line and "tpe" in line and "random" not in line.split(":")[-1] for line in lines)
    third = run_benchmark(scenario, make_methods(["random", "tpe"]), config, journal=journal)
    assert third["runs_from_journal"] == {"random": 2, "tpe": 2} and third["regret"] == second["regret"]
