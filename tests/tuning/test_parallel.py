"""Parallel trials: running trials are pending points of the BO step, N trials stay in flight,
and on a real two-node Ray cluster a worker killed mid-trial costs a retry, never a trial; Ray's
start is begun before the study is prepared (agent.execution.ray_start). Every test that starts Ray
is in this file, so that a parallel test run (pytest-xdist, --dist loadfile) runs them one at a
time: the cluster fixture's `ray stop --force` stops every Ray instance on the machine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from agent.config import StudySettings
from agent.samplers.bo import BoSampler
from agent.space import Float, SearchSpace
from agent.surrogates.contract import SurrogateInputs
from agent.surrogates.specs import GpSurrogate

TOY = Path(__file__).resolve().parents[1] / "bench" / "fixtures" / "yahpo_toy"
REPO = Path(__file__).resolve().parents[2]
RAY_ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}


def _sampler(space: SearchSpace, surrogate: GpSurrogate | None = None, pending: str = "auto") -> BoSampler:
    settings = StudySettings(
        job="j",
        job_name="j",
        dataset="d",
        dataset_name="d",
        fingerprint="f",
        space_signature=space.signature(),
        metric="m",
        mode="max",
        trials=20,
        n_init=1,
        random_every=0,
        seed=0,
        pending=pending,
    )
    return BoSampler(space, settings, surrogate or GpSurrogate(SurrogateInputs(space, seed=0)))


def _bowl() -> tuple[SearchSpace, np.ndarray, np.ndarray]:
    space = SearchSpace([Float("a", 0.0, 1.0), Float("b", 0.0, 1.0)])
    U = np.random.default_rng(1).random((8, 2))
    y = -((U - 0.6) ** 2).sum(axis=1)
    return space, U, y


def test_a_running_trial_pushes_the_next_proposal_away() -> None:
    """The same BO step with the sequential proposal pending proposes somewhere else (qLogEI over
    X_pending); nothing else differs, so ignoring pending points would give the same point again."""
    space, U, y = _bowl()
    sampler = _sampler(space)
    first, origin = sampler.propose(U, y, U, 1, 7, np.random.default_rng(7))
    again, _ = _sampler(space).propose(U, y, U, 1, 7, np.random.default_rng(7))
    np.testing.assert_allclose(first, again)  # deterministic without pending points
    second, origin2 = _sampler(space).propose(U, y, U, 1, 7, np.random.default_rng(7), pending=first[None, :])
    assert origin == origin2 == "bo:logei"
    assert np.linalg.norm(second - first) > 0.05


def test_a_liar_surrogate_sees_running_trials_as_worst_observations() -> None:
    space, U, y = _bowl()
    seen: list[tuple[int, float]] = []

    class Recording(GpSurrogate):
        pending = "liar"

        def step_model(self, train_X, train_Y, state):
            seen.append((len(train_X), float(train_Y[-1])))
            return super().step_model(train_X, train_Y, state)

    sampler = _sampler(space, Recording(SurrogateInputs(space, seed=0)))
    pending = np.array([[0.6, 0.6], [0.1, 0.9]])
    sampler.propose(U, y, np.vstack([U, pending]), 1, 3, np.random.default_rng(3), pending=pending)
    n, last = seen[0]
    assert n == len(U) + len(pending)
    from agent.surrogates.gp import normal_scores

    assert last == pytest.approx(float(normal_scores(y).min()))


def test_the_believer_keeps_the_mean_and_shrinks_the_variance_at_running_points() -> None:
    """Kriging believer (``--pending believer``): the model conditioned on its own mean at a running
    point predicts the same mean there with far less variance, its hyperparameters untouched."""
    import torch

    from agent.samplers.acquisition import believed
    from agent.surrogates.gp import fit_gp

    space, U, y = _bowl()
    model = fit_gp(torch.as_tensor(U), torch.as_tensor(y).reshape(-1, 1))
    P = torch.tensor([[0.6, 0.6], [0.1, 0.9]], dtype=torch.double)
    belief = believed(model, P)
    with torch.no_grad():
        before, after = model.posterior(P), belief.posterior(P)
    torch.testing.assert_close(after.mean, before.mean)
    assert (after.variance < 0.2 * before.variance).all()
    torch.testing.assert_close(belief.covar_module.lengthscale, model.covar_module.lengthscale)


def test_a_believer_step_pushes_the_next_proposal_away() -> None:
    space, U, y = _bowl()
    first, _ = _sampler(space).propose(U, y, U, 1, 7, np.random.default_rng(7))
    second, origin = _sampler(space, pending="believer").propose(
        U, y, U, 1, 7, np.random.default_rng(7), pending=first[None, :]
    )
    assert origin == "bo:logei"
    assert np.linalg.norm(second - first) > 0.05


def test_a_model_botorch_cannot_condition_is_refitted_on_its_belief() -> None:
    """RGPE's ensemble has no ``condition_on_observations``: the believer joins the running points
    to the data at the first model's mean and builds the model again."""
    import torch

    space, U, y = _bowl()
    seen: list[tuple[int, np.ndarray]] = []
    first_mean: list[np.ndarray] = []
    pending = np.array([[0.6, 0.6], [0.1, 0.9]])

    class Unconditionable(GpSurrogate):
        def step_model(self, train_X, train_Y, state):
            seen.append((len(train_X), train_Y[len(U) :].numpy().reshape(-1)))
            step = super().step_model(train_X, train_Y, state)

            def refuse(*_: object, **__: object) -> None:
                raise NotImplementedError("no conditioning")

            object.__setattr__(step.model, "condition_on_observations", refuse)
            if not first_mean:
                with torch.no_grad():
                    first_mean.append(step.model.posterior(torch.as_tensor(pending)).mean.numpy().reshape(-1))
            return step

    sampler = _sampler(space, Unconditionable(SurrogateInputs(space, seed=0)), pending="believer")
    sampler.propose(U, y, np.vstack([U, pending]), 1, 3, np.random.default_rng(3), pending=pending)
    assert [n for n, _ in seen] == [len(U), len(U) + len(pending)]
    np.testing.assert_allclose(seen[1][1], first_mean[0])


