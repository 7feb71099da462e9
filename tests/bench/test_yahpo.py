"""The YAHPO Gym ONNX reader on the real lcbench surrogate (Pfisterer et al. 2022; Zimmer et al. 2021)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from agent.bench.yahpo import YahpoScenario
from agent.errors import TuneAgentError
from agent.space import Float, Int

FOLDER = Path("/work/shared/benchmarks/yahpo/lcbench")
pytestmark = pytest.mark.skipif(not FOLDER.is_dir(), reason="shared YAHPO lcbench files are not here")

GOOD = dict(batch_size=64, learning_rate=1e-2, momentum=0.9, weight_decay=1e-4, num_layers=2,
            max_units=256, max_dropout=0.1)
BAD = dict(batch_size=512, learning_rate=1e-4, momentum=0.1, weight_decay=1e-4, num_layers=2,
           max_units=256, max_dropout=1.0)


@pytest.fixture(scope="module")
def scenario() -> YahpoScenario:
    return YahpoScenario.load(FOLDER)


def test_instances_fidelity_targets_and_space(scenario: YahpoScenario) -> None:
    assert len(scenario.instances) == 34 and "3945" in scenario.instances
    assert scenario.fidelity == "epoch" and scenario.fidelity_max == 52
    assert scenario.targets[:2] == ["time", "val_accuracy"] and len(scenario.targets) == 6
    space = scenario.space
    assert space.dim == 7
    logs = {p.name: p.log for p in space.params}
    assert logs == {"batch_size": True, "learning_rate": True, "momentum": False, "weight_decay": False,
                    "num_layers": False, "max_units": True, "max_dropout": False}
    assert isinstance(space["batch_size"], Int) and isinstance(space["learning_rate"], Float)
    # x_cont order is LCBench's (the README's), not config_space.json's alphabetical order.
    assert scenario.cont_names[:3] == ["epoch", "batch_size", "learning_rate"]


def test_batched_evaluation_shapes_range_and_determinism(scenario: YahpoScenario) -> None:
    U = scenario.space.snap(np.random.default_rng(0).random((16, 7)))
    for task in ("3945", "7593"):
        a = scenario.evaluate(task, U)
        assert a.shape == (16,)
        assert ((a >= 0) & (a <= 100)).all()
        np.testing.assert_array_equal(a, scenario.evaluate(task, U))
        dicts = [scenario.space.decode(u) for u in U]
        np.testing.assert_allclose(scenario.evaluate(task, dicts), a)
    assert scenario.evaluate("3945", np.empty((0, 7))).shape == (0,)


@pytest.mark.parametrize("task", ["3945", "167149"])
def test_sensible_config_beats_terrible_one(scenario: YahpoScenario, task: str) -> None:
    good, bad = scenario.evaluate(task, [GOOD, BAD])
    assert good > bad + 20


def test_pinned_outputs(scenario: YahpoScenario) -> None:
    # Values computed once with this reader (they match the yahpo-gym package per the shared README).
    assert scenario.evaluate("3945", [GOOD])[0] == pytest.approx(90.75412, abs=1e-4)
    assert scenario.evaluate("7593", [GOOD], fidelity_value=10)[0] == pytest.approx(67.97118, abs=1e-4)
    assert scenario.evaluate("167149", [GOOD], target="time")[0] == pytest.approx(41.00734, abs=1e-4)
    assert scenario.evaluate("34539", np.full((1, 7), 0.5))[0] == pytest.approx(88.34830, abs=1e-4)


def test_bad_inputs_are_user_errors(scenario: YahpoScenario, tmp_path: Path) -> None:
    with pytest.raises(TuneAgentError):
        YahpoScenario.load(tmp_path / "nope")
    broken = tmp_path / "lcbench"
    shutil.copytree(FOLDER, broken, ignore=shutil.ignore_patterns("model.onnx"))
    with pytest.raises(TuneAgentError, match="missing"):
        YahpoScenario.load(broken)
    (broken / "model.onnx").write_bytes(b"not an onnx model")
    with pytest.raises(TuneAgentError, match="cannot load"):
        YahpoScenario.load(broken)
    (broken / "encoding.json").write_text("{broken")
    with pytest.raises(TuneAgentError, match="unreadable"):
        YahpoScenario.load(broken)
    with pytest.raises(TuneAgentError):
        scenario.evaluate("no-such-task", [GOOD])
    with pytest.raises(TuneAgentError):
        scenario.evaluate("3945", [GOOD], target="accuracy")


def test_conditions_and_categoricals_of_config_space(tmp_path: Path) -> None:
    import json

    folder = tmp_path / "lcbench"
    shutil.copytree(FOLDER, folder)
    raw = json.loads((folder / "config_space.json").read_text())
    raw["hyperparameters"].append({"name": "optimizer", "type": "categorical", "choices": ["sgd", "adam"]})
    raw["conditions"] = [{"child": "momentum", "parent": "optimizer", "type": "EQ", "value": "sgd"}]
    (folder / "config_space.json").write_text(json.dumps(raw))
    space = YahpoScenario.load(folder).space
    assert space.names[0] == "optimizer" and space.dim == 8
    assert space["momentum"].condition is not None and space["momentum"].condition.values == ("sgd",)
    raw["conditions"] = [{"child": "momentum", "parent": "optimizer", "type": "GT", "value": 1}]
    (folder / "config_space.json").write_text(json.dumps(raw))
    with pytest.raises(TuneAgentError, match="condition"):
        YahpoScenario.load(folder)
