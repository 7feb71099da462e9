"""What a user sees: tune-agent inside their own training script (ask/tell context manager and the
Lightning callback, through the README's runnable example), `--json` output, `doctor`, a corrupt
store as one line, and the terminal's live display on a real pseudo-terminal."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.knowledge.records import TRIAL_FAILED, TRIAL_OK, TRIAL_PRUNED


def test_the_own_loop_example_runs_and_leaves_an_ordinary_study(store, cli, capsys) -> None:
    from agent.examples.own_loop import main
    from mlflow import MlflowClient

    main(["--study-name", "mine", "--trials", "6", "--epochs", "8", "--pruner", "median", "--tracking-uri", store.uri])
    out = capsys.readouterr().out
    assert "best val_loss=" in out
    kb = store.kb()
    study = kb.find_study("mine")
    assert study is not None and study.status == "finished"
    trials = kb.trials(study)
    assert sorted(t.number for t in trials) == list(range(6))
    assert all(t.state in (TRIAL_OK, TRIAL_PRUNED) for t in trials)
    assert any(t.origin.startswith("bo:") for t in trials)  # the product's sampler proposed them
    history = MlflowClient(store.uri).get_metric_history(trials[0].trial_id, "val_loss")
    assert len(history) == 8  # the user's Trainer logged every epoch into the trial's run
    best = cli("best", "mine", "--json", "--tracking-uri", store.uri)
    assert best.code == 0 and json.loads(best.out)["trial"] == min(trials, key=lambda t: t.value or 9).number + 1


def test_the_trial_context_manager_records_failures_and_goes_on(store, capsys) -> None:
    from agent.lightning import create_study

    study = create_study(
        "ctx",
        dataset="wine",
        job="agent.jobs.examples:logistic",
        trials=3,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        warm_start="none",
    )
    with study.trial() as t:
        raise RuntimeError("CUDA out of memory\nlong traceback text")
    assert "trial 1 failed: RuntimeError: CUDA out of memory (recorded; the study goes on)" in capsys.readouterr().err
    with study.trial() as t:
        pass  # no value reported
    with study.trial() as t:
        t.value = 0.5
    states = {r.number: (r.state, r.reason, r.value) for r in study.trials}
    assert states[1] == (TRIAL_FAILED, "RuntimeError: CUDA out of memory", None)
    assert states[2][0] == TRIAL_FAILED and "no value" in states[2][1]
    assert states[3][:1] == (TRIAL_OK,) and states[3][2] == 0.5
    assert study.status == "finished" and t.number == 3 and study.best_trial.number == 3


def test_history_and_neighbors_as_json(store, cli) -> None:
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "h",
        *store.args,
    )
    assert res.code == 0, res.err
    hist = cli("history", "--json", "--tracking-uri", store.uri)
    rows = json.loads(hist.out)["studies"]
    assert [r["study"] for r in rows] == ["h"] and rows[0]["trials"] == 2 and rows[0]["best_value"] is not None
    from mlflow import MlflowClient  # the UI's Dataset column and sortable best: an input and metrics on the study run

    run = MlflowClient(store.uri).get_run(store.kb().find_study("h").study_id)
    (given,) = run.inputs.dataset_inputs
    assert given.dataset.name == "iris" and given.dataset.digest == rows[0]["fingerprint"][:36]
    assert run.data.metrics["best_objective"] == rows[0]["best_value"] and "best.lr" in run.data.metrics
    near = cli(
        "neighbors", "--dataset", "wine", "--job", "agent.jobs.examples:logistic", "--json", "--tracking-uri", store.uri
    )
    assert near.code == 0, near.err
    answer = json.loads(near.out)
    assert [n["dataset"] for n in answer["neighbours"]] == ["iris"] and answer["neighbours"][0]["best_config"]


def test_doctor_reports_a_healthy_store_and_a_corrupt_one(store, cli, tmp_path) -> None:
    cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "d",
        *store.args,
    )
    res = cli("doctor", "--json", *store.args)
    assert res.code == 0, res.out
    checks = {c["name"]: c for c in json.loads(res.out)}
    assert checks["store schema"]["status"] == "ok" and checks["store reachable"]["status"] == "ok"
    assert "1 studies" in checks["store reachable"]["detail"]
    assert checks["meta-feature extractor"]["status"] in ("ok", "warn")
    assert "torch" in checks["versions"]["detail"]
    assert checks["trial scratch"]["status"] == "ok"  # the finished study left none
    # checkpoints of a finished study and of one no longer in the store: named for removal
    from agent.tuning.scratch import CHECKPOINT, trial_scratch

    kb = store.kb()
    finished = kb.find_study("d")
    for study_id in (finished.study_id, "gone0123"):
        folder = trial_scratch(kb, study_id, 0)
        folder.mkdir(parents=True)
        (folder / CHECKPOINT).write_bytes(b"x" * 2_000_000)
    res = cli("doctor", "--json", *store.args)
    scratch = {c["name"]: c for c in json.loads(res.out)}["trial scratch"]
    assert res.code == 0 and scratch["status"] == "warn", scratch
    assert "2 folder(s) of studies that will not resume" in scratch["detail"] and "4.0 MB" in scratch["detail"]
    assert "gone0123" in scratch["detail"] and finished.study_id in scratch["detail"]
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    res = cli("doctor", "--tracking-uri", f"sqlite:///{bad}")
    assert res.code == 1 and "fail  store schema" in res.out
    res = cli("history", "--tracking-uri", f"sqlite:///{bad}")  # the product says it in one line
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1 and "cannot be opened" in res.err
    # a Ray cluster nothing answers: a failed check in seconds, not ray.init's minutes of retrying
    res = cli("doctor", "--json", "--ray-address", "127.0.0.1:9", *store.args)
    checks = {c["name"]: c for c in json.loads(res.out)}
    assert res.code == 1 and checks["ray cluster"]["status"] == "fail", res.out
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in checks["ray cluster"]["detail"]


def test_doctor_asks_torch_in_a_child_once_and_again_when_what_decides_changes(tmp_path, monkeypatch) -> None:
    """`doctor`'s thread and CUDA check: torch is imported in a child process (beside the store
    checks), its answer kept in the user cache keyed by what decides it."""
    from agent.ops import doctor

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    first = doctor.TorchProbe()
    assert first.cached is None and first._proc is not None
    answer, how = first.result()
    assert how == "asked torch" and answer is not None and answer["threads"] >= 1 and answer["cuda"] in (True, False)
    assert (tmp_path / "cache" / "tune-agent" / "torch_probe.json").is_file()
    again = doctor.TorchProbe()
    assert again._proc is None and again.result() == (answer, "cached")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch honours it: a new key, torch asked again
    one = doctor.TorchProbe()
    assert one._proc is not None and one.result() == ({**answer, "threads": 1}, "asked torch")
    threads = {c.name: c for c in doctor._environment_checks(doctor.TorchProbe())}["threads"]
    assert threads.status == "ok" and "torch uses 1 intra-op threads" in threads.detail


@pytest.mark.skipif(sys.platform != "linux", reason="needs a pseudo-terminal")
def test_a_terminal_gets_a_status_line_at_once_and_a_live_progress_display(tmp_path: Path) -> None:
    from agent.bench.timed_run import timed_run

    exe = str(Path(sys.executable).with_name("tune-agent"))
    args = [
        exe,
        "start",
        "--dataset",
        "iris",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "2",
        "--epochs",
        "2",
        "--warm-start",
        "none",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'm.db'}",
        "--artifact-root",
        str(tmp_path / "a"),
    ]
    run = timed_run(args, tmp_path, tty=True, marker=b"trial 1/")
    assert run["exit"] == 0, run["tail"]
    assert run["progress_display"], run["tail"]  # rich's live display with its ETA column
    assert run["first_output_s"] is not None and run["first_trial_s"] is not None
    assert run["first_output_s"] < run["first_trial_s"]  # the status line comes before the study's first line


def test_report_of_a_warm_started_study_has_all_five_parts(store, cli, tmp_path) -> None:
    from mlflow import MlflowClient

    job = "agent.jobs.examples:logistic"
    for name, dataset, warm in (
        ("cold", "wine?fraction=0.7", "none"),
        ("other", "iris", "none"),
        ("third", "wine", "none"),
        ("warm", "wine?fraction=0.7", "handcrafted"),
    ):
        res = cli(
            "start",
            "--dataset",
            dataset,
            "--job",
            job,
            "--trials",
            "5",
            "--epochs",
            "1",
            "--warm-start",
            warm,
            "--study-name",
            name,
            *store.args,
        )
        assert res.code == 0, res.err
    assert "report: report/report.html on the study run" in res.out  # written at the end of every study
    out = tmp_path / "rep"
    res = cli("report", "warm", "--out", str(out), "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    assert "nothing it shows has changed since" in res.out  # the study's end made it; copied, not built again
    again = cli("report", "warm", "--out", str(tmp_path / "again"), "--rebuild", "--tracking-uri", store.uri)
    assert again.code == 0 and "(and report/report.html on the study run)" in again.out  # built, as asked
    page = (out / "report.html").read_text()
    for part in (
        "1. Best so far",
        "2. Hyperparameter importance",
        "3. Neighbours that seeded the study",
        "4. The knowledge base",
        "5. Failed, pruned and killed trials",
    ):
        assert part in page
    assert "no map" not in page and "knowledge_map.png" in page and "importance.png" in page
    assert "grey: 1 cold-start study of the same dataset" in page  # the cold reference
    assert "<th>distance</th>" in page  # the neighbours' table
    run_id = store.kb().find_study("warm").study_id
    logged = {a.path for a in MlflowClient(store.uri).list_artifacts(run_id, "report")}
    assert {"report/report.html", "report/best_so_far.png", "report/knowledge_map.png"} <= logged
    assert (
        Path(MlflowClient(store.uri).download_artifacts(run_id, "report/report.html", str(tmp_path))).read_text()
        == page
    )
    # three studies joined the map after "cold" ended: its stored report is out of date and built again
    res = cli("report", "cold", "--out", str(tmp_path / "c1"), "--tracking-uri", store.uri)
    assert res.code == 0 and "(and report/report.html on the study run)" in res.out, res.out + res.err
    assert (
        "4 datasets of job" not in (tmp_path / "c1" / "report.html").read_text()
    )  # 3 fingerprints: wine, its 0.7, iris
    res = cli("report", "cold", "--out", str(tmp_path / "c2"), "--tracking-uri", store.uri)
    assert res.code == 0 and "nothing it shows has changed since" in res.out, res.out + res.err
    assert (tmp_path / "c2" / "report.html").read_text() == (tmp_path / "c1" / "report.html").read_text()


def test_best_register_leaves_a_model_that_loads_and_predicts(store, cli) -> None:
    from sklearn.datasets import load_wine

    import mlflow

    res = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "3",
        "--epochs",
        "3",
        "--warm-start",
        "none",
        "--study-name",
        "reg",
        *store.args,
    )
    assert res.code == 0, res.err
    res = cli("best", "reg", "--register", "wine-model", "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    registered = json.loads(res.out)["registered"]
    assert registered["version"] == "1" and registered["source"] == "kept"  # the trial's own weights
    mlflow.set_tracking_uri(store.uri)
    model = mlflow.pyfunc.load_model("models:/wine-model/1")  # a pyfunc: raw rows in, one column per class out
    frame = load_wine(as_frame=True).frame
    probabilities = model.predict(frame.drop(columns=["target"]))
    assert list(probabilities.columns) == ["class_0", "class_1", "class_2"]
    assert probabilities.shape == (len(frame), 3) and abs(probabilities.to_numpy().sum(1) - 1).max() < 1e-5
    assert (probabilities.to_numpy().argmax(1) == frame["target"]).mean() > 0.8  # the standardisation travels with it
    inputs = model.metadata.get_input_schema().input_names()
    assert inputs[:2] == ["alcohol", "malic_acid"] and len(inputs) == 13
    version = mlflow.MlflowClient(store.uri).get_model_version("wine-model", "1")
    assert version.tags["tune_agent.study"] == "reg" and version.tags["tune_agent.dataset"] == "wine"
    assert "tune_agent.surrogate" in version.tags and "tune_agent.neighbours" in version.tags


def test_a_registered_table_model_encodes_raw_rows_as_the_study_did(store, cli, tmp_path) -> None:
    """A CSV with a text category and gaps: the model takes the table's own columns (text, missing
    values) and encodes them as loading did; registering leaves the trial's run as it was."""
    import numpy as np
    import pandas as pd

    import mlflow

    rng = np.random.default_rng(0)
    n = 240
    colour = rng.choice(["red", "green", "blue"], n)
    size = rng.normal(10, 3, n)
    size[rng.choice(n, 12, replace=False)] = np.nan
    label = np.where((colour == "red") | (np.nan_to_num(size, nan=10) > 12), "yes", "no")
    table = pd.DataFrame({"colour": colour, "size": size, "label": label})
    table.to_csv(tmp_path / "shop.csv", index=False)
    res = cli(
        "start",
        "--dataset",
        str(tmp_path / "shop.csv"),
        "--label",
        "label",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "2",
        "--epochs",
        "20",
        "--warm-start",
        "none",
        "--study-name",
        "shop",
        *store.args,
    )
    assert res.code == 0, res.err
    client = mlflow.MlflowClient(store.uri)
    kb = store.kb()
    best_trial = max(kb.trials(kb.find_study("shop")), key=lambda t: -(t.value or 9))
    before = client.get_run(best_trial.trial_id).info
    res = cli("best", "shop", "--register", "shop-model", "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    after = client.get_run(best_trial.trial_id).info
    assert (after.status, after.end_time) == (before.status, before.end_time)  # the trial run is unchanged
    mlflow.set_tracking_uri(store.uri)
    model = mlflow.pyfunc.load_model("models:/shop-model/1")
    assert model.metadata.get_input_schema().input_names() == ["colour", "size"]
    rows = pd.DataFrame({"colour": ["red", "blue", "green"], "size": [9.0, np.nan, 15.0]})
    out = model.predict(rows)
    assert list(out.columns) == ["no", "yes"] and out.shape == (3, 2)
    assert abs(out.to_numpy().sum(1) - 1).max() < 1e-5
    assert (model.predict(table.drop(columns=["label"])).to_numpy().argmax(1) == (table["label"] == "yes")).mean() > 0.7


def test_a_job_experiment_carries_a_saved_runs_view_and_ui_prints_its_link(store, cli, capsys) -> None:
    """Every study writes its job's saved runs view (the objective and the space's hyperparameters
    as columns), once per space: a second study of the same job leaves the tag as it was; `tune-agent
    ui` prints the link that opens it in the training view (the browser test opens it in Chromium).
    The two studies are started back to back with default names: short enough for the runs table's
    name column, and different although both start within the same second (a timestamp made them
    clash, and the second was refused)."""
    import re

    from agent.cli.store import _job_links
    from agent.knowledge.mlflow.connection import VIEW_TAG
    from mlflow import MlflowClient

    args = (
        "start",
        "--dataset",
        "wine",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        *store.args,
    )
    assert cli(*args).code == 0
    client = MlflowClient(store.uri)
    exp = client.get_experiment_by_name("tune-agent/logistic")
    view = json.loads(exp.tags[VIEW_TAG])
    assert view["name"].startswith("tune-agent")
    columns = json.loads(view["state"])["selectedColumns"]
    assert columns[:3] == ["attributes.`Dataset`", "metrics.`objective`", "metrics.`best_objective`"]
    assert {"params.`lr`", "params.`weight_decay`", "params.`optimizer`", "params.`momentum`"} <= set(columns)
    assert cli(*args).code == 0  # the same space: the view is not written again
    names = [s.name for s in store.kb().list_studies()]
    assert len(set(names)) == 2 and all(re.fullmatch(r"wine-logistic-[a-z2-9]{4}", n) for n in names), names
    assert client.get_experiment_by_name("tune-agent/logistic").tags[VIEW_TAG] == exp.tags[VIEW_TAG]
    capsys.readouterr()
    _job_links(store.kb(), "http://127.0.0.1:5000")
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.endswith(
        f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs?viewStateShareKey=tune-agent"
        "&workflowType=machine_learning"
    )


def test_register_in_a_fresh_process_prints_no_lightning_banner(store, cli) -> None:
    """`best --register` retrains in a process that has not imported Lightning yet (the mlp job's
    module does not): Lightning's device banner and hints stay out of what the user reads."""
    from tests.conftest import run_tune_agent

    res = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "fresh-reg",
        *store.args,
    )
    assert res.code == 0, res.err
    done = run_tune_agent("best", "fresh-reg", "--register", "fresh-model", "--tracking-uri", store.uri)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["registered"]["version"] == "1"
    for banner in ("GPU available", "TPU available", "Tip:", "`Trainer.fit` stopped"):
        assert banner not in done.stderr, done.stderr
