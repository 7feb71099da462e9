"""Several objectives and constraints: `--metric` repeated and `--constraint`, qLogNEHVI steps
over one GP per outcome, the Pareto front of the feasible finished trials on the study run and
in `best`, and bad input refused in one line before anything is written. Real mlp trials on
wine, in a real sqlite MLflow store."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agent.config import StudyRequest, StudySettings, parse_constraint, split_metrics
from agent.errors import TuneAgentError
from agent.knowledge.records import TRIAL_OK, TRIAL_PRUNED, TrialRecord
from agent.samplers.pareto import feasible, front_order, front_summary, hypervolume, non_dominated, pareto_front

BASE = ["--dataset", "wine", "--job", "mlp", "--epochs", "1", "--warm-start", "none"]


def _settings(**kw) -> StudySettings:
    values = dict(
        job="mlp",
        job_name="mlp",
        dataset="wine",
        dataset_name="wine",
        fingerprint="f",
        space_signature="s",
        metric="val_loss",
        mode="min",
        objectives=("n_params:min",),
        constraints=("n_params<=100",),
    )
    values.update(kw)
    return StudySettings(**values)


def _trial(number: int, loss: float, params: float, state: str = TRIAL_OK) -> TrialRecord:
    return TrialRecord(str(number), number, state, {"x": number}, loss, "init", extra={"final_n_params": params})


def test_the_front_holds_the_feasible_finished_trials_no_other_beats() -> None:
    settings = _settings()
    trials = [
        _trial(0, 0.5, 80),  # on the front
        _trial(1, 0.4, 90),  # on the front
        _trial(2, 0.6, 95),  # dominated by trial 0
        _trial(3, 0.1, 500),  # best loss, but breaks n_params<=100
        _trial(4, 0.05, 10, TRIAL_PRUNED),  # pruned: never on the front
    ]
    assert [t.number for t in pareto_front(trials, settings)] == [0, 1]
    assert not feasible(trials[3], settings)
    summary = front_summary(trials, settings)
    assert [p["trial"] for p in summary["pareto"]] == [1, 2]
    assert summary["pareto"][0]["values"] == {"val_loss": 0.5, "n_params": 80.0}
    assert summary["hypervolume"] > 0 and set(summary["reference"]) == {"val_loss", "n_params"}


def test_kept_models_rank_front_by_front() -> None:
    """What --keep-models keeps in a study of several objectives: the Pareto front first (by the
    primary metric), then the front of the rest, then trials that break a bound; never a pruned one."""
    trials = [
        _trial(0, 0.5, 80),  # front
        _trial(1, 0.4, 90),  # front, better primary
        _trial(2, 0.6, 95),  # second front (trial 0 dominates it)
        _trial(3, 0.1, 500),  # best loss, but breaks n_params<=100: after every feasible one
        _trial(4, 0.05, 10, TRIAL_PRUNED),
        _trial(5, 0.7, 99),  # third front
    ]
    assert [t.number for t in front_order(trials, _settings())] == [1, 0, 2, 5, 3]


def test_hypervolume_is_exact_in_two_dimensions_and_agrees_with_botorch_in_three() -> None:
    points = np.array([[3.0, 1.0], [2.0, 2.0], [1.0, 3.0]])
    assert hypervolume(points, np.zeros(2)) == pytest.approx(6.0)  # 3x1 + 2x1 + 1x1
    assert non_dominated(np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 0.0]])).tolist() == [False, True, True]
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    rng = np.random.default_rng(0)
    cloud = rng.random((12, 3))
    front = cloud[non_dominated(cloud)]
    expected = Hypervolume(torch.zeros(3, dtype=torch.double)).compute(torch.as_tensor(front))
    assert hypervolume(front, np.zeros(3)) == pytest.approx(float(expected))


def test_metrics_and_constraints_are_parsed_and_bad_ones_refused_in_one_line() -> None:
    assert split_metrics(["val_loss:min", "n_params:min"]) == {
        "metric": "val_loss",
        "mode": "min",
        "objectives": ("n_params:min",),
    }
    assert split_metrics(["val_acc"], "max") == {"metric": "val_acc", "mode": "max", "objectives": ()}
    assert parse_constraint(" n_params <= 2e4 ") == ("n_params", "<=", 20000.0)
    for bad, match in [
        (dict(metrics=["val_loss:min", "val_loss:max"]), "given twice"),
        (dict(metrics=["val_loss", "n_params"]), "says its direction"),
        (dict(metrics=["val_loss:up"]), "NAME:min or NAME:max"),
        (dict(metrics=["val_loss"], constraints=["n_params < 5"]), "NAME<=VALUE"),
        (dict(metrics=["val_loss"], constraints=["n_params<=big"]), "NAME<=VALUE"),
        (dict(metrics=["val_loss:min", "n_params:min"], sampler="hts"), "takes one metric"),
        (dict(metrics=["val_loss"], constraints=["n_params<=9"], sampler="tpe"), "several metrics but no constraint"),
    ]:
        with pytest.raises(TuneAgentError, match=match):
            StudyRequest.from_options(dataset="wine", job="mlp", **bad)


def test_a_trial_missing_an_objective_fails_with_that_reason() -> None:
    from agent.execution.trial import _fit_outcome

    outcome = _fit_outcome("val_loss", {"val_loss": 0.3}, 1.0, "", None, ["n_params"])
    assert outcome.value is None and "'n_params'" in outcome.reason and "objective or constraint" in outcome.reason
    ok = _fit_outcome("val_loss", {"val_loss": 0.3, "n_params": 10.0}, 1.0, "", None, ["n_params"])
    assert ok.value == 0.3 and not ok.reason


def test_bad_metrics_are_refused_before_anything_is_written(cli, store) -> None:
    for args, line in [
        (["--metric", "val_loss:min", "--metric", "no_such:min"], "--metric no_such: job mlp logs"),
        (["--metric", "val_loss:min", "--constraint", "n_params=<5"], "--constraint 'n_params=<5'"),
        (["--metric", "n_params:min", "--metric", "n_params:max"], "--metric n_params is given twice"),
    ]:
        res = cli("start", *BASE, "--trials", "3", *args, "--study-name", "refused", *store.args)
        assert res.code == 2, res.err
        assert len(res.err.strip().splitlines()) == 1 and line in res.err, res.err
    assert store.kb().find_study("refused") is None


def test_a_study_of_two_metrics_and_a_constraint_ends_with_a_feasible_front(cli, store) -> None:
    """The brief's command: loss against size under a size bound; `best` prints the front."""
    res = cli(
        "start",
        *BASE,
        "--trials",
        "7",
        "--n-init",
        "4",
        "--metric",
        "val_loss:min",
        "--metric",
        "n_params:min",
        "--constraint",
        "n_params<=20000",
        "--study-name",
        "mo",
        *store.args,
    )
    assert res.code == 0, res.err
    assert "several metrics: qLogNEHVI over one GP per outcome" in res.out
    assert "[bo:qlognehvi]" in res.out and "Pareto front" in res.out
    best = cli("best", "mo", "--tracking-uri", store.uri)
    assert best.code == 0, best.err
    out = json.loads(best.out)
    front = out["pareto"]
    assert front and out["metrics"] == ["val_loss:min", "n_params:min"] and out["hypervolume"] > 0
    for p in front:
        assert p["values"]["n_params"] <= 20000 and math.isfinite(p["values"]["val_loss"])
    for a in front:  # mutually non-dominated
        for b in front:
            if a is not b:
                assert not (
                    b["values"]["val_loss"] <= a["values"]["val_loss"]
                    and b["values"]["n_params"] <= a["values"]["n_params"]
                    and b["values"] != a["values"]
                )
    kb = store.kb()
    record = kb.find_study("mo")
    tags = kb.study_tags(record)
    assert tags["pareto_trials"] == ",".join(str(p["trial"]) for p in front)
    trials = kb.trials(record)
    assert all("final_n_params" in t.extra and "final_fit_seconds" in t.extra for t in trials if t.state == TRIAL_OK)
    from agent.api import load_study

    assert [t.number for t in load_study("mo", tracking_uri=store.uri).best_trials] == [p["trial"] for p in front]
    # the models kept (the default 3) are the front's first: all of it, or only front members
    kept = {int(n) - 1 for n in tags["kept_models"].split(",")}
    on_front = {p["trial"] - 1 for p in front}  # `best` numbers trials from 1
    assert len(kept) == 3 and (kept <= on_front if len(on_front) >= 3 else on_front <= kept), (kept, on_front)
    refused = cli("best", "mo", "--register", "m", "--tracking-uri", store.uri)
    assert refused.code == 2 and "--register needs --trial N" in refused.err
    # a later study of the same metrics starts from both ends of that study's front (its neighbour)
    later = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--epochs",
        "1",
        "--trials",
        "2",
        "--warm-start",
        "handcrafted",
        "--k",
        "1",
        "--metric",
        "val_loss:min",
        "--metric",
        "n_params:min",
        "--constraint",
        "n_params<=20000",
        "--study-name",
        "later",
        *store.args,
    )
    assert later.code == 0, later.err
    seeds = [t for t in kb.trials(kb.find_study("later")) if t.origin.startswith("warm:handcrafted:")]
    by_loss = min(front, key=lambda p: p["values"]["val_loss"])["config"]
    by_size = min(front, key=lambda p: p["values"]["n_params"])["config"]
    assert [dict(t.config) for t in sorted(seeds, key=lambda t: t.number)] == (
        [by_loss, by_size] if by_loss != by_size else [by_loss]
    )
    out_dir = store.root / "report"
    report = cli("report", "mo", "--out", str(out_dir), "--tracking-uri", store.uri)
    assert report.code == 0, report.err
    page = (out_dir / "report.html").read_text()
    assert "<h2>Pareto front</h2>" in page and (out_dir / "pareto_front.png").stat().st_size > 0


