"""--cpus-per-trial / --gpus-per-trial: what a trial trains with, checked before anything starts.

The Ray side (a task reserving the CPUs and training on as many threads) runs in
``test_parallel.py``'s local Ray study; a GPU is not on this machine, so its checks here are the
refusal and the accelerator reaching Lightning (on a machine with a GPU the same test trains on it).
"""

from __future__ import annotations

import pytest

from agent.execution.resources import ExecutionSettings, TrialResources, fit_note, problem, trial_slots


def _node(cpus: float, gpus: float = 0.0, alive: bool = True) -> dict:
    """A node as ``ray.nodes()`` lists it (the fields read here)."""
    resources = {"CPU": cpus, "memory": 1e9, "node:127.0.0.1": 1.0}
    if gpus:
        resources["GPU"] = gpus
    return {"Alive": alive, "Resources": resources, "NodeID": "x"}


def test_trials_fit_per_node_not_over_the_cluster_total() -> None:
    two_cpus = TrialResources(cpus=2)
    # 3 + 3 CPUs hold two 2-CPU trials (one per node), not three: a trial's CPUs come from one node
    assert trial_slots([_node(3), _node(3)], two_cpus) == 2
    assert trial_slots([_node(3), _node(3, alive=False)], two_cpus) == 1
    assert trial_slots([_node(1)], two_cpus) == 0
    quarter = TrialResources(cpus=1, gpus=0.25)
    assert trial_slots([_node(16, gpus=1)], quarter) == 4
    assert trial_slots([_node(2, gpus=1)], quarter) == 2  # the CPUs bind first
    assert trial_slots([_node(16)], quarter) == 0
    assert trial_slots([_node(16, gpus=1)], TrialResources(gpus=0.1)) == 10  # 1 / 0.1 is 10, not 9.999...


def test_what_the_user_is_told_when_the_workers_do_not_fit() -> None:
    gpu = TrialResources(cpus=2, gpus=1)
    assert fit_note(4, 4, gpu, "the Ray cluster at h:1") is None
    fewer = fit_note(1, 4, gpu, "the Ray cluster at h:1")
    assert (
        fewer == "the Ray cluster at h:1 fits 1 trial(s) of 2 CPUs and 1 GPU a trial at once: 3 of the 4 workers wait"
    )
    none = fit_note(0, 2, gpu, "the Ray cluster at h:1")
    assert none.startswith("no node of the Ray cluster at h:1 has 2 CPUs and 1 GPU a trial") and "resume" in none


@pytest.mark.parametrize(
    ("resources", "on_ray", "option", "words"),
    [
        (TrialResources(cpus=0), True, "--cpus-per-trial", "at least 1"),
        (TrialResources(gpus=2), True, "--gpus-per-trial", "one device"),
        (TrialResources(gpus=-0.5), False, "--gpus-per-trial", "between 0 and 1"),
        (TrialResources(cpus=2), False, "--cpus-per-trial", "--torch-threads"),
        (TrialResources(torch_threads=2), True, "--torch-threads", "--cpus-per-trial"),
        (TrialResources(torch_threads=0), False, "--torch-threads", "at least 1"),
    ],
)
def test_settings_no_trial_can_run_with_are_named(
    resources: TrialResources, on_ray: bool, option: str, words: str
) -> None:
    found = problem(resources, on_ray)
    assert found is not None and found[0] == option and words in found[1]


def test_good_settings_pass() -> None:
    assert problem(TrialResources(cpus=4, gpus=0.5), on_ray=True) is None
    assert problem(TrialResources(gpus=1, torch_threads=2), on_ray=False) is None


@pytest.mark.parametrize(
    "args",
    [
        ["--gpus-per-trial", "2"],
        ["--cpus-per-trial", "0", "--workers", "2"],
        ["--cpus-per-trial", "2"],
        ["--ray-working-dir", "/no/such/folder", "--workers", "2"],
        ["--ray-working-dir", "."],  # no Ray: nothing to ship to
    ],
)
def test_bad_resources_are_one_line_and_write_nothing(store, cli, args: list[str]) -> None:
    result = cli("start", "--dataset", "wine", "--job", "mlp", "--trials", "2", *args, *store.args)
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and args[0] in result.err
    assert not (store.root / "mlflow.db").exists()


def test_a_gpu_trial_on_a_machine_without_one_is_refused_before_the_store_opens(store, cli) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for one without")
    result = cli("start", "--dataset", "wine", "--job", "mlp", "--trials", "2", "--gpus-per-trial", "1", *store.args)
    assert result.code == 2
    assert len(result.err.strip().splitlines()) == 1
    assert "--gpus-per-trial" in result.err and "no GPU torch can use" in result.err
    assert not (store.root / "mlflow.db").exists()


def test_the_gpu_setting_reaches_lightning(store) -> None:
    """A trial with a GPU share trains with Lightning's ``gpu`` accelerator: here, without a GPU,
    Lightning refuses it and the trial is failed with that reason (the command line would have
    refused the option first); on a machine with a GPU it trains there."""
    import torch

    from agent.config import StudyRequest
    from agent.errors import StudyFailedError
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.execution.workers import InlineExecutor, make_executor
    from agent.knowledge.records import TRIAL_FAILED, TRIAL_OK
    from agent.tuning.service import prepare_study

    req = StudyRequest(
        dataset="iris",
        job="agent.jobs.examples:logistic",
        trials=1,
        epochs=1,
        seed=0,
        study_name="gpu",
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    study, job, data, split = prepare_study(req, echo=lambda _: None)
    executor = make_executor(study, job, data, split, ExecutionSettings(resources=TrialResources(gpus=1)))
    assert isinstance(executor, InlineExecutor) and executor.resources.accelerator == "gpu"
    if torch.cuda.is_available():
        run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
        assert [t.state for t in study.trials()] == [TRIAL_OK]
        return
    with pytest.raises(StudyFailedError, match="No supported gpu backend"):  # its one trial failed
        run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
    (trial,) = study.trials()
    assert trial.state == TRIAL_FAILED and "gpu backend" in trial.reason, trial.reason
