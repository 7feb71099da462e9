"""One contract for every registered sampler (agent/samplers/registry.py), as Optuna runs one
storage test suite against every backend: on the committed toy YAHPO scenario (conditional space)
with two imported source tasks, each sampler's study is created, asked and told through the CLI (a
new sampler from the recorded plan at every call, as `resume` rebuilds it), and must give
configurations inside the space, never repeat a running trial's configuration, and count its
budget down to a finished study."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.samplers.registry import get, names
from tests.tuning.test_plan_resume import JOB, history  # noqa: F401 - the fixture: two imported source tasks


def test_the_benchmark_lists_every_sampler_that_is_a_method_of_its_own() -> None:
    from agent.bench.transfer import method_names

    assert [m for m in method_names() if m in names()] == [n for n in names() if get(n).plan != "surrogate"]


@pytest.mark.parametrize("name", names())
def test_every_sampler_keeps_the_contract(name: str, history, store, cli, tmp_path: Path) -> None:
    job = history
    study = f"contract-{name}"
    res = cli(
        "create",
        "--job",
        JOB,
        "--dataset",
        "t1",
        "--trials",
        "5",
        "--sampler",
        name,
        "--warm-start",
        "none",
        "--n-init",
        "2",
        "--models-dir",
        str(tmp_path / "models"),
        "--study-name",
        study,
        *store.args,
    )
    assert res.code == 0, res.err

    def ask() -> dict:
        out = cli("ask", study, "--tracking-uri", store.uri)
        assert out.code == 0, out.err
        return json.loads(out.out)

    def tell(asked: dict) -> None:
        value = float(job.evaluate_many(job.space.encode(asked["config"])[None], job.task("t1"))[0])
        assert cli("tell", study, str(asked["trial"]), "--value", str(value), "--tracking-uri", store.uri).code == 0

    told = []
    for _ in range(2):
        asked = ask()
        tell(asked)
        told.append(asked)
    running, after = ask(), ask()  # one asked and not told yet: the next must not repeat it
    assert running["config"] != after["config"]
    for asked in (running, after):
        tell(asked)
    last = ask()
    tell(last)
    every = told + [running, after, last]
    assert [a["trial"] for a in every] == [1, 2, 3, 4, 5]
    for asked in every:
        job.space.validate(asked["config"])  # inside the space, conditions respected
    kb = store.kb()
    record = kb.find_study(study)
    trials = kb.trials(record)
    assert len(trials) == 5 and all(np.isfinite(t.value) for t in trials)
    assert record.status == "finished"
    assert get(name).plan != "sources" or any(t.origin.startswith("hts") for t in trials), [t.origin for t in trials]