def test_a_config_file_names_several_metrics_and_constraints(cli, store, tmp_path) -> None:
    """`--config` keys are the options as written on the command line; a repeatable option takes a
    list (or one value)."""
    config = tmp_path / "study.yaml"
    config.write_text('metric: [val_loss:min, "fit_seconds:min"]\nconstraint: "n_params<=50000"\ntrials: 4\n')
    res = cli("create", *BASE, "--config", str(config), "--study-name", "from-file", *store.args)
    assert res.code == 0, res.err
    settings = store.kb().find_study("from-file").settings
    assert settings["metric"] == "val_loss" and settings["mode"] == "min"
    assert settings["objectives"] == ["fit_seconds:min"] and settings["constraints"] == ["n_params<=50000"]


def test_ask_and_tell_with_several_metrics_resumes_into_qlognehvi_steps(store) -> None:
    """A user's own loop tells each metric by name (``trial.metrics``); a study loaded in a fresh
    handle (as `resume` does) goes on with the same sampler, and the front honours the bound."""
    from agent.api import create_study, load_study

    study = create_study(
        "own-mo",
        dataset="wine",
        job="mlp",
        trials=6,
        tracking_uri=store.uri,
        warm_start="none",
        n_init=3,
        metrics=["val_loss:min", "val_acc:max"],
        constraints=["val_acc<=0.9"],
    )

    def run(handle) -> None:
        trial = handle.ask()
        units = float(trial.params["max_units"])
        trial.metrics["val_acc"] = units / 1000.0  # a made-up trade: wider is more accurate, and worse in loss
        handle.tell(trial, value=units / 1000.0 + trial.params["learning_rate"])

    for _ in range(4):
        run(study)
    again = load_study("own-mo", tracking_uri=store.uri)
    for _ in range(2):
        run(again)
    origins = [t.origin for t in again.trials]
    assert origins[:3] == ["init:sobol"] * 3 and "bo:qlognehvi" in origins[3:], origins
    front = again.best_trials
    assert front and all(t.metrics["val_acc"] <= 0.9 for t in front)
    assert again.directions == ["minimize", "maximize"]


