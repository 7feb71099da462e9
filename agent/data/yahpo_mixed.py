"""A YAHPO-format scenario of the shape of an XGBoost space, derived from the shipped lcbench.

The real data here is lcbench (Zimmer et al. 2021, through YAHPO Gym's ONNX surrogate: 34 tasks, 7
numeric hyperparameters). Spaces in the field are often larger, mixed and conditional: YAHPO's
``rbv2_xgboost`` has about 14 hyperparameters over some 119 tasks, several of them active for one
booster only. :func:`write_mixed_scenario` writes a scenario folder of that shape that every
``yahpo:`` code path reads like any other (config_space.json, encoding.json, descriptor.json and one
ONNX model):

- ``tasks`` instances; instance ``i`` answers with the surface of the lcbench task whose code in
  lcbench's encoding.json is ``i mod 34 + 1``;
- the 7 lcbench hyperparameters, plus ``booster`` (gbtree, dart, gblinear), ``max_depth`` (int, log)
  and ``subsample`` and ``grow_policy`` (categorical) active for the tree boosters, ``rate_drop``
  active for dart, ``alpha`` (log) active for gblinear, and ``lambda`` (log) for all: 14 in all;
- the accuracy outputs move by a smooth, task-seeded effect of the added hyperparameters (a
  per-booster offset and a bowl around a per-task optimum of each active one, a few accuracy points
  in all), computed inside the ONNX graph; the other outputs are lcbench's.

It is a stand-in for measuring cost (sources x dimension x categoricals), not a claim about
XGBoost: the surfaces along the added dimensions are synthetic, the rest are real.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

BASE_TASKS = 34
BOOSTERS = ("gbtree", "dart", "gblinear")
POLICIES = ("depthwise", "lossguide")
# the outputs the effect moves: val_accuracy (in percent), val_balanced_accuracy and test_balanced_accuracy (fractions)
ACCURACY_SCALE = {1: 1.0, 3: 0.01, 5: 0.01}
# Added x_cont columns, in order, after lcbench's eight: name, ConfigSpace entry
ADDED_CONT = (
    ("max_depth", {"type": "uniform_int", "log": True, "lower": 1, "upper": 15, "default": 6}),
    ("subsample", {"type": "uniform_float", "log": False, "lower": 0.1, "upper": 1.0, "default": 1.0}),
    ("rate_drop", {"type": "uniform_float", "log": False, "lower": 0.0, "upper": 1.0, "default": 0.0}),
    ("alpha", {"type": "uniform_float", "log": True, "lower": 0.001, "upper": 1000.0, "default": 0.001}),
    ("lambda", {"type": "uniform_float", "log": True, "lower": 0.001, "upper": 1000.0, "default": 1.0}),
)
TREE = ["gbtree", "dart"]


def _config_space(base: dict[str, Any], tasks: int) -> dict[str, Any]:
    params = [dict(p) for p in base["hyperparameters"] if p["name"] != "OpenML_task_id"]
    params.insert(
        0,
        {
            "name": "task_id",
            "type": "categorical",
            "choices": [str(t) for t in range(tasks)],
            "default": "0",
            "probabilities": None,
        },
    )
    params.append(
        {
            "name": "booster",
            "type": "categorical",
            "choices": list(BOOSTERS),
            "default": "gbtree",
            "probabilities": None,
        }
    )
    params.append(
        {
            "name": "grow_policy",
            "type": "categorical",
            "choices": list(POLICIES),
            "default": "depthwise",
            "probabilities": None,
        }
    )
    params += [{"name": name, **spec} for name, spec in ADDED_CONT]
    conditions = [
        {"child": "max_depth", "parent": "booster", "type": "IN", "values": TREE},
        {"child": "subsample", "parent": "booster", "type": "IN", "values": TREE},
        {"child": "grow_policy", "parent": "booster", "type": "IN", "values": TREE},
        {"child": "rate_drop", "parent": "booster", "type": "EQ", "value": "dart"},
        {"child": "alpha", "parent": "booster", "type": "EQ", "value": "gblinear"},
    ]
    return {
        "hyperparameters": params,
        "conditions": conditions,
        "forbiddens": [],
        "python_module_version": "0.4.18",
        "json_format_version": 0.2,
    }


def _task_effects(tasks: int, seed: int) -> dict[str, np.ndarray]:
    """Per task: booster offsets and the optimum of each added hyperparameter (in the units the
    graph compares them in: log2 depth, subsample, rate_drop, log10 alpha, log10 lambda)."""
    rng = np.random.default_rng(seed)
    return {
        "booster": rng.uniform(-4.0, 2.0, (tasks + 1, len(BOOSTERS) + 1)).astype(np.float32),  # row 0 / col 0: #na#
        "policy": rng.uniform(-1.0, 1.0, (tasks + 1, len(POLICIES) + 1)).astype(np.float32),
        "optimum": np.stack(
            [
                rng.uniform(1.0, 3.5, tasks + 1),
                rng.uniform(0.5, 1.0, tasks + 1),
                rng.uniform(0.0, 0.3, tasks + 1),
                rng.uniform(-3.0, 1.0, tasks + 1),
                rng.uniform(-1.0, 2.0, tasks + 1),
            ],
            axis=1,
        ).astype(np.float32),
        "weight": np.tile(np.array([[0.6, 2.0, 3.0, 0.15, 0.1]], dtype=np.float32), (tasks + 1, 1)),
    }


def _output_scale() -> np.ndarray:
    return np.array([[ACCURACY_SCALE.get(i, 0.0) for i in range(6)]], np.float32)


N_BASE = 8  # lcbench's x_cont columns, before the added ones


def _constants(effects: dict[str, np.ndarray]) -> list[Any]:
    """The graph's initialisers: the slicing indices, the unit conversions and the task effects."""
    from onnx import numpy_helper

    return [
        numpy_helper.from_array(np.asarray(v), name)
        for name, v in {
            "c_start": np.array([0], np.int64),
            "c_base_end": np.array([N_BASE], np.int64),
            "c_axis1": np.array([1], np.int64),
            "c_zero": np.array([0], np.int64),
            "c_one": np.array([1], np.int64),
            "c_two": np.array([2], np.int64),
            "c_three": np.array([3], np.int64),
            "c_end": np.array([N_BASE + len(ADDED_CONT)], np.int64),
            "c_tasks": np.array([BASE_TASKS], np.int32),
            "c_one_i": np.array([1], np.int32),
            "c_zero_i": np.array([0], np.int32),
            "c_log2": np.array([np.log(2.0)], np.float32),
            "c_log10": np.array([np.log(10.0)], np.float32),
            "c_tiny": np.array([1e-12], np.float32),
            "t_booster": effects["booster"],
            "t_policy": effects["policy"],
            "t_optimum": effects["optimum"],
            "t_weight": effects["weight"],
            "t_mask": np.array([[0, 0, 0, 0, 0], [1, 1, 0, 0, 1], [1, 1, 1, 0, 1], [0, 0, 0, 1, 1]], np.float32),
            "t_scale": _output_scale(),
        }.items()
    ]


