"""End to end: real `tune-agent start` on real data into a temp sqlite MLflow store."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.knowledge.records import TRIAL_FAILED, TRIAL_OK

DATA = "digits?fraction=0.3"


def test_start_logs_study_and_trials(store, cli) -> None:
    res = cli(
        "start",
        "--dataset",
        DATA,
        "--job",
        "cnn",
        "--trials",
        "3",
        "--n-init",
        "2",
        "--epochs",
        "2",
        "--study-name",
        "s1",
        *store.args,
    )
    assert res.code == 0, res.err
    assert "trial 3/3" in res.out and "best val_loss=" in res.out

    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("tune-agent/cnn")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("tune_agent.kind") == "study"]
    children = [r for r in runs if r.data.tags.get("tune_agent.kind") == "trial"]
    assert len(parent) == 1 and len(children) == 3
    p = parent[0]
    assert p.info.run_name == "s1" and p.info.status == "FINISHED"
    tags = p.data.tags
    assert tags["tune_agent.dataset"] == "digits?fraction=0.3"
    assert len(tags["tune_agent.fingerprint"]) == 16
    assert tags["tune_agent.job"] == "cnn" and tags["tune_agent.status"] == "finished"
    assert tags["tune_agent.objective"] == "min val_loss"
    assert json.loads(tags["tune_agent.best_config"])["conv_layers"] >= 1
    assert tags["mlflow.note.content"].startswith("**Tuning `cnn` on `digits?fraction=0.3`**")
    assert p.data.params["dataset.num_classes"] == "10"
    artifacts = {a.path for a in client.list_artifacts(p.info.run_id)} | {
        a.path for a in client.list_artifacts(p.info.run_id, "dataset")
    }
    assert {"trace.png", "space.json", "dataset/sample.npz", "dataset/summary.json"} <= artifacts

    origins = sorted(c.data.tags["tune_agent.origin"] for c in children)
    assert origins == ["bo:logei", "init:sobol", "init:sobol"]
    for c in children:
        assert c.info.status == "FINISHED"
        assert c.data.tags["mlflow.parentRunId"] == p.info.run_id
        assert c.data.tags["tune_agent.state"] == TRIAL_OK
        assert set(c.data.params) >= {"lr_log10", "decay_log10", "batch_size", "conv_layers", "fc_layers", "dropout"}
        assert {"objective", "duration_s", "val_loss", "val_acc", "train_loss", "train_acc"} <= set(c.data.metrics)
        assert c.data.metrics["objective"] == pytest.approx(c.data.metrics["val_loss"])
        per_epoch = client.get_metric_history(c.info.run_id, "val_loss")
        assert len(per_epoch) == 2  # one value per epoch
    best = json.loads(cli("best", "s1", "--tracking-uri", store.uri).out)
    assert best["value"] == pytest.approx(min(c.data.metrics["objective"] for c in children))


def test_history_lists_studies_and_datasets(store, cli) -> None:
    assert (
        cli(
            "start",
            "--dataset",
            "iris",
            "--job",
            "mlp",
            "--trials",
            "2",
            "--epochs",
            "1",
            "--study-name",
            "iris-a",
            *store.args,
        ).code
        == 0
    )
    out = cli("history", "--tracking-uri", store.uri).out
    assert "iris-a" in out and "1 datasets" in out and "finished" in out


def _write_job_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, name: str = "userjobs") -> None:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))


FLAKY_JOB = '''
from agent.jobs.examples import LogisticJob

class Flaky(LogisticJob):
    """Raises on every other trial; the study must record it and go on."""
    calls = 0
    def build(self, config, dataset, train_idx, val_idx, seed):
        Flaky.calls += 1
        if Flaky.calls % 2 == 0:
            raise RuntimeError("planted failure")
        return super().build(config, dataset, train_idx, val_idx, seed)

flaky = Flaky()
always = type("Always", (LogisticJob,), {"build": lambda *a: (_ for _ in ()).throw(ValueError("boom"))})()
'''


def test_failed_trials_are_recorded_and_the_study_goes_on(store, cli, tmp_path, monkeypatch) -> None:
    _write_job_module(tmp_path, monkeypatch, FLAKY_JOB)
    res = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "userjobs:flaky",
        "--trials",
        "4",
        "--n-init",
        "2",
        "--epochs",
        "1",
        "--study-name",
        "flaky",
        *store.args,
    )
    assert res.code == 0, res.err
    trials = store.kb().trials(store.kb().find_study("flaky"))
    states = [t.state for t in trials]
    assert states.count(TRIAL_FAILED) == 2 and states.count(TRIAL_OK) == 2
    failed = [t for t in trials if t.state == TRIAL_FAILED]
    assert all("planted failure" in t.reason for t in failed)


def test_study_stops_when_most_trials_fail(store, cli, tmp_path, monkeypatch) -> None:
    _write_job_module(tmp_path, monkeypatch, FLAKY_JOB, name="userjobs2")
    res = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "userjobs2:always",
        "--trials",
        "4",
        "--epochs",
        "1",
        "--study-name",
        "doomed",
        *store.args,
    )
    assert res.code == 1
    assert "most trials failed" in res.err and "boom" in res.err
    study = store.kb().find_study("doomed")
    assert study.status == "failed"
    assert len(store.kb().trials(study)) == 3  # stopped once 3 of 4 had failed


def test_time_limit_and_divergence_fail_the_trial(store, cli) -> None:
    res = cli(
        "start",
        "--dataset",
        "digits",
        "--job",
        "cnn",
        "--trials",
        "1",
        "--epochs",
        "50",
        "--time-limit",
        "0.5",
        "--study-name",
        "slow",
        *store.args,
    )
    assert res.code == 1  # the only trial failed: most of the budget
    [trial] = store.kb().trials(store.kb().find_study("slow"))
    assert trial.state == TRIAL_FAILED and "time limit" in trial.reason


def test_ask_tell_from_a_users_loop(store, cli) -> None:
    assert (
        cli(
            "create",
            "--dataset",
            "iris",
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            "3",
            "--n-init",
            "2",
            "--study-name",
            "manual",
            *store.args,
        ).code
        == 0
    )
    for i, value in enumerate([0.9, 0.5, 0.7]):
        res = cli("ask", "manual", "--tracking-uri", store.uri)
        asked = json.loads(res.out)
        assert asked["trial"] == i + 1  # numbered from 1, as the console and the run names are
        assert asked["origin"] == ("init:sobol" if i < 2 else "bo:logei")
        assert cli("tell", "manual", str(i + 1), "--value", str(value), "--tracking-uri", store.uri).code == 0
    assert cli("ask", "manual", "--tracking-uri", store.uri).code == 2  # budget spent
    best = json.loads(cli("best", "manual", "--tracking-uri", store.uri).out)
    assert best["trial"] == 2 and best["value"] == 0.5
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    names = {
        r.info.run_name
        for r in client.search_runs([client.get_experiment_by_name("tune-agent/logistic").experiment_id])
    }
    assert {"manual/trial-1", "manual/trial-2", "manual/trial-3"} <= names
    assert store.kb().find_study("manual").status == "finished"


def test_python_api_ask_tell(store) -> None:
    from agent.config import StudySettings
    from agent.jobs import load_job
    from agent.tuning.study import Study

    job = load_job("agent.jobs.examples:logistic")
    settings = StudySettings(
        job="agent.jobs.examples:logistic",
        job_name=job.name,
        dataset="mine",
        dataset_name="mine",
        fingerprint="0" * 16,
        space_signature=job.space.signature(),
        metric="loss",
        mode="min",
        trials=4,
        n_init=2,
        init="lhs",
        seed=1,
    )
    kb = store.kb()
    record = kb.create_study("api", settings.to_dict(), job.space.to_dict(), {"n": 0}, None, "manual study")
    study = Study(kb, record, job.space)
    seen = []
    while study.remaining() > 0:
        trial = study.ask()
        seen.append(trial.origin)
        study.tell(trial, value=(trial.config["lr"] - 0.01) ** 2)
    assert seen == ["init:lhs", "init:lhs", "bo:logei", "bo:logei"]
    assert study.best().value == min((t.config["lr"] - 0.01) ** 2 for t in study.trials())


def test_timeout_stops_starting_trials_and_the_study_resumes_to_its_budget(store, cli) -> None:
    """``--timeout`` (as Optuna's ``optimize(timeout=)``): the trial running at the deadline
    finishes, no other starts, the study is left resumable, and ``resume`` completes the budget."""
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "3",
        "--epochs",
        "1",
        "--study-name",
        "t1",
        "--timeout",
        "0.01",
        *store.args,
    )
    assert res.code == 0, res.err
    found = re.search(r"--timeout 0.01 s reached after (\d) of 3 trials; continue with: tune-agent resume t1", res.err)
    assert found and int(found.group(1)) < 3, res.err  # an iris trial takes longer than 0.01 s
    from agent.knowledge import open_knowledge_base

    kb = open_knowledge_base(store.uri, store.artifacts)
    study = kb.find_study("t1")
    assert study.status == "interrupted" and len(kb.trials(study)) == int(found.group(1))
    res = cli("resume", "t1", *store.args)
    assert res.code == 0, res.err
    trials = kb.trials(kb.find_study("t1"))
    assert sorted(t.number for t in trials) == [0, 1, 2] and all(t.state == TRIAL_OK for t in trials)
    assert kb.find_study("t1").status == "finished"


def test_best_and_report_read_a_study_without_its_job_or_a_sampler(store, cli, tmp_path) -> None:
    """Reading commands take the study's space from the store: no Lightning, torch or BoTorch import."""
    import subprocess
    import sys

    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "read",
        *store.args,
    )
    assert res.code == 0, res.err
    for command in (["best", "read"], ["report", "read", "--out", str(tmp_path / "rep")]):
        code = (
            "import sys\nfrom agent.cli import main\ntry:\n    main("
            + repr([*command, "--tracking-uri", store.uri])
            + ")\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print('HEAVY', sorted(m for m in ('lightning', 'torch', 'botorch', 'gpytorch') if m in sys.modules))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-1500:]
        assert "HEAVY []" in done.stdout, (command, done.stdout[-500:])
    assert json.loads(cli("best", "read", "--tracking-uri", store.uri).out)["trial"] in (1, 2)
