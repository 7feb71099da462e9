"""Pruning: the median and ASHA rules, pruned trials as bounds for the sampler, and a real study
whose pruned trials are stored as pruned, count against the budget and are never the best."""

from __future__ import annotations

import numpy as np

from agent.execution.pruning import PruningState, pruner_named, study_curves
from agent.knowledge.records import TRIAL_OK, TRIAL_PRUNED, TrialRecord
from agent.samplers.base import encoded
from agent.space import Float, SearchSpace


def test_asha_rungs_grow_by_eta_and_keep_the_top_third() -> None:
    asha = pruner_named("asha")
    assert asha.rungs(9) == [1, 3]
    assert asha.rungs(30) == [1, 3, 9, 27]
    assert pruner_named("median").rungs(4) == [1, 2, 3]
    assert pruner_named("none").rungs(9) == []
    peers = [0.9, 0.8, 0.7, 0.6, 0.5]  # maximised: higher is better
    assert asha.verdict(1, 0.95, peers) == ""  # the best of six goes on
    assert asha.verdict(1, 0.85, peers) == ""  # six values: the top 6 // 3 = 2 go on, 0.85 is second
    assert "top 1/3" in asha.verdict(1, 0.75, peers)
    assert asha.verdict(1, 0.1, peers[:2]) == ""  # too few peers to judge


def test_median_rule_and_state_on_a_minimised_metric() -> None:
    state = PruningState(
        pruner_named("median"), "val_loss", -1.0, 5, peers={1: [0.5, 0.6, 0.7], 2: [0.4, 0.5, 0.6]}, name="median"
    )
    assert not state.observe(1, 0.55)  # below (better than) the median loss 0.6
    assert state.observe(2, 0.58)  # worse than the median loss 0.5 at epoch 2
    assert state.curve == {1: 0.55, 2: 0.58}
    assert state.reason.startswith("pruned by median at epoch 2: val_loss=0.58")


def test_a_pruned_value_is_a_bound_never_better_than_the_worst_finished_trial() -> None:
    space = SearchSpace([Float("x", 0.0, 1.0)])

    def trial(n: int, state: str, value: float) -> TrialRecord:
        return TrialRecord(str(n), n, state, {"x": n / 10}, value, "bo:logei", extra={"curve_1": value})

    trials = [
        trial(0, TRIAL_OK, 0.30),
        trial(1, TRIAL_OK, 0.50),
        trial(2, TRIAL_PRUNED, 0.20),
        trial(3, TRIAL_PRUNED, 0.90),
    ]
    _, y = encoded(space, trials, (TRIAL_OK, TRIAL_PRUNED), sign=-1.0)  # minimised loss, maximised here
    np.testing.assert_allclose(y, [-0.30, -0.50, -0.50, -0.90])
    assert study_curves(trials) == {1: [0.30, 0.50, 0.20, 0.90]}


def test_an_asha_study_prunes_and_keeps_pruned_trials_out_of_the_best(store, cli) -> None:
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "8",
        "--epochs",
        "3",
        "--pruner",
        "asha",
        "--warm-start",
        "none",
        "--study-name",
        "pruned",
        *store.args,
    )
    assert res.code == 0, res.err
    kb = store.kb()
    study = kb.find_study("pruned")
    trials = kb.trials(study)
    assert sorted(t.number for t in trials) == list(range(8))  # pruned trials use budget slots
    pruned = [t for t in trials if t.state == TRIAL_PRUNED]
    assert pruned, [t.extra for t in trials]
    for t in pruned:
        assert t.reason.startswith("pruned by asha at epoch 1")
        assert t.value is not None and t.extra.get("curve_1") == t.value
        assert "curve_2" not in t.extra  # it stopped after epoch 1
    finished = [t for t in trials if t.state == TRIAL_OK]
    assert all("curve_3" in t.extra for t in finished)
    assert study.best_value == min(t.value for t in finished)
    assert "pruned by asha" in res.out


def test_the_pruning_bench_gives_pruners_the_unpruned_study_s_time() -> None:
    """bench pruning (same-time protocol) on real studies: the unpruned study sets the target and
    the time; ASHA gets that time as a timeout and 3x the trials, and its ratio is measured."""
    from agent.bench.pruning import SAME_TIME_TRIALS, PruningBenchConfig, run_pruning_bench

    config = PruningBenchConfig(job="mlp", dataset="iris", trials=3, epochs=3, pruners=("none", "asha"))
    report = run_pruning_bench(config)
    (seed,) = report["seeds"]
    none, asha = seed["runs"]["none"], seed["runs"]["asha"]
    assert none["trials"] == 3 and seed["target"] == none["best"]
    assert none["ratio_to_none"] == 1.0
    # no trial starts after the unpruned study's wall time: at most one more trial's worth of time
    assert 1 <= asha["trials"] <= 3 * SAME_TIME_TRIALS
    assert asha["timeline"][-1][0] <= none["wall_seconds"] + max(t[0] for t in none["timeline"])
    assert "timeout" in report["protocol"]
    assert report["summary"]["asha"]["reached_target"] in ("0/1", "1/1")


def test_a_pruner_registered_at_run_time_decides_a_trial_as_the_built_ins_do() -> None:
    """A pruner is a registry entry (``rungs`` and ``verdict``): one added at run time is what a study
    with ``pruner`` set to its name uses, and its reason is the trial's."""
    from types import SimpleNamespace

    from agent.execution.pruning import pruning_state
    from agent.registry import PRUNERS

    class BelowHalf:
        def rungs(self, max_epochs: int) -> list[int]:
            return [1]

        def verdict(self, epoch: int, value: float, peers: list[float]) -> str:
            return "below half" if value < 0.5 else ""

    PRUNERS.register("below-half", BelowHalf())
    try:
        settings = SimpleNamespace(pruner="below-half", metric="val_acc", sign=1.0, epochs=3)
        state = pruning_state(settings, lambda: [])
        assert state is not None and not state.observe(1, 0.7)
        state = pruning_state(settings, lambda: [])
        assert state.observe(1, 0.3) and state.reason == "pruned by below-half at epoch 1: val_acc=0.3 below half"
    finally:
        PRUNERS.unregister("below-half")
