"""Options from the environment, as README says: TUNE_AGENT_<OPTION> for every command that has the
option, TUNE_AGENT_<COMMAND>_<OPTION> for one command (it wins), the command line over both; a bad
value is one line naming the variables, before anything is written. Real store, toy YAHPO job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOY = Path(__file__).resolve().parent / "bench" / "fixtures" / "yahpo_toy"
JOB = f"yahpo:{TOY}"


def test_global_and_per_command_variables_reach_every_command(store, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNE_AGENT_TRACKING_URI", store.uri)  # one setting for create, history and best
    monkeypatch.setenv("TUNE_AGENT_ARTIFACT_ROOT", store.artifacts)
    monkeypatch.setenv("TUNE_AGENT_TRIALS", "7")
    monkeypatch.setenv("TUNE_AGENT_CREATE_TRIALS", "3")  # the command's own wins over the global one
    res = cli("create", "--job", JOB, "--dataset", "t1", "--warm-start", "none", "--study-name", "from-env")
    assert res.code == 0, res.err
    record = store.kb().find_study("from-env")
    assert record is not None and record.settings["trials"] == 3
    res = cli(
        "create", "--job", JOB, "--dataset", "t1", "--warm-start", "none", "--study-name", "flag", "--trials", "2"
    )
    assert res.code == 0 and store.kb().find_study("flag").settings["trials"] == 2  # the flag wins over both
    listed = cli("history")
    assert listed.code == 0 and "from-env" in listed.out and "flag" in listed.out
    monkeypatch.setenv("TUNE_AGENT_JSON", "1")  # named after the option, --json
    as_json = cli("history")
    assert as_json.code == 0 and {s["study"] for s in json.loads(as_json.out)["studies"]} >= {"from-env", "flag"}


def test_a_bad_value_from_the_environment_is_one_line(store, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNE_AGENT_TRIALS", "abc")
    res = cli("create", "--job", JOB, "--dataset", "t1", "--study-name", "bad", *store.args)
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "TUNE_AGENT_TRIALS" in res.err and "TUNE_AGENT_CREATE_TRIALS" in res.err
    assert not (Path(store.root) / "mlflow.db").exists()
