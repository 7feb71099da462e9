"""The YAHPO Gym ONNX reader: a tiny fixture scenario (two fidelities, a conditional space, a linear
ONNX model one can compute by hand) and the real lcbench surrogate (Pfisterer et al. 2022; Zimmer et
al. 2021) where the shared files are present."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agent.data.yahpo import BUILTIN, ScenarioDescriptor, YahpoScenario
from agent.errors import TuneAgentError
from agent.space import Float, Int

HERE = Path(__file__).resolve().parent
TOY = HERE / "fixtures" / "yahpo_toy"
LCBENCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "benchmarks" / "yahpo" / "lcbench"
needs_lcbench = pytest.mark.skipif(not LCBENCH.is_dir(), reason=f"shared YAHPO lcbench files are not at {LCBENCH}")

SGD = dict(optimizer="sgd", nesterov="no", lr=0.01, momentum=0.9, dampening=0.5, layers=3)
ADAM = dict(optimizer="adam", lr=0.1, layers=1)


def toy_by_hand(config: dict, task: str, trainsize: float = 1.0, repl: int = 10) -> tuple[float, float]:
    """The fixture's linear model (see fixtures/make_yahpo_toy.py), inactive inputs as YAHPO feeds them:
    0 for numerics, the '#na#' embedding row for categoricals."""
    get = config.get
    score = (
        10 * get("lr", 0)
        + 2 * get("momentum", 0)
        - 3 * get("dampening", 0)
        + 1 * get("layers", 0)
        + 3 * trainsize
        + 0.1 * repl
    )
    cost = -1 * get("lr", 0) + 0.5 * get("layers", 0) + 4 * trainsize + 0.01 * repl
    score += {"t1": 100, "t2": 200}[task] + {"adam": 5, "sgd": 7}[config["optimizer"]]
    cost += {"t1": 1, "t2": 2}[task] + {"adam": 0.5, "sgd": 0.25}[config["optimizer"]]
    score += {None: 0.5, "no": 1, "yes": 2}[get("nesterov")]
    cost += {None: 0, "no": 0, "yes": 0.125}[get("nesterov")]
    return score, cost


def copy_toy(tmp_path: Path, name: str = "yahpo_toy", descriptor: dict | None = None, keep: bool = True) -> Path:
    folder = tmp_path / name
    shutil.copytree(TOY, folder, ignore=None if keep else shutil.ignore_patterns("descriptor.json"))
    if descriptor is not None:
        (folder / "descriptor.json").write_text(json.dumps(descriptor))
    return folder


@pytest.fixture(scope="module")
def toy() -> YahpoScenario:
    return YahpoScenario.load(TOY)


# -- the fixture scenario -------------------------------------------------------------------------------


def test_toy_loads_with_both_fidelities_out_of_the_space(toy: YahpoScenario) -> None:
    assert toy.fidelities == {"trainsize": 1.0, "repl": 10}
    assert toy.fidelity == "trainsize" and toy.fidelity_max == 1.0
    assert toy.instances == ["t1", "t2"] and toy.instance_name == "task_id"
    assert toy.targets == ["score", "cost"] and toy.default_target == "score" and toy.maximize
    assert toy.is_maximized("score") and not toy.is_maximized("cost")
    assert toy.descriptor == ScenarioDescriptor.from_json(TOY / "descriptor.json")
    names = toy.space.names
    assert not {"trainsize", "repl", "task_id"} & set(names)
    assert sorted(names) == ["dampening", "layers", "lr", "momentum", "nesterov", "optimizer"]
    # Parents come first; the AND condition of dampening reduces to its nesterov conjunct.
    assert names.index("optimizer") < names.index("nesterov") < names.index("dampening")
    assert toy.space["momentum"].condition.parent == "optimizer"
    assert toy.space["dampening"].condition.parent == "nesterov"
    assert toy.space["dampening"].condition.values == ("no",)
    assert isinstance(toy.space["layers"], Int) and toy.space["lr"].log


def test_toy_evaluation_matches_hand_computation(toy: YahpoScenario) -> None:
    out = toy.predict("t2", [SGD, ADAM])
    np.testing.assert_allclose(out, [toy_by_hand(SGD, "t2"), toy_by_hand(ADAM, "t2")], rtol=1e-6)
    assert toy_by_hand(SGD, "t2") == pytest.approx((215.4, 7.84))
    np.testing.assert_allclose(toy.evaluate("t1", [ADAM]), [toy_by_hand(ADAM, "t1")[0]], rtol=1e-6)
    np.testing.assert_allclose(toy.evaluate("t1", [ADAM], target="cost"), [toy_by_hand(ADAM, "t1")[1]], rtol=1e-6)
    # Fidelities: overridden for the call, for one configuration, or through the primary-fidelity shorthand.
    low = toy_by_hand(ADAM, "t1", trainsize=0.5, repl=2)
    np.testing.assert_allclose(toy.predict("t1", [ADAM], fidelity={"trainsize": 0.5, "repl": 2})[0], low, rtol=1e-6)
    np.testing.assert_allclose(toy.predict("t1", [{**ADAM, "trainsize": 0.5, "repl": 2}])[0], low, rtol=1e-6)
    np.testing.assert_allclose(toy.predict("t1", [{**ADAM, "trainsize": 0.5}], fidelity={"repl": 2})[0], low, rtol=1e-6)
    assert toy.evaluate("t1", [ADAM], fidelity_value=0.5)[0] == pytest.approx(toy_by_hand(ADAM, "t1", 0.5)[0], rel=1e-6)
    # Points of the unit cube decode to the same configurations.
    U = toy.space.snap(np.random.default_rng(0).random((32, toy.space.dim)))
    dicts = [toy.space.decode(u) for u in U]
    assert {d["optimizer"] for d in dicts} == {"sgd", "adam"}
    np.testing.assert_allclose(toy.evaluate("t2", U), [toy_by_hand(d, "t2")[0] for d in dicts], rtol=1e-5)
    assert toy.evaluate("t2", np.empty((0, toy.space.dim))).shape == (0,)


def test_inactive_inputs_are_fed_as_yahpo_feeds_them(toy: YahpoScenario) -> None:
    x_cont, x_cat = toy.features("t1", [ADAM, SGD])
    cont = dict(zip(toy.cont_names, x_cont[0]))
    assert cont["momentum"] == 0 and cont["dampening"] == 0 and cont["trainsize"] == 1 and cont["repl"] == 10
    assert x_cat[0].tolist() == [1, 1, 0]  # t1, adam, nesterov inactive -> '#na#' code 0
    assert x_cat[1].tolist() == [1, 2, 1]  # encoding.json codes, not the order of the choices
    assert x_cont.dtype == np.float32 and x_cat.dtype == np.int32


def test_bad_configurations_and_fidelities_are_user_errors(toy: YahpoScenario) -> None:
    for bad in (
        {**ADAM, "momentum": 0.5},
        {k: v for k, v in SGD.items() if k != "lr"},
        {**ADAM, "task_id": "t1"},
        {**ADAM, "lr": 5.0},
    ):
        with pytest.raises(TuneAgentError):
            toy.evaluate("t1", [bad])
    with pytest.raises(TuneAgentError, match="not a fidelity"):
        toy.evaluate("t1", [ADAM], fidelity={"epoch": 3})
    with pytest.raises(TuneAgentError, match="outside"):
        toy.evaluate("t1", [ADAM], fidelity={"repl": 11})
    with pytest.raises(TuneAgentError, match="unknown instance"):
        toy.evaluate("t3", [ADAM])
    with pytest.raises(TuneAgentError, match="unknown target"):
        toy.evaluate("t1", [ADAM], target="accuracy")


def test_folder_without_descriptor_is_refused_in_one_line(tmp_path: Path) -> None:
    folder = copy_toy(tmp_path, "my_scenario", keep=False)
    with pytest.raises(TuneAgentError) as err:
        YahpoScenario.load(folder)
    message = str(err.value)
    assert "\n" not in message and "descriptor.json" in message and "my_scenario" in message
    # The same folder loads with the descriptor passed in, by keyword or positionally.
    d = ScenarioDescriptor.from_json(TOY / "descriptor.json")
    assert YahpoScenario.load(folder, descriptor=d).fidelities == {"trainsize": 1.0, "repl": 10}
    assert YahpoScenario.load(folder, d).space.dim == 6
    assert YahpoScenario.load(folder, descriptor=d.to_dict()).targets == ["score", "cost"]


@pytest.mark.parametrize(
    "change, match",
    [
        ({"cont_names": ["lr", "momentum", "layers", "trainsize", "repl"]}, "neither"),  # dampening left out
        (
            {"cont_names": ["lr", "momentum", "dampening", "layers", "trainsize", "repl", "extra"]},
            "not in config_space",
        ),
        (
            {
                "cont_names": ["lr", "momentum", "dampening", "layers", "trainsize", "repl", "nesterov"],
                "cat_names": ["task_id", "optimizer"],
            },
            "categorical",
        ),
        (
            {
                "cont_names": ["lr", "momentum", "dampening", "trainsize", "repl"],
                "cat_names": ["task_id", "optimizer", "nesterov", "layers"],
            },
            "no codes",
        ),
        ({"targets": ["score", "cost", "memory"]}, "columns"),  # the ONNX output has two
        ({"fidelities": {"trainsize": 1.0, "repl": 11}}, "outside"),
        ({"fidelities": {"trainsize": 1.0, "epoch": 5}}, "not model columns"),
        ({"instance_name": "optimizer", "cat_names": ["optimizer", "nesterov"]}, "task_id"),
        ({"default_target": "accuracy"}, "default_target"),
        ({"shuffle": True}, "unknown keys"),
    ],
)
def test_descriptor_not_matching_the_files_is_refused(tmp_path: Path, change: dict, match: str) -> None:
    raw = {**json.loads((TOY / "descriptor.json").read_text()), **change}
    with pytest.raises(TuneAgentError, match=match):
        YahpoScenario.load(copy_toy(tmp_path, descriptor=raw))


def test_encoding_and_condition_problems_are_refused(tmp_path: Path) -> None:
    folder = copy_toy(tmp_path)
    encoding = json.loads((TOY / "encoding.json").read_text())
    del encoding["nesterov"]["#na#"]
    (folder / "encoding.json").write_text(json.dumps(encoding))
    with pytest.raises(TuneAgentError, match="#na#"):
        YahpoScenario.load(folder)
    shutil.copy(TOY / "encoding.json", folder / "encoding.json")
    space = json.loads((TOY / "config_space.json").read_text())
    for bad in (
        {"child": "momentum", "parent": "layers", "type": "GT", "value": 1},
        {
            "child": "momentum",
            "type": "AND",
            "conditions": [  # neither conjunct implies the other
                {"child": "momentum", "parent": "optimizer", "type": "EQ", "value": "sgd"},
                {"child": "momentum", "parent": "task_id", "type": "EQ", "value": "t1"},
            ],
        },
    ):
        (folder / "config_space.json").write_text(json.dumps({**space, "conditions": [bad]}))
        with pytest.raises(TuneAgentError, match="condition"):
            YahpoScenario.load(folder)


def test_descriptors_round_trip_and_builtins_are_consistent() -> None:
    assert {"lcbench", "nb301", "rbv2_super", "rbv2_xgboost", "iaml_super", "iaml_glmnet"} <= set(BUILTIN)
    for name, d in BUILTIN.items():
        assert d.name == name
        assert ScenarioDescriptor.from_mapping(json.loads(json.dumps(d.to_dict()))) == d
        assert d.default_target in d.targets and d.primary_fidelity is not None
    rbv2 = BUILTIN["rbv2_svm"]
    assert dict(rbv2.fidelities) == {"trainsize": 1.0, "repl": 10} and rbv2.cont_names[-2:] == ("trainsize", "repl")
    assert BUILTIN["nb301"].instance_name is None and BUILTIN["nb301"].instances == ("CIFAR10",)
    with pytest.raises(TuneAgentError, match="lacks"):
        ScenarioDescriptor.from_mapping({"cont_names": ["a"]})


def test_fixture_regenerates_identically(tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the onnx package (dev extra) regenerates the fixture")
    spec = importlib.util.spec_from_file_location("make_yahpo_toy", HERE / "fixtures" / "make_yahpo_toy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.write(tmp_path / "yahpo_toy")
    for name in ("config_space.json", "encoding.json", "descriptor.json"):
        assert (fresh / name).read_text() == (TOY / name).read_text()
    U = np.random.default_rng(1).random((16, 6))
    np.testing.assert_array_equal(YahpoScenario.load(fresh).predict("t1", U), YahpoScenario.load(TOY).predict("t1", U))


# -- the real lcbench surrogate ---------------------------------------------------------------------------

GOOD = dict(
    batch_size=64, learning_rate=1e-2, momentum=0.9, weight_decay=1e-4, num_layers=2, max_units=256, max_dropout=0.1
)
BAD = dict(
    batch_size=512, learning_rate=1e-4, momentum=0.1, weight_decay=1e-4, num_layers=2, max_units=256, max_dropout=1.0
)


@pytest.fixture(scope="module")
def scenario() -> YahpoScenario:
    if not LCBENCH.is_dir():
        pytest.skip(f"shared YAHPO lcbench files are not at {LCBENCH}")
    return YahpoScenario.load(LCBENCH)


@needs_lcbench
def test_instances_fidelity_targets_and_space(scenario: YahpoScenario) -> None:
    assert len(scenario.instances) == 34 and "3945" in scenario.instances
    assert scenario.fidelity == "epoch" and scenario.fidelity_max == 52 and scenario.fidelities == {"epoch": 52}
    assert scenario.targets[:2] == ["time", "val_accuracy"] and len(scenario.targets) == 6
    assert scenario.default_target == "val_accuracy" and scenario.maximize
    assert scenario.descriptor is BUILTIN["lcbench"]
    space = scenario.space
    assert space.dim == 7
    logs = {p.name: p.log for p in space.params}
    assert logs == {
        "batch_size": True,
        "learning_rate": True,
        "momentum": False,
        "weight_decay": False,
        "num_layers": False,
        "max_units": True,
        "max_dropout": False,
    }
    assert isinstance(space["batch_size"], Int) and isinstance(space["learning_rate"], Float)
    # x_cont order is LCBench's (YAHPO's config), not config_space.json's alphabetical order.
    assert scenario.cont_names[:3] == ["epoch", "batch_size", "learning_rate"]


@needs_lcbench
def test_batched_evaluation_shapes_range_and_determinism(scenario: YahpoScenario) -> None:
    U = scenario.space.snap(np.random.default_rng(0).random((16, 7)))
    for task in ("3945", "7593"):
        a = scenario.evaluate(task, U)
        assert a.shape == (16,)
        assert ((a >= 0) & (a <= 100)).all()
        np.testing.assert_array_equal(a, scenario.evaluate(task, U))
        dicts = [scenario.space.decode(u) for u in U]
        np.testing.assert_allclose(scenario.evaluate(task, dicts), a)
        assert scenario.predict(task, U).shape == (16, 6)
    assert scenario.evaluate("3945", np.empty((0, 7))).shape == (0,)


@needs_lcbench
@pytest.mark.parametrize("task", ["3945", "167149"])
def test_sensible_config_beats_terrible_one(scenario: YahpoScenario, task: str) -> None:
    good, bad = scenario.evaluate(task, [GOOD, BAD])
    assert good > bad + 20


@needs_lcbench
def test_pinned_outputs(scenario: YahpoScenario) -> None:
    # Values of the official yahpo-gym 1.0.2 (scripts/verify_yahpo.py checks the reader on random configs).
    assert scenario.evaluate("3945", [GOOD])[0] == pytest.approx(90.75412, abs=1e-4)
    assert scenario.evaluate("7593", [GOOD], fidelity_value=10)[0] == pytest.approx(67.97118, abs=1e-4)
    assert scenario.evaluate("7593", [GOOD], fidelity={"epoch": 10})[0] == pytest.approx(67.97118, abs=1e-4)
    assert scenario.evaluate("167149", [GOOD], target="time")[0] == pytest.approx(41.00734, abs=1e-4)
    assert scenario.evaluate("34539", np.full((1, 7), 0.5))[0] == pytest.approx(88.34830, abs=1e-4)


@needs_lcbench
def test_positional_overrides_still_load(scenario: YahpoScenario) -> None:
    again = YahpoScenario.load(LCBENCH, tuple(scenario.targets), tuple(scenario.cont_names))
    np.testing.assert_array_equal(again.evaluate("3945", [GOOD]), scenario.evaluate("3945", [GOOD]))
    with pytest.raises(TuneAgentError, match="config_space"):
        YahpoScenario.load(LCBENCH, None, ("epoch", "batch_size", "learning_rate"))


@needs_lcbench
def test_bad_inputs_are_user_errors(scenario: YahpoScenario, tmp_path: Path) -> None:
    with pytest.raises(TuneAgentError):
        YahpoScenario.load(tmp_path / "nope")
    broken = tmp_path / "lcbench"
    shutil.copytree(LCBENCH, broken, ignore=shutil.ignore_patterns("model.onnx"))
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


@needs_lcbench
def test_lcbench_files_that_drift_from_the_builtin_descriptor_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "lcbench"
    shutil.copytree(LCBENCH, folder)
    raw = json.loads((folder / "config_space.json").read_text())
    raw["hyperparameters"].append({"name": "optimizer", "type": "categorical", "choices": ["sgd", "adam"]})
    (folder / "config_space.json").write_text(json.dumps(raw))
    with pytest.raises(TuneAgentError, match="optimizer"):
        YahpoScenario.load(folder)
    # A model that takes a different number of inputs than the descriptor says is refused too.
    shutil.copy(LCBENCH / "config_space.json", folder / "config_space.json")
    shutil.copy(TOY / "model.onnx", folder / "model.onnx")
    with pytest.raises(TuneAgentError, match="columns"):
        YahpoScenario.load(folder)


@needs_lcbench
def test_a_descriptor_with_columns_swapped_is_refused_for_a_scenario_yahpo_gym_knows(tmp_path: Path) -> None:
    """Two numeric columns swapped pass every check of the files and return plausible wrong values
    (a wrong order put mmce off by up to 0.45); for a scenario yahpo-gym describes, the order must be its."""
    from agent.data.yahpo_scenarios import BUILTIN

    folder = tmp_path / "lcbench"
    shutil.copytree(LCBENCH, folder)
    known = BUILTIN["lcbench"]
    cont = list(known.cont_names)
    cont[0], cont[1] = cont[1], cont[0]
    record = {**known.to_dict(), "cont_names": cont}
    (folder / "descriptor.json").write_text(json.dumps(record))
    with pytest.raises(TuneAgentError, match="another order"):
        YahpoScenario.load(folder)


@needs_lcbench
def test_a_known_scenario_with_two_names_swapped_in_its_config_space_is_refused(tmp_path: Path) -> None:
    """An lcbench folder whose config_space.json swaps batch_size and max_units (both log ints) passes
    every check of the files; the ranges yahpo-gym ships for lcbench catch it, in one line."""
    folder = tmp_path / "lcbench"
    folder.mkdir()
    for name in ("model.onnx", "encoding.json"):
        (folder / name).symlink_to(LCBENCH / name)
    space = json.loads((LCBENCH / "config_space.json").read_text())
    for h in space["hyperparameters"]:
        h["name"] = {"batch_size": "max_units", "max_units": "batch_size"}.get(h["name"], h["name"])
    (folder / "config_space.json").write_text(json.dumps(space))
    with pytest.raises(TuneAgentError, match=r"two names swapped") as err:
        YahpoScenario.load(folder)
    assert "batch_size" in str(err.value) and "\n" not in str(err.value)
    (folder / "config_space.json").write_text((LCBENCH / "config_space.json").read_text())
    assert YahpoScenario.load(folder).space.dim == 7  # the same folder with yahpo-gym's file loads