def test_the_multi_objective_benchmark_runs_product_studies_and_scores_their_fronts() -> None:
    """`bench lcbench-mo`'s runner on the committed toy YAHPO scenario: each method a product study
    of the scenario's two outputs, its hypervolume regret against a random sample's front."""
    from pathlib import Path

    from agent.bench.multi_objective import MoConfig, run_mo_benchmark

    toy = Path(__file__).resolve().parent / "bench" / "fixtures" / "yahpo_toy"
    config = MoConfig(
        str(toy),
        ("t1",),
        seeds=1,
        budget=8,
        checkpoints=(4, 8),
        methods=("bo", "tpe", "random"),
        reference_configs=200,
        metrics=("score:max", "cost:min"),
    )
    lines: list[str] = []
    report = run_mo_benchmark(config, progress=lines.append)
    assert len(report["runs"]) == 3 and len(lines) == 3
    for method in ("bo", "tpe", "random"):
        regret = report["summary"][method]["regret"]
        assert set(regret) == {"4", "8"} and regret["8"] <= regret["4"] + 1e-12  # a front only grows
        assert regret["8"] < 1.0
    assert "--metric score:max --metric cost:min" in report["protocol"] and report["engine"]


def test_the_benchmark_command_refuses_unknown_methods_in_one_line(cli) -> None:
    res = cli("bench", "lcbench-mo", "--methods", "bo,nsga9")
    assert res.code == 2 and "--methods takes names from bo, tpe, random" in res.err


