"""The Python API as an Optuna user drives it (``agent.create_study``, ``study.optimize``), on a
real store: the job's own training and a user's objective in one study, ``n_trials`` and
``timeout``, failures recorded, resumption by name, and one numbering from 1 wherever a trial is
read (the API, the run names, tags and descriptions, ``best``)."""

from __future__ import annotations

import json

import pytest

from agent.knowledge.records import TRIAL_FAILED, TRIAL_OK

JOB = "agent.jobs.examples:logistic"


def test_optimize_runs_the_job_and_an_objective_numbered_from_one(store, cli, capsys) -> None:
    import agent
    from mlflow import MlflowClient

    study = agent.create_study(
        "api",
        dataset="iris",
        job=JOB,
        trials=5,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        warm_start="none",
        epochs=1,
    )
    assert study.direction == "minimize" and study.metric == "val_loss" and study.trials == []
    study.optimize(n_trials=2)  # the job trains itself, as `tune-agent start`
    assert [t.number for t in study.trials] == [1, 2] and study.remaining() == 3
    assert study.status == "interrupted"  # budget left: resumable

    seen = []

    def objective(trial):
        seen.append(trial.number)
        if len(seen) == 2:
            raise ValueError("diverged")
        return 0.1 + trial.params["lr"]

    study.optimize(objective, n_trials=2)
    assert seen == [3, 4]
    assert "trial 4 failed: ValueError: diverged (recorded; the study goes on)" in capsys.readouterr().err
    by_number = {t.number: t for t in study.trials}
    assert by_number[3].state == TRIAL_OK and by_number[3].value == pytest.approx(0.1 + by_number[3].params["lr"])
    assert by_number[4].state == TRIAL_FAILED and "diverged" in by_number[4].reason

    again = agent.create_study("api", dataset="iris", job=JOB, trials=5, tracking_uri=store.uri, load_if_exists=True)
    again.optimize(timeout=600)  # the rest of the budget, the job's training again
    assert sorted(t.number for t in again.trials) == [1, 2, 3, 4, 5] and again.status == "finished"
    best = again.best_trial
    assert best.state == TRIAL_OK and again.best_value == best.value and again.best_params == dict(best.params)

    # the same numbers in the store a person browses, and in `best`
    client = MlflowClient(store.uri)
    record = store.kb().find_study("api")
    experiment = client.get_run(record.study_id).info.experiment_id
    runs = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{record.study_id}'")
    for run in runs:
        n = int(run.data.tags["tune_agent.trial"])
        assert run.info.run_name == f"api/trial-{n}"
        assert run.data.tags["mlflow.note.content"].startswith(f"Trial {n} of study")
    assert sorted(int(r.data.tags["tune_agent.trial"]) for r in runs) == [1, 2, 3, 4, 5]
    shown = cli("best", "api", "--json", "--tracking-uri", store.uri)
    assert shown.code == 0 and json.loads(shown.out)["trial"] == best.number


