"""`--artifact-root` is honoured for a new experiment and refused, in one line, for an existing
experiment that keeps its artifacts elsewhere (it used to be ignored silently)."""

from __future__ import annotations

from pathlib import Path


def test_artifact_root_of_an_existing_experiment_cannot_move(store, cli, tmp_path: Path) -> None:
    base = [
        "--dataset",
        "iris",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "1",
        "--warm-start",
        "none",
        "--tracking-uri",
        store.uri,
    ]
    res = cli("create", *base, "--artifact-root", str(tmp_path / "first"), "--study-name", "a")
    assert res.code == 0, res.err
    res = cli("create", *base, "--artifact-root", str(tmp_path / "first"), "--study-name", "b")  # same root: fine
    assert res.code == 0, res.err
    res = cli("create", *base, "--artifact-root", str(tmp_path / "elsewhere"), "--study-name", "c")
    assert res.code == 2
    assert "cannot move them" in res.err and len(res.err.strip().splitlines()) == 1
    assert store.kb().find_study("c") is None
