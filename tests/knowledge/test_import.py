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


def test_an_interrupted_import_resumes_without_losing_or_doubling_a_study(store, tmp_path, monkeypatch) -> None:
    """The fifth study's write fails: four whole studies are listed (also by a reader whose listing
    was cached while the batch ran); run again, the import writes the other four and skips these."""
    from agent.knowledge import imports
    from agent.knowledge.importer import import_table

    space = SearchSpace([Float("lr", 1e-4, 1e-1, log=True), Int("layers", 1, 5)])
    rng = np.random.default_rng(1)
    table = pd.DataFrame(
        [
            {"task": f"t{i}", "lr": float(10 ** rng.uniform(-4, -1)), "layers": int(rng.integers(1, 6)), "value": v}
            for i in range(8)
            for v in rng.random(3)
        ]
    )
    kb = store.kb()
    real = type(kb).import_evaluations
    written: list[str] = []

    def failing(self, name, *args, **kwargs):
        if len(written) == 4:
            raise KeyboardInterrupt
        written.append(name)
        record = real(self, name, *args, **kwargs)
        store.kb().list_studies()  # another reader lists (and caches) while the batch runs
        return record

    monkeypatch.setattr(type(kb), "import_evaluations", failing)
    try:
        import_table(kb, table, space, "ext", "acc", "max")
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(type(kb), "import_evaluations", real)
    assert sorted(s.name for s in store.kb().list_studies()) == [f"import-ext-t{i}" for i in range(4)]
    said: list[str] = []
    monkeypatch.setattr(imports, "SAY_EVERY", 0.0)
    again = import_table(store.kb(), table, space, "ext", "acc", "max", progress=said.append)
    assert again["studies"] == 4 and again["skipped"] == 4 and again["rows"] == 12
    assert said and said[-1].startswith("imported 4/4 studies (")
    names = [s.name for s in store.kb().list_studies()]
    assert sorted(names) == [f"import-ext-t{i}" for i in range(8)]  # none twice
    history = load_history(store.kb(), job="ext", with_samples=False)
    assert all(len(h.evaluations) == 3 for h in history)
