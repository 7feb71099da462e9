"""The reading commands' fast path (agent/knowledge/mlflow/sqlite_reads.py): every read the
knowledge base makes gives the same records through sqlite3 as through MLflow's own client, on a
real store with a finished study, an imported (inline) one, a running one with a failed and a
pending trial, and a deleted run; `best` and `history` then never import MLflow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

TOY = Path(__file__).resolve().parents[1] / "bench" / "fixtures" / "yahpo_toy"
JOB = f"yahpo:{TOY}"


def _store_with_everything(store, cli, tmp_path: Path) -> None:
    from agent.jobs import load_job

    job = load_job(JOB)
    rng = np.random.default_rng(0)
    U = job.space.snap(rng.random((12, job.space.dim)))
    y = np.asarray(job.evaluate_many(U, job.task("t2")))
    pd.DataFrame([{"task": "src-a", **job.space.decode(u), "value": float(v)} for u, v in zip(U, y)]).to_csv(
        tmp_path / "history.csv", index=False
    )
    (tmp_path / "space.json").write_text(json.dumps({"params": job.space.to_dict()}))
    assert (
        cli(
            "import",
            str(tmp_path / "history.csv"),
            "--space",
            str(tmp_path / "space.json"),
            "--job-name",
            job.name,
            "--metric",
            job.metric,
            "--mode",
            job.mode,
            *store.args,
        ).code
        == 0
    )
    assert (
        cli(
            "start",
            "--job",
            JOB,
            "--dataset",
            "t1",
            "--trials",
            "4",
            "--warm-start",
            "none",
            "--study-name",
            "done",
            *store.args,
        ).code
        == 0
    )
    assert (
        cli(
            "create",
            "--job",
            JOB,
            "--dataset",
            "t1",
            "--trials",
            "5",
            "--warm-start",
            "none",
            "--study-name",
            "open's",
            *store.args,
        ).code
        == 0
    )  # a quote in the name: the filters quote it
    for _ in range(3):
        assert cli("ask", "open's", "--tracking-uri", store.uri).code == 0
    assert cli("tell", "open's", "1", "--value", "0.25", "--tracking-uri", store.uri).code == 0
    assert (
        cli("tell", "open's", "2", "--failed", "diverged", "--tracking-uri", store.uri).code == 0
    )  # trial 3 stays pending
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)  # a run deleted in the UI: neither search may find it
    kb = store.kb()
    client.delete_run(kb.trials(kb.find_study("done"))[-1].trial_id)


def test_every_read_is_the_same_through_sqlite_as_through_mlflow(store, cli, tmp_path: Path) -> None:
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.mlflow.sqlite_reads import SqliteReads

    _store_with_everything(store, cli, tmp_path)
    slow = MlflowKnowledgeBase(store.uri, store.artifacts)
    fast = MlflowKnowledgeBase(store.uri, store.artifacts, fast_reads=True)
    studies = slow.list_studies()
    assert isinstance(fast._client, SqliteReads)
    assert fast.list_studies() == studies and len(studies) == 3
    assert fast._experiment_ids() == slow._experiment_ids()
    for record in studies:
        assert fast.find_study(record.name) == slow.find_study(record.name) == record
        assert fast.trials(record) == slow.trials(record)
        assert fast.study_tags(record) == slow.study_tags(record)
        assert fast.load_study_space(record) == slow.load_study_space(record) is not None
        a, b = fast.load_dataset_sample(record.study_id), slow.load_dataset_sample(record.study_id)
        assert (a is None) == (b is None) and (a is None or all(np.array_equal(x, z) for x, z in zip(a, b)))
    states = sorted(t.state for t in fast.trials(fast.find_study("open's")))
    assert states == sorted(t.state for t in slow.trials(slow.find_study("open's"))) and len(set(states)) == 3
    assert len(fast.trials(fast.find_study("done"))) == 3  # the deleted trial run is not read
    assert fast.find_study("nobody") is None
    # the listing's re-read of what changed since a time (agent.knowledge.study_cache)
    from agent.knowledge.mlflow.studies import _changed_after

    ended = "tags.`tune_agent.kind` = 'study' and attributes.status != 'RUNNING' and "
    ids = fast._experiment_ids()
    for since in (0, 2**62):
        got = sorted(r.info.run_id for r in fast._search(ended + _changed_after(since), ids))
        assert got == sorted(r.info.run_id for r in slow._search(ended + _changed_after(since), ids))
        assert len(got) == (2 if since == 0 else 0)  # the finished study and the imported one
        times = fast._client.changed_times(ids, ended + _changed_after(since), "tune_agent.changed_at")
        assert times == {
            r.info.run_id: r.data.metrics["tune_agent.changed_at"]
            for r in slow._search(ended + _changed_after(since), ids)
        }
    assert fast._client._client is None  # all of that without MLflow's client


def test_best_and_history_read_an_embedded_store_without_importing_mlflow(store, cli, tmp_path: Path) -> None:
    assert (
        cli(
            "start",
            "--job",
            JOB,
            "--dataset",
            "t1",
            "--trials",
            "3",
            "--warm-start",
            "none",
            "--study-name",
            "s",
            *store.args,
        ).code
        == 0
    )
    expected = json.loads(cli("best", "s", "--tracking-uri", store.uri).out)
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['tune-agent', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('agent.cli', run_name='__main__')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "print('MLFLOW' if 'mlflow' in sys.modules else 'NO-MLFLOW', file=sys.stderr)\n"
    )
    for args in (["best", "s"], ["history"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args, "--tracking-uri", store.uri],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == "NO-MLFLOW", args
        if args[0] == "best":
            assert json.loads(done.stdout) == expected
        else:
            lines = done.stdout.splitlines()
            assert lines[0].startswith("1 stud") and any(line.startswith("s ") for line in lines), done.stdout


def test_the_installed_mlflow_makes_stores_of_a_revision_read_here(tmp_path: Path) -> None:
    """A new MLflow with a new schema revision turns the fast path off until its reads are checked
    (this test and the one above) and the revision is added to KNOWN_REVISIONS."""
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.mlflow.sqlite_reads import KNOWN_REVISIONS, revision

    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    MlflowKnowledgeBase(uri).open()
    assert revision(tmp_path / "fresh.db") in KNOWN_REVISIONS
    assert revision(tmp_path / "missing.db") is None


@pytest.mark.slow  # a benchmark command's run: with the benchmarks, out of the default suite
def test_bench_reading_times_each_command_against_a_baseline(store, cli, tmp_path: Path) -> None:
    import agent

    assert (
        cli(
            "start",
            "--job",
            JOB,
            "--dataset",
            "t1",
            "--trials",
            "2",
            "--warm-start",
            "none",
            "--study-name",
            "s",
            *store.args,
        ).code
        == 0
    )
    out = tmp_path / "reading.json"
    code = Path(agent.__file__).resolve().parents[1]  # this code again, as the baseline's folder
    res = cli(
        "bench",
        "reading",
        "--tracking-uri",
        store.uri,
        "--study",
        "s",
        "--repeats",
        "1",
        "--baseline",
        str(code),
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--out",
        str(out),
    )
    assert res.code == 0, res.err
    report = json.loads(out.read_text())
    assert set(report["this_over_baseline"]) == {"best", "history", "report", "report --rebuild", "neighbors", "doctor"}
    assert all(len(v) == 1 and v[0] > 0 for v in report["runs"].values()) and len(report["runs"]) == 12
    assert cli("bench", "reading", "--tracking-uri", store.uri, "--study", "s", "--baseline", str(tmp_path)).code == 2
