"""`--config FILE.yaml`: option values from a file, flags override, unknown keys are bad input."""

from __future__ import annotations

from pathlib import Path


def test_config_file_sets_options_and_flags_override(store, cli, tmp_path: Path) -> None:
    cfg = tmp_path / "study.yaml"
    cfg.write_text("dataset: iris\njob: agent.jobs.examples:logistic\ntrials: 2\nwarm-start: none\nseed: 7\n")
    res = cli("create", "--config", str(cfg), "--trials", "3", "--study-name", "from-file", *store.args)
    assert res.code == 0, res.err
    record = store.kb().find_study("from-file")
    assert record.settings["trials"] == 3  # the flag wins
    assert record.settings["seed"] == 7 and record.settings["warm_start"] == "none"  # from the file


def test_unknown_key_in_config_file_is_one_line_and_exit_2(store, cli, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("dataset: iris\njob: mlp\ntrails: 3\n")
    res = cli("create", "--config", str(cfg), *store.args)
    assert res.code == 2
    assert "unknown option 'trails'" in res.err and len(res.err.strip().splitlines()) == 1
    assert not (Path(store.root) / "mlflow.db").exists()
