"""`tune-agent import`: an external table becomes history read back by the knowledge-base code."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from agent.knowledge.history import load_history
from agent.space import Float, Int, SearchSpace


def test_import_round_trip(store, cli, tmp_path) -> None:
    space = SearchSpace([Float("lr", 1e-4, 1e-1, log=True), Int("layers", 1, 5)])
    (tmp_path / "space.json").write_text(json.dumps({"params": space.to_dict()}))
    rng = np.random.default_rng(0)
    rows = [
        {
            "task": t,
            "lr": float(10 ** rng.uniform(-4, -1)),
            "layers": int(rng.integers(1, 6)),
            "value": float(rng.random()),
        }
        for t in ("a", "b")
        for _ in range(5)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    res = cli(
        "import",
        str(tmp_path / "t.csv"),
        "--space",
        str(tmp_path / "space.json"),
        "--job-name",
        "ext",
        "--metric",
        "acc",
        "--mode",
        "max",
        *store.args,
    )
    assert res.code == 0, res.err
    assert json.loads(res.out)["rows"] == 10
    history = load_history(store.kb(), job="ext", with_samples=False)
    assert [h.name for h in history] == ["a", "b"]
    got = sorted(e.value for e in history[0].evaluations)
    assert got == sorted(r["value"] for r in rows if r["task"] == "a")
    assert history[0].best().value == max(got) and history[0].mode == "max"


def test_import_rejects_a_table_without_the_space_columns(store, cli, tmp_path) -> None:
    (tmp_path / "space.json").write_text(
        json.dumps([{"kind": "float", "name": "lr", "low": 0.1, "high": 1.0, "log": False}])
    )
    pd.DataFrame([{"task": "a", "value": 1.0}]).to_csv(tmp_path / "t.csv", index=False)
    res = cli(
        "import", str(tmp_path / "t.csv"), "--space", str(tmp_path / "space.json"), "--job-name", "x", *store.args
    )
    assert res.code == 2 and "lr" in res.err
    assert not (store.root / "mlflow.db").exists()