def test_trials_in_flight_enter_the_qlognehvi_step_as_pending_points() -> None:
    """Two trials at a time (the queued executor a benchmark job runs on): each step conditions on
    the running trial, so a batch never holds the same configuration twice."""
    from pathlib import Path

    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.knowledge import open_knowledge_base
    from agent.tuning.service import prepare_study

    toy = Path(__file__).resolve().parent / "bench" / "fixtures" / "yahpo_toy"
    req = StudyRequest.from_options(
        dataset="t1",
        job=f"yahpo:{toy}",
        trials=8,
        n_init=3,
        warm_start="none",
        surrogate="gp",
        random_every=0,
        metrics=["score:max", "cost:min"],
        study_name="batched-mo",
    )
    study, job, data, _ = prepare_study(req, echo=lambda _: None, kb=open_knowledge_base("memory:"))
    executor = make_executor(study, job, data, None, ExecutionSettings(workers=2, ask_ahead=0))
    assert "X_pending" in study.sampler.pending_note()
    run_study(study, job, data, None, SilentReporter(), trace_plot=False, executor=executor)
    trials = sorted(study.trials(), key=lambda t: t.number)
    assert [t.state for t in trials] == ["ok"] * 8
    assert [t.origin for t in trials].count("bo:qlognehvi") == 5
    configs = [tuple(sorted(t.config.items())) for t in trials]
    assert len(set(configs)) == len(configs)
    assert all("final_cost" in t.extra for t in trials)


def test_the_reference_point_ignores_trials_that_break_a_bound() -> None:
    settings = _settings()
    trials = [_trial(0, 0.5, 80), _trial(1, 0.4, 90), _trial(2, 0.1, 500_000)]
    summary = front_summary(trials, settings)
    assert summary["reference"]["n_params"] < 100  # from the feasible trials, not the 500,000 one
    assert summary["reference"]["val_loss"] == pytest.approx(0.51)  # the worst feasible, less 10 % of the range