def _effect_nodes() -> list[Any]:
    """The nodes that split the inputs between lcbench's graph and the added columns, compute the
    added columns' effect and add it to lcbench's output (the last node)."""
    from onnx import helper

    n = helper.make_node
    return [
        n("Slice", ["x_cont", "c_start", "c_base_end", "c_axis1"], ["base_x_cont"]),
        n("Slice", ["x_cont", "c_base_end", "c_end", "c_axis1"], ["added"]),
        n("Slice", ["x_cat", "c_zero", "c_one", "c_axis1"], ["task_code"]),  # 0 = #na#, task i = code i + 1
        n("Slice", ["x_cat", "c_one", "c_two", "c_axis1"], ["booster_code"]),
        n("Slice", ["x_cat", "c_two", "c_three", "c_axis1"], ["policy_code"]),
        n("Sub", ["task_code", "c_one_i"], ["task_index"]),
        n("Max", ["task_index", "c_zero_i"], ["task_index_0"]),
        n("Mod", ["task_index_0", "c_tasks"], ["base_index"]),
        n("Add", ["base_index", "c_one_i"], ["base_x_cat"]),
        n("Squeeze", ["task_code", "c_axis1"], ["task_row"]),
        n("Squeeze", ["booster_code", "c_axis1"], ["booster_row"]),
        n("Squeeze", ["policy_code", "c_axis1"], ["policy_row"]),
        # per-booster offset: t_booster[task, booster]
        n("Gather", ["t_booster", "task_row"], ["booster_table"], axis=0),
        n("Unsqueeze", ["booster_row", "c_axis1"], ["booster_col"]),
        n("GatherElements", ["booster_table", "booster_col"], ["booster_offset"], axis=1),
        n("Gather", ["t_policy", "task_row"], ["policy_table"], axis=0),
        n("Unsqueeze", ["policy_row", "c_axis1"], ["policy_col"]),
        n("GatherElements", ["policy_table", "policy_col"], ["policy_offset"], axis=1),
        # the added columns in the units of their optima: log2 depth, subsample, rate_drop, log10 alpha, log10 lambda
        n("Max", ["added", "c_tiny"], ["added_pos"]),
        n("Log", ["added_pos"], ["added_log"]),
        n("Div", ["added_log", "c_log2"], ["added_log2"]),
        n("Div", ["added_log", "c_log10"], ["added_log10"]),
        n("Split", ["added"], ["a_depth", "a_sub", "a_drop", "a_alpha", "a_lambda"], axis=1),
        n("Split", ["added_log2"], ["l2_depth", "l2_sub", "l2_drop", "l2_alpha", "l2_lambda"], axis=1),
        n("Split", ["added_log10"], ["l10_depth", "l10_sub", "l10_drop", "l10_alpha", "l10_lambda"], axis=1),
        n("Concat", ["l2_depth", "a_sub", "a_drop", "l10_alpha", "l10_lambda"], ["units"], axis=1),
        n("Gather", ["t_optimum", "task_row"], ["optimum"], axis=0),
        n("Gather", ["t_weight", "task_row"], ["weight"], axis=0),
        n("Gather", ["t_mask", "booster_row"], ["mask"], axis=0),
        n("Sub", ["units", "optimum"], ["gap"]),
        n("Mul", ["gap", "gap"], ["gap2"]),
        n("Mul", ["gap2", "weight"], ["penalty_w"]),
        n("Mul", ["penalty_w", "mask"], ["penalty"]),
        n("ReduceSum", ["penalty", "c_axis1"], ["penalty_sum"], keepdims=1),
        n("Slice", ["mask", "c_zero", "c_one", "c_axis1"], ["tree_mask"]),  # grow_policy counts for tree boosters
        n("Mul", ["policy_offset", "tree_mask"], ["policy_effect"]),
        n("Add", ["booster_offset", "policy_effect"], ["offsets"]),
        n("Sub", ["offsets", "penalty_sum"], ["effect"]),  # `n x 1`, accuracy points
        n("Mul", ["effect", "t_scale"], ["effect_out"]),  # `n x 6`: on the accuracy outputs only
        n("Add", ["base_y", "effect_out"], ["output"]),
    ]


