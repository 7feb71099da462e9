"""bench sources on the committed toy YAHPO scenario: a synthetic history of many datasets, source
models built once (fitted, or reused per task above --fit-up-to), then a real study whose preparation
reads them; with more sources than a surrogate attends to, only the cap is kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TOY = Path(__file__).resolve().parent / "fixtures" / "yahpo_toy"


def test_sources_bench_prepares_from_stored_models_and_caps_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.bench.sources import measure_sources
    from agent.jobs import load_job
    from agent.tuning import source_models

    job = load_job(f"yahpo:{TOY}")
    target = job.scenario.instances[0]
    monkeypatch.setattr(source_models, "MAX_SOURCES", 4)
    report = measure_sources([3, 9], ("gp", "rgpe"), target=target, points=8, budget=4, scenario=str(TOY), fit_up_to=3)
    rows = {(r["sources"], r["method"]): r for r in report["runs"]}
    assert (
        rows[(3, "rgpe")]["source_models"] == "fitted" and rows[(9, "rgpe")]["source_models"] == "transplanted per task"
    )
    for size in (3, 9):
        assert rows[(size, "gp")]["ran_as"] == "gp" and rows[(size, "rgpe")]["prepare_s"] >= 0
    # every source accounted for: used, or left out by the signal check (its R² on 8 points of the
    # toy surface sits near the threshold, so which of the two is not the test's business)
    note = rows[(3, "rgpe")]["note"]
    used = re.search(r"over (\d+) source tasks", note)
    left = re.search(r"(\d+) without a predictable response surface left out", note)
    assert rows[(3, "rgpe")]["ran_as"] == "rgpe" and used is not None, note
    assert int(used.group(1)) + (int(left.group(1)) if left else 0) == 3, note
    assert "over 4 source tasks" in rows[(9, "rgpe")]["note"]  # 9 sources, the cap of 4 kept