def test_optimize_refuses_bad_arguments_and_unknown_studies(store) -> None:
    import agent
    from agent.errors import OptionError, StudyError, TuneAgentError, UnknownStudyError

    study = agent.create_study(
        "small",
        dataset="iris",
        job=JOB,
        trials=2,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        warm_start="none",
        epochs=1,
    )
    with pytest.raises(StudyError, match="n_trials must be at least 1"):
        study.optimize(n_trials=0)
    # execution options go through the command line's checks (agent.execution.options)
    with pytest.raises(OptionError, match="'--timeout': must be positive seconds, got 0"):
        study.optimize(timeout=0)
    with pytest.raises(OptionError, match="'--workers': must be at least 1, got 0"):
        study.optimize(n_jobs=0)
    with pytest.raises(OptionError, match="'--ask-ahead': must be 0 or more"):
        study.optimize(ask_ahead=-1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        study.optimize(nope=1)
    with pytest.raises(StudyError, match="an objective runs its trials here, one at a time"):
        study.optimize(lambda trial: 0.0, n_jobs=2)
    with pytest.raises(TuneAgentError, match="--surrogate must be one of gp, .*, got 'nope'"):
        agent.create_study(dataset="iris", job=JOB, surrogate="nope", tracking_uri=store.uri)
    assert len(store.kb().list_studies()) == 1  # nothing half-written by a refused request
    with pytest.raises(StudyError, match="no finished trial yet"):
        study.best_trial  # noqa: B018
    with pytest.raises(UnknownStudyError):
        agent.load_study("nope", tracking_uri=store.uri)
    trial = study.ask()  # Optuna's ask/tell
    assert trial.number == 1 and trial.params == trial.config
    done = study.tell(trial, value=0.5)
    assert done.number == 1 and done.state == TRIAL_OK and study.best_value == 0.5


def test_the_readme_python_snippet_runs_as_written_in_an_empty_folder(tmp_path, monkeypatch) -> None:
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "python-api.md").read_text()
    section = readme[readme.index("# From Python") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TUNE_AGENT_"))}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    number, value, params = done.stdout.split(" ", 2)
    assert 1 <= int(number) <= 6 and float(value) > 0 and "learning_rate" in params
    assert (tmp_path / "mlflow").is_dir()  # the embedded store, made where the user ran it


def test_a_tiny_budget_still_gets_bo_steps(store) -> None:
    import agent

    study = agent.create_study(
        "tiny",
        dataset="iris",
        job=JOB,
        trials=5,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        warm_start="none",
        surrogate="gp",
        epochs=1,
    )
    assert study.study.settings.n_init == 2  # half the budget at most, not 5 design points of 5
    study.optimize()
    origins = [t.origin for t in study.trials]
    assert [o.split(":")[0] for o in origins[:2]] == ["init", "init"], origins
    assert all(o.startswith("bo:") for o in origins[2:]), origins
    kept = agent.create_study(
        "kept",
        dataset="iris",
        job=JOB,
        trials=5,
        tracking_uri=store.uri,
        warm_start="none",
        surrogate="gp",
        n_init=4,
        epochs=1,
    )
    assert kept.study.settings.n_init == 4  # an explicit --n-init is the user's


def test_the_readme_registry_snippets_run_as_written_in_an_empty_folder(tmp_path) -> None:
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "registry.md").read_text()
    section = readme[readme.index("# Trained models, kept and registered") :]
    shell = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TUNE_AGENT_"))}
    env["TUNE_AGENT_DAEMON"] = "0"  # fresh processes, none left behind (tests/test_warm_process.py runs one)
    exe = str(Path(sys.executable).with_name("tune-agent"))
    for line in shell.strip().splitlines():
        command = line.split("#")[0].split()
        assert command[0] == ".venv/bin/tune-agent"
        done = subprocess.run([exe, *command[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    header = lines[0].split()  # pandas prints the class columns (0..9, the middle ones elided), then 3 rows
    assert header[0] == "0" and header[-1] == "9" and "[3 rows x 10 columns]" in lines


def test_the_study_description_names_dataset_surrogate_and_best(store, cli) -> None:
    from mlflow import MlflowClient

    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        JOB,
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "described",
        *store.args,
    )
    assert res.code == 0, res.err
    study = store.kb().find_study("described")
    note = MlflowClient(store.uri).get_run(study.study_id).data.tags["mlflow.note.content"]
    assert note.startswith("**Tuning `logistic` on `iris`**: 2 trials of 1 epochs") and "Surrogate: " in note
    assert f"**Best** val_loss {study.best_value:.6g}: lr=" in note and note.count("**Best**") == 1


def test_the_readme_quickstart_runs_as_written_in_an_empty_folder(tmp_path) -> None:
    """README's "Tune a job" command, run as written (its `.venv/bin/tune-agent` is this
    installation's) in an empty folder with no store settings: it finishes, and its output has the
    lines the README's sample shows, in that order."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("## Tune a job") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    command = block.group(1).strip().split()
    sample = re.search(r"```\n(.*?)```", section[block.end() :], re.S).group(1)
    assert command[0] == ".venv/bin/tune-agent" and command[1] == "start"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TUNE_AGENT_"))}
    env["TUNE_AGENT_DAEMON"] = "0"  # a user's first command: a fresh process (it would start a warm process at its end)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tune-agent")), *command[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kinds = (
        "warm start:",
        "surrogate:",
        "starting study",
        "trial 1/",
        "  trial 1 done (1/",
        "study ",
        "process ",
        "report:",
    )
    for kind in kinds:
        assert any(line.startswith(kind) for line in sample.splitlines()), kind  # the sample shows it
    at = [next(i for i, line in enumerate(done.stdout.splitlines()) if line.startswith(kind)) for kind in kinds]
    assert at == sorted(at), done.stdout
    assert (tmp_path / "mlflow" / "mlflow.db").exists()  # the embedded store, made where the user ran it