def _graph(base: Any, tasks: int, effects: dict[str, np.ndarray]) -> Any:
    """lcbench's graph on renamed inputs, and the effect of the added columns on its accuracy outputs."""
    from onnx import TensorProto, helper

    graph = base.graph
    for node in graph.node:
        node.input[:] = [{"x_cont": "base_x_cont", "x_cat": "base_x_cat"}.get(i, i) for i in node.input]
        node.output[:] = ["base_y" if o == "output" else o for o in node.output]
    init = _constants(effects)
    nodes = _effect_nodes()
    del graph.input[:]
    graph.input.extend(
        [
            helper.make_tensor_value_info("x_cat", TensorProto.INT32, ["batch_size", 3]),
            helper.make_tensor_value_info("x_cont", TensorProto.FLOAT, ["batch_size", N_BASE + len(ADDED_CONT)]),
        ]
    )
    graph.initializer.extend(init)
    lcbench = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes[:-1] + lcbench + nodes[-1:])  # inputs and effect, lcbench, their sum: in order
    return base


def write_mixed_scenario(out: Path | str, base_folder: Path | str, tasks: int = 118, seed: int = 0) -> Path:
    """Writes the scenario folder ``out`` (see the module docstring) from lcbench's ``base_folder``."""
    import onnx

    base_folder, out = Path(base_folder), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    base_space = json.loads((base_folder / "config_space.json").read_text())
    (out / "config_space.json").write_text(json.dumps(_config_space(base_space, tasks), indent=1))
    encoding = {
        "task_id": {"#na#": 0, **{str(t): t + 1 for t in range(tasks)}},
        "booster": {"#na#": 0, **{b: i + 1 for i, b in enumerate(BOOSTERS)}},
        "grow_policy": {"#na#": 0, **{p: i + 1 for i, p in enumerate(POLICIES)}},
    }
    (out / "encoding.json").write_text(json.dumps(encoding))
    descriptor = {
        "cont_names": [
            "epoch",
            "batch_size",
            "learning_rate",
            "momentum",
            "weight_decay",
            "num_layers",
            "max_units",
            "max_dropout",
            *(name for name, _ in ADDED_CONT),
        ],
        "cat_names": ["task_id", "booster", "grow_policy"],
        "targets": [
            "time",
            "val_accuracy",
            "val_cross_entropy",
            "val_balanced_accuracy",
            "test_cross_entropy",
            "test_balanced_accuracy",
        ],
        "fidelities": {"epoch": 52},
        "instance_name": "task_id",
        "maximize": ["val_accuracy", "val_balanced_accuracy", "test_balanced_accuracy"],
        "default_target": "val_accuracy",
        "runtime_name": "time",
    }
    (out / "descriptor.json").write_text(json.dumps(descriptor, indent=1))
    model = _graph(onnx.load(str(base_folder / "model.onnx")), tasks, _task_effects(tasks, seed))
    onnx.checker.check_model(model)
    onnx.save(model, str(out / "model.onnx"))
    for extra in ("LICENSE-2.0.txt",):
        if (base_folder / extra).exists():
            shutil.copy(base_folder / extra, out / extra)
    (out / "README.txt").write_text(
        "A stand-in of an XGBoost-shaped space derived from lcbench (tune-agent's "
        "agent/bench/mixed_scenario.py): lcbench's surfaces and 7 added, partly "
        "conditional hyperparameters with synthetic effects.\n"
    )
    return out