@pytest.mark.parametrize(
    ("setting", "declared", "used"),
    [
        ("auto", "joint", "joint"),
        ("auto", "liar", "liar"),
        ("believer", "joint", "believer"),
        ("liar", "joint", "liar"),
        ("joint", "liar", "liar"),
        ("believer", "liar", "believer"),
    ],
)
def test_the_pending_setting_applies_where_the_posterior_allows(setting: str, declared: str, used: str) -> None:
    from agent.samplers.bo import pending_strategy

    space, _, _ = _bowl()
    surrogate = GpSurrogate(SurrogateInputs(space, seed=0))
    surrogate.pending = declared
    assert pending_strategy(setting, surrogate) == used


def test_an_unknown_pending_setting_is_refused() -> None:
    from agent.config import StudyRequest
    from agent.errors import TuneAgentError

    with pytest.raises(TuneAgentError, match="--pending must be one of auto, joint, believer, liar"):
        StudyRequest(dataset="d", job="mlp", trials=2, pending="fantasy")


@pytest.mark.parametrize("pending", ["auto", "believer", "liar"])
def test_queued_workers_fill_every_slot_once(store, pending: str) -> None:
    """Four trials in flight on the toy benchmark job: every slot told once, none left running,
    whichever way the running trials enter the BO step."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import QueuedExecutor, make_executor
    from agent.knowledge.records import TRIAL_OK
    from agent.tuning.service import prepare_study

    req = StudyRequest(
        dataset="t1",
        job=f"yahpo:{TOY}",
        trials=12,
        seed=0,
        study_name="queued",
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        pending=pending,
    )
    study, job, data, _ = prepare_study(req, echo=lambda _: None)
    executor = make_executor(study, job, data, None, ExecutionSettings(workers=4))
    assert isinstance(executor, QueuedExecutor) and executor.capacity == 4
    timing = run_study(study, job, data, None, SilentReporter(), trace_plot=False, executor=executor)
    trials = study.trials()
    assert sorted(t.number for t in trials) == list(range(12))
    assert all(t.state == TRIAL_OK for t in trials)
    assert len(timing.ask_seconds) == 12
    keys = {json.dumps(t.config, sort_keys=True) for t in trials}
    assert len(keys) == 12  # no two workers were given the same configuration


def test_the_study_loop_keeps_the_trial_list_the_store_holds(store) -> None:
    """The loop keeps the study's trials itself instead of reading them back after every ask and
    tell: after each tell its list is the store's, order included, with a killed earlier run of a
    slot (a resumed study) before that slot's re-run."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.knowledge.records import TRIAL_KILLED
    from agent.tuning.service import prepare_study

    req = StudyRequest(
        dataset="t1",
        job=f"yahpo:{TOY}",
        trials=8,
        seed=0,
        study_name="kept",
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    study, job, data, _ = prepare_study(req, echo=lambda _: None)
    study.tell(study.ask(), state=TRIAL_KILLED, failed="killed before the loop")  # slot 0 runs again
    seen: list[tuple[list[object], list[object]]] = []

    class Comparing(SilentReporter):
        def trial_finished(self, trial, best, trials) -> None:
            seen.append((list(trials), study.trials()))

    run_study(
        study,
        job,
        data,
        None,
        Comparing(),
        trace_plot=False,
        executor=make_executor(study, job, data, None, ExecutionSettings(workers=3)),
    )
    assert len(seen) == 8
    for kept, stored in seen:
        assert kept == stored
    assert [t.number for t in seen[-1][1]][:2] == [0, 0] and seen[-1][1][0].state == TRIAL_KILLED


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path: Path):
    """A real Ray cluster on 127.0.0.1: a head and one worker node (one CPU each), torn down after."""
    ray = Path(sys.executable).parent / "ray"
    if not ray.exists():
        pytest.skip("the ray command line is not installed beside this python")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "PYTHONPATH": str(REPO),
        "RAY_USAGE_STATS_ENABLED": "0",
        "CRASH_MARKER": str(tmp_path / "crashed"),
    }
    port = _free_port()
    common = ["--num-cpus", "1", "--disable-usage-stats"]
    try:
        subprocess.run(
            [str(ray), "start", "--head", "--port", str(port), "--include-dashboard=false", *common],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [str(ray), "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--disable-usage-stats"],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield f"127.0.0.1:{port}", env
    finally:
        _kill_cluster(port)  # this cluster's processes only: any other Ray on the machine is left alone


def _cluster_pids(port: int) -> list[int]:
    """The processes of the Ray cluster whose GCS listens on ``port`` (its GCS server, raylets and
    the agents beside them name that port on their command lines)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f":{port}" in cmdline or f"port={port}" in cmdline or f"port {port}" in cmdline:
            if "ray" in cmdline or "gcs_server" in cmdline or "raylet" in cmdline:
                pids.append(int(entry.name))
    return pids


def _kill_cluster(port: int, names: tuple[str, ...] = ()) -> None:
    """SIGKILL to this cluster's processes (those whose command line names one of ``names``, when
    given); with no ``names`` the cluster is gone, and so is the address file Ray leaves for the
    next ``ray.init()`` (which would try to join it) when it names this cluster."""
    for pid in _cluster_pids(port):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if not names or any(n in cmdline for n in names):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
    if not names:
        current = Path(os.environ.get("RAY_TMPDIR", "/tmp/ray")) / "ray_current_cluster"
        try:
            if f":{port}" in current.read_text():
                current.unlink()
        except OSError:
            pass


@pytest.mark.timeout(
    1200
)  # its studies' own limit is 900 s: at load 5 on 2 cores (two busy loops beside the suite) it took over 480 s
def test_a_study_on_a_ray_cluster_survives_a_killed_worker(ray_cluster, store, tmp_path: Path) -> None:
    """Two trials at a time on a head and a worker node. The job's module is not on the nodes: the
    study stops in one line that names --ray-working-dir, and resumes with it. Then the first
    trial's worker SIGKILLs itself: it runs again on a fresh worker, and the study ends with every
    trial logged exactly once."""
    from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK

    address, env = ray_cluster
    # the job's module is in a folder of this machine only: the nodes cannot unpickle the job
    jobs = tmp_path / "myjobs"
    jobs.mkdir()
    shutil.copy(REPO / "tests" / "tuning" / "crash_job.py", jobs / "crash_job.py")

    def doctor(*args: str) -> dict:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent.cli",
                "doctor",
                "--json",
                "--ray-address",
                address,
                "--job",
                "crash_job:job",
                *args,
                *store.args,
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=480,
        )
        return {c["name"]: c for c in json.loads(run.stdout)}

    # what a user checks first: both nodes up, each has what a trial needs, but not the job's module
    checks = doctor("--cpus-per-trial", "2")
    assert checks["ray cluster"]["status"] == "ok", checks
    assert "2 node(s) alive, 2 CPUs" in checks["ray cluster"]["detail"]
    assert checks["ray nodes"]["status"] == "ok" and "installed on 2 of 2 node(s)" in checks["ray nodes"]["detail"]
    assert (
        checks["ray trials at once"]["status"] == "warn"
        and "no node has 2 CPUs" in checks["ray trials at once"]["detail"]
    )
    code = checks["ray job code"]
    assert (
        code["status"] == "fail"
        and "'crash_job' not found on 2 of 2" in code["detail"]
        and "--ray-working-dir" in code["detail"]
    )
    checks = doctor("--ray-working-dir", str(jobs))  # shipped as `start` would: found, and 2 one-CPU trials fit
    assert checks["ray job code"]["status"] == "ok" and checks["ray trials at once"]["detail"].startswith("2 trial(s)")
    common = [
        "--dataset",
        "iris",
        "--job",
        "crash_job:job",
        "--trials",
        "5",
        "--epochs",
        "2",
        "--workers",
        "2",
        "--ray-address",
        address,
        "--warm-start",
        "none",
        "--study-name",
        "on-ray",
        *store.args,
    ]
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(jobs)!r}); from agent.cli import main; main(sys.argv[1:])",
            "start",
            *common,
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    (line,) = run.stderr.strip().splitlines()
    assert (
        "no module named 'crash_job'" in line and "--ray-working-dir DIR" in line and "tune-agent resume on-ray" in line
    )
    assert not Path(env["CRASH_MARKER"]).exists()  # no trial ran
    # shipped with --ray-working-dir (Ray's runtime_env), the same study resumes and finishes
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "resume",
            "on-ray",
            "--workers",
            "2",
            "--ray-address",
            address,
            "--ray-working-dir",
            str(jobs),
            *store.args,
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "running 2 trial(s) at once on the Ray cluster at" in run.stdout
    assert "running trials enter each BO step as pending points of the acquisition" in run.stdout
    assert Path(env["CRASH_MARKER"]).exists()  # a worker really died
    kb = store.kb()
    study = kb.find_study("on-ray")
    trials = [t for t in kb.trials(study) if t.state != TRIAL_KILLED]  # the slots the first try left are re-run
    assert sorted(t.number for t in trials) == list(range(5))
    assert all(t.state == TRIAL_OK for t in trials)
    assert sum(t.extra.get("worker_retries", 0) == 1 for t in trials) == 1
    # what the worker logged per epoch reached the trial's run through the driver
    import mlflow

    client = mlflow.MlflowClient(store.uri)
    history = client.get_metric_history(trials[0].trial_id, "val_loss")
    assert len(history) == 2


@pytest.mark.timeout(1200)  # Ray's start and two workers' imports on a busy machine
def test_trials_with_a_gpu_share_train_on_the_same_long_lived_workers(store) -> None:
    """Six trials, two at a time, each reserving a quarter of a GPU: they train in two worker
    processes, each keeping torch, Lightning, the job and the data from one trial to the next. Ray
    runs a *task* that reserves a GPU in a fresh process every time (its ``max_calls=1`` default
    for GPU tasks), which made every GPU trial import torch and Lightning and create a CUDA context
    again. Ray is told of a GPU that the trials leave alone (this machine may have none)."""
    import ray

    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings, TrialResources
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.knowledge.records import TRIAL_OK
    from agent.tuning.service import prepare_study

    class ShareOnCpu(TrialResources):
        @property
        def accelerator(self) -> str:  # reserve the share, train on the CPU
            return "cpu"

    req = StudyRequest(
        dataset="iris",
        job="mlp",
        trials=6,
        epochs=1,
        seed=0,
        study_name="gpu-share",
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        study, job, data, split = prepare_study(req, echo=lambda _: None)
        executor = make_executor(study, job, data, split, ExecutionSettings(workers=2, resources=ShareOnCpu(1, 0.25)))
        assert executor.per_trial == "1 CPU and 0.25 GPU"
        run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
        pids = list(executor.pids)
    finally:
        ray.shutdown()
    trials = study.trials()
    assert sorted(t.number for t in trials) == list(range(6)) and all(t.state == TRIAL_OK for t in trials)
    assert len(pids) == 6 and len(set(pids)) == 2, pids
    assert os.getpid() not in pids


@pytest.mark.timeout(1200)  # a Ray cluster on a busy machine: see above
def test_trials_that_fit_no_node_wait_for_one_that_joins(ray_cluster, store) -> None:
    """--cpus-per-trial 2 on a cluster of one-CPU nodes: the study says no node fits and waits (as
    for an autoscaler); a two-CPU node joins, the study says so and finishes."""
    from agent.knowledge.records import TRIAL_OK

    address, env = ray_cluster
    study = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            "iris",
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            "2",
            "--epochs",
            "1",
            "--ray-address",
            address,
            "--cpus-per-trial",
            "2",
            "--warm-start",
            "none",
            "--study-name",
            "waits",
            *store.args,
        ],
        env={**env, "PYTHONUNBUFFERED": "1"},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in study.stdout:
            lines.append(line)
            if line.startswith("no node of the Ray cluster"):
                break
        assert f"no node of the Ray cluster at {address} has 2 CPUs a trial" in lines[-1], "".join(lines)
        ray = Path(sys.executable).parent / "ray"
        subprocess.run(
            [str(ray), "start", "--address", address, "--num-cpus", "2", "--disable-usage-stats"],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        out, err = study.communicate(timeout=600)
    finally:
        if study.poll() is None:
            study.kill()
    assert study.returncode == 0, err[-2000:]
    assert f"the Ray cluster at {address} now fits 1 trial(s) of 2 CPUs at once" in out, out
    trials = store.kb().trials(store.kb().find_study("waits"))
    assert sorted(t.number for t in trials) == [0, 1] and all(t.state == TRIAL_OK for t in trials)


@pytest.mark.timeout(
    1200
)  # its studies' own limit is 900 s: at load 5 on 2 cores (two busy loops beside the suite) it took over 480 s
def test_a_local_ray_study_runs_on_workers_started_before_it_was_prepared(store, tmp_path: Path) -> None:
    """`start --workers 2 --cpus-per-trial 3` on a local instance: Ray started on a background
    thread (its processes would die with that thread, were it to end), its workers warmed, every
    trial logged once, trained on three torch threads in a Ray worker, and nothing from Ray's start
    on stderr."""
    from agent.knowledge.records import TRIAL_OK

    threads = tmp_path / "threads"
    threads.mkdir()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            "iris",
            "--job",
            "tests.tuning.threads_job:job",
            "--trials",
            "4",
            "--epochs",
            "2",
            "--workers",
            "2",
            "--cpus-per-trial",
            "3",
            "--warm-start",
            "none",
            "--study-name",
            "local-ray",
            *store.args,
        ],
        env={**RAY_ENV, "THREADS_DIR": str(threads)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "running 2 trial(s) at once on a local Ray instance, 3 CPUs each, 1 more asked ahead" in run.stdout
    assert "SIGTERM handler" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    trials = store.kb().trials(store.kb().find_study("local-ray"))
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == TRIAL_OK for t in trials), [(t.number, t.state, t.reason) for t in trials]
    seen = [f.read_text().split() for f in threads.iterdir()]
    # --cpus-per-trial threads in the Ray workers (neither Ray's old one thread nor torch's default here)
    assert len(seen) == 4 and {n for n, _ in seen} == {"3"}, seen
    # the best 3 trials' models, saved in the Ray workers to the study's scratch, kept on their runs
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    holding = {t.number for t in trials if "model" in {a.path for a in client.list_artifacts(t.trial_id)}}
    assert holding == {t.number for t in sorted(trials, key=lambda t: t.value)[:3]}


def test_bad_input_with_workers_is_refused_in_one_line_and_stops_the_ray_it_began(tmp_path: Path) -> None:
    """Ray's start is begun before the dataset is checked; the refusal is one line, exit 2, and
    the instance begun is stopped (abandoned without the refusal waiting for Ray's start)."""
    script = f"""
import contextlib, io, json, threading
import ray
from agent.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        main(["start", "--dataset", "no-such-dataset", "--job", "mlp", "--workers", "2", "--warm-start", "none",
              "--tracking-uri", "sqlite:///{tmp_path / "mlflow.db"}"])
        code = 0
    except SystemExit as exc:
        code = exc.code
began = [t for t in threading.enumerate() if t.name == "tune-agent-ray-start"]
for t in began:
    t.join(timeout=120)
print(json.dumps({{"exit": code, "output": err.getvalue().strip(), "began": len(began),
                  "ended": not any(t.is_alive() for t in began), "ray": ray.is_initialized()}}))
"""
    run = subprocess.run(
        [sys.executable, "-c", script], env=RAY_ENV, cwd=REPO, capture_output=True, text=True, timeout=200
    )
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["exit"] == 2
    assert len(seen["output"].splitlines()) == 1 and "no-such-dataset" in seen["output"], seen["output"]
    assert seen["began"] == 1 and seen["ended"] and not seen["ray"]  # begun, then stopped: nothing left running


@pytest.mark.slow
def test_a_study_whose_ray_head_is_killed_ends_in_one_line_and_resumes(ray_cluster, store) -> None:
    """SIGKILL of the head's GCS and every raylet mid-study: within seconds (not Ray's own 60 s and a
    log line) the study closes its running trials as killed and says how to resume, exit 2; the
    resume, on this machine without Ray, finishes the budget with every slot once."""
    from agent.knowledge.records import COUNTED_STATES, TRIAL_KILLED, TRIAL_RUNNING

    address, env = ray_cluster
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            "iris",
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            "8",
            "--epochs",
            "400",
            "--workers",
            "2",
            "--ray-address",
            address,
            "--warm-start",
            "none",
            "--study-name",
            "head",
            *store.args,
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    for line in proc.stdout:  # type: ignore[union-attr]
        lines.append(line)
        if line.startswith("trial 3/"):
            break
    _kill_cluster(int(address.rsplit(":", 1)[1]), ("gcs_server", "raylet"))  # this cluster's head and raylets only
    killed_at = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert time.monotonic() - killed_at < 45  # Ray alone would end the driver after 60 s, with its own log line
    assert proc.returncode == 2, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert (
        last.startswith(f"tune-agent: error: the Ray cluster at {address} is gone") and "tune-agent resume head" in last
    )
    kb = store.kb()
    trials = kb.trials(kb.find_study("head"))
    assert not any(t.state == TRIAL_RUNNING for t in trials) and any(t.state == TRIAL_KILLED for t in trials)
    resumed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "resume", "head", *store.args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    counted = sorted(t.number for t in kb.trials(kb.find_study("head")) if t.state in COUNTED_STATES)
    assert counted == list(range(8))  # the full budget, no slot twice


def test_tpe_sees_running_trials_only_through_its_constant_liar() -> None:
    """With ``--pending liar`` Optuna's TPE gets the running trials as RUNNING (constant liar): a
    worker asking while the proposal of the same slot is running is sent elsewhere; by default,
    and without running trials, the slot's seed decides alone."""
    from agent.knowledge.records import TRIAL_OK, TRIAL_RUNNING, TrialRecord
    from agent.samplers.tpe import TpeSampler

    space, U, y = _bowl()
    settings = replace(_sampler(space).settings, trials=40, n_init=5, random_every=4, sampler="tpe", pending="liar")
    rng = np.random.default_rng(0)
    trials = [
        TrialRecord(f"t{i}", i, TRIAL_OK, space.decode(u), float(-((u - 0.6) ** 2).sum()), "random")
        for i, u in enumerate(rng.random((24, 2)))
    ]
    sampler = TpeSampler(space, settings)
    first = sampler.suggest(24, trials).config
    assert sampler.suggest(24, trials).config == first
    running = [*trials, TrialRecord("t24", 24, TRIAL_RUNNING, first, None, "tpe")]
    assert sampler.suggest(24, running).config != first
    assert TpeSampler(space, replace(settings, pending="auto")).suggest(24, running).config == first


def test_a_parallel_study_says_how_running_trials_are_used() -> None:
    from agent.samplers.base import pending_note
    from agent.samplers.random_search import RandomSampler
    from agent.samplers.tpe import TpeSampler

    space, _, _ = _bowl()
    assert "pending points of the acquisition" in pending_note(_sampler(space))
    assert "Kriging believer" in pending_note(_sampler(space, pending="believer"))
    settings = _sampler(space).settings
    assert "leaves running trials out" in pending_note(TpeSampler(space, settings))
    assert "constant liar" in pending_note(TpeSampler(space, replace(settings, pending="liar")))
    assert "random search" in pending_note(RandomSampler(space, settings))


def _events(store, name: str, ahead: int, timeout: float | None = None, training: float = 0.0):
    """A 9-trial toy study on 3 simulated workers; each trial ``training`` seconds (the wait)."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.tuning.service import prepare_study

    req = StudyRequest(
        dataset="t1",
        job=f"yahpo:{TOY}",
        trials=9,
        seed=0,
        study_name=name,
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    study, job, data, _ = prepare_study(req, echo=lambda _: None)
    events: list[tuple[str, int, int]] = []

    class Recording(SilentReporter):
        def trial_started(self, trial) -> None:
            events.append(("start", trial.number, sum(t.state == "running" for t in study.trials())))

        def trial_finished(self, trial, best, trials) -> None:
            events.append(("end", trial.number, 0))

    executor = make_executor(study, job, data, None, ExecutionSettings(workers=3, ask_ahead=ahead))
    finish = executor.wait

    def training_wait():
        time.sleep(training)
        return finish()

    executor.wait = training_wait
    timing = run_study(study, job, data, None, Recording(), trace_plot=False, executor=executor, timeout=timeout)
    return study, events, timing


def test_asked_ahead_trials_start_before_the_finished_one_is_told(store) -> None:
    """With --ask-ahead 1 one trial more than the workers is asked and held: when a trial ends,
    the held one starts before the ended one is told (and the next asked). With 0, a trial starts
    only after the one whose worker it takes was told, knowing its result."""
    from agent.knowledge.records import TRIAL_OK

    for ahead in (0, 1):
        study, events, _ = _events(store, f"ahead-{ahead}", ahead)
        trials = study.trials()
        assert sorted(t.number for t in trials) == list(range(9)) and all(t.state == TRIAL_OK for t in trials)
        assert max(open_ for kind, _, open_ in events if kind == "start") == 3 + ahead  # never more asked
        at = {(kind, n): i for i, (kind, n, _) in enumerate(events)}
        assert [n for kind, n, _ in events if kind == "start"] == list(range(9))
        for n in range(3, 9):  # trial n takes the worker of trial n - 3
            assert (at["start", n] < at["end", n - 3]) == (ahead == 1), (ahead, events)


def test_a_timeout_closes_the_trials_asked_ahead_and_the_study_resumes(store) -> None:
    """A trial asked ahead that no worker started before --timeout is closed as killed, so its
    slot stays free: nothing is left running and the slots left are the resume's."""
    from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK

    study, events, timing = _events(store, "ahead-timeout", 1, timeout=1.0, training=1.2)
    trials = study.trials()
    assert timing.timed_out
    assert not any(t.state == "running" for t in trials)
    assert [t.state for t in trials].count(TRIAL_KILLED) == 1  # the one held when time ran out
    killed = next(t for t in trials if t.state == TRIAL_KILLED)
    assert "not started before --timeout" in killed.reason
    done = [t for t in trials if t.state == TRIAL_OK]
    assert study.remaining() == 9 - len(done) > 0


def test_a_bo_step_fits_once_for_asks_that_differ_only_in_running_trials() -> None:
    """Two asks between the same results (workers freed together, or a trial asked ahead) share one
    fit: the running points enter the acquisition, not the model. New data fits again."""
    space, U, y = _bowl()
    sampler = _sampler(space)
    fits: list[int] = []
    step_model = sampler.surrogate.step_model

    def counted(X, Y, state):
        fits.append(len(X))
        return step_model(X, Y, state)

    sampler.surrogate.step_model = counted  # type: ignore[method-assign]
    first, _ = sampler.propose(U, y, U, 1, 7, np.random.default_rng(7))
    second, _ = sampler.propose(U, y, np.vstack([U, first]), 2, 8, np.random.default_rng(8), pending=first[None, :])
    assert fits == [8]
    assert np.linalg.norm(second - first) > 0.05  # the shared model, a different acquisition
    sampler.propose(np.vstack([U, first]), np.append(y, -0.5), np.vstack([U, first]), 2, 8, np.random.default_rng(8))
    assert fits == [8, 9]


def test_trials_that_end_together_are_all_told_before_the_next_ask(store) -> None:
    """Workers that free up while the driver is busy are drained: every trial that ended is told,
    then the free slots are asked for, on one fit of the model."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import run_study
    from agent.execution.workers import QueuedExecutor
    from agent.knowledge.records import TRIAL_OK
    from agent.tuning.service import prepare_study

    class Together(QueuedExecutor):
        def poll(self):
            return self._done.popleft() if self._done else None

    req = StudyRequest(
        dataset="t1",
        job=f"yahpo:{TOY}",
        trials=9,
        seed=0,
        study_name="together",
        warm_start="none",
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    study, job, data, _ = prepare_study(req, echo=lambda _: None)
    fits: list[int] = []
    surrogate = study.sampler.surrogate
    step_model = surrogate.step_model

    def counted(X, Y, state):
        fits.append(len(X))
        return step_model(X, Y, state)

    surrogate.step_model = counted
    events: list[str] = []

    class Recording(SilentReporter):
        def trial_started(self, trial) -> None:
            events.append("start")

        def trial_finished(self, trial, best, trials) -> None:
            events.append("end")

    timing = run_study(
        study, job, data, None, Recording(), trace_plot=False, executor=Together(study, job, data, None, 3, ask_ahead=0)
    )
    trials = study.trials()
    assert sorted(t.number for t in trials) == list(range(9)) and all(t.state == TRIAL_OK for t in trials)
    assert events == ["start"] * 3 + (["end"] * 3 + ["start"] * 3) * 2 + ["end"] * 3
    assert timing.batched_tells == 6
    bo_steps = [t for t in trials if t.origin.startswith("bo:")]
    assert len(bo_steps) >= 2 and len(fits) < len(bo_steps)  # trials 7-9 were asked on one fit


def test_torch_threads_sets_the_threads_of_trials_trained_here(store, cli) -> None:
    """--torch-threads N: every trial of a --workers 1 study trains on N torch threads, and the
    process's own count is back afterwards; with Ray workers the option is refused in one line."""
    import torch

    from tests.tuning.threads_job import job

    before = torch.get_num_threads()
    job.seen.clear()
    result = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "tests.tuning.threads_job:job",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--torch-threads",
        "1",
        "--tracking-uri",
        store.uri,
        "--artifact-root",
        store.artifacts,
    )
    assert result.code == 0, result.err
    assert job.seen == [1, 1] and torch.get_num_threads() == before
    refused = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "mlp",
        "--workers",
        "2",
        "--torch-threads",
        "2",
        "--tracking-uri",
        store.uri,
    )
    assert refused.code == 2 and "--torch-threads" in refused.err and "--cpus-per-trial threads" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
