"""The mid-epoch kill campaign on one study (`bench faults --mid-epoch`): real SIGKILL, real resume."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_one_study_killed_mid_epoch_continues_from_its_checkpoint() -> None:
    from agent.bench.faults_mid_epoch import run_mid_epoch_campaign

    report = run_mid_epoch_campaign(studies=1, trials=1, epochs=8, seed=1, say=lambda line: None)
    row = report["rows"][0]
    assert report["finished"] == 1 and report["duplicated"] == 0 and report["running_left"] == 0
    if report["killed_mid_trial"]:  # the kill can land after the only trial ended (then nothing continues)
        assert row["continued_from_checkpoint"] and row["value_equal"], row
