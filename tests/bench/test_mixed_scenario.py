"""The mixed-space stand-in (`bench mixed-scenario`): a YAHPO-format folder every `yahpo:` path
reads, with lcbench's surfaces and seven added, partly conditional hyperparameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def test_the_stand_in_reads_as_a_scenario_of_fourteen_mixed_conditional_parameters(cli, tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from agent.data.yahpo import YahpoScenario
    from agent.jobs.yahpo import yahpo_root

    if not (yahpo_root() / "lcbench" / "model.onnx").exists():
        pytest.skip("the shipped lcbench scenario is not here")
    res = cli("bench", "mixed-scenario", "--out", str(tmp_path / "mixed"), "--tasks", "40")
    assert res.code == 0, res.err
    mixed, base = YahpoScenario.load(tmp_path / "mixed"), YahpoScenario.load(yahpo_root() / "lcbench")
    space = mixed.space
    assert space.dim == 14 and len(mixed.instances) == 40 and space.has_conditions
    kinds = {p.name: p.kind for p in space.params}
    assert kinds["booster"] == kinds["grow_policy"] == "categorical" and kinds["max_depth"] == "int"
    assert space["rate_drop"].condition.values == ("dart",)
    shared = {
        "batch_size": 64,
        "learning_rate": 0.01,
        "momentum": 0.9,
        "weight_decay": 0.001,
        "num_layers": 2,
        "max_units": 256,
        "max_dropout": 0.2,
    }
    linear = {**shared, "booster": "gblinear", "alpha": 0.01, "lambda": 1.0}
    tree = {**shared, "booster": "gbtree", "grow_policy": "depthwise", "max_depth": 6, "subsample": 0.8, "lambda": 1.0}
    # task i answers with lcbench task i mod 34 plus the added parameters' effect (accuracy outputs only)
    import json

    codes = {
        v: k for k, v in json.loads((yahpo_root() / "lcbench" / "encoding.json").read_text())["OpenML_task_id"].items()
    }
    lc = base.predict(codes[1 % 34 + 1], [shared])[0]  # instance i: lcbench's task of code i mod 34 + 1
    for task in ("1", "35"):
        a, b = mixed.predict(task, [linear])[0], mixed.predict(task, [tree])[0]
        assert np.allclose(a[[0, 2, 4]], lc[[0, 2, 4]], rtol=1e-5) and np.allclose(
            b[[0, 2, 4]], lc[[0, 2, 4]], rtol=1e-5
        )
        assert abs(a[1] - b[1]) > 1e-3  # the booster moves val_accuracy
        assert np.isclose((a[1] - lc[1]) / 100, a[3] - lc[3], atol=1e-4)  # the same effect, in fractions
    assert not np.isclose(mixed.predict("1", [tree])[0][1], mixed.predict("35", [tree])[0][1])  # per-task effects
