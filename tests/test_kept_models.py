"""Trained models kept on their trial runs, registered without training, and a killed trial that
continues from its checkpoint: real studies on wine, a real sqlite MLflow store, a real SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK


def _runs(store) -> dict[str, object]:
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    runs = {}
    for experiment in client.search_experiments():
        for run in client.search_runs([experiment.experiment_id]):
            runs[run.info.run_id] = run
    return runs


def _artifacts(store, run_id: str) -> list[str]:
    from mlflow import MlflowClient

    return [f.path for f in MlflowClient(store.uri).list_artifacts(run_id)]


def test_best_trials_keep_their_models_and_register_without_training(store, cli, monkeypatch) -> None:
    res = cli(
        "start", "--dataset", "wine", "--job", "mlp", "--trials", "3", "--epochs", "2", "--study-name", "K", *store.args
    )
    assert res.code == 0, res.err
    kb = store.kb()
    study = kb.find_study("K")
    trials = kb.trials(study)
    assert all(t.state == TRIAL_OK for t in trials) and len(trials) == 3
    for trial in trials:  # the default keeps the best 3: every trial of this study
        assert {"model", "network"} <= set(_artifacts(store, trial.trial_id))
    assert study.tags["kept_models"] == "1,2,3"
    assert int(study.tags["kept_models_bytes"]) > 10_000
    assert not (Path(store.artifacts) / "scratch" / study.study_id).exists()  # scratch cleared

    before = {rid: (r.info.status, r.info.end_time) for rid, r in _runs(store).items()}

    def no_training(*args, **kwargs):
        raise AssertionError("registering a kept model must not train")

    import lightning.pytorch as pl

    monkeypatch.setattr(pl.Trainer, "fit", no_training)
    reg = cli("best", "K", "--register", "wine-best", "--tracking-uri", store.uri)
    assert reg.code == 0, reg.err
    registered = json.loads(reg.out)["registered"]
    best = min(trials, key=lambda t: t.value)
    assert registered["source"] == "kept" and registered["trial"] == best.number + 1
    after = {rid: (r.info.status, r.info.end_time) for rid, r in _runs(store).items()}
    assert after == before  # no run added, none reopened or re-ended

    import mlflow.pyfunc
    from sklearn.datasets import load_wine

    mlflow.set_tracking_uri(store.uri)
    rows = load_wine(as_frame=True).data.head(6)  # raw rows, as the dataset comes
    probabilities = mlflow.pyfunc.load_model("models:/wine-best/latest").predict(rows)
    assert list(probabilities.columns) == ["class_0", "class_1", "class_2"]
    assert np.allclose(probabilities.to_numpy().sum(axis=1), 1.0)
    network = mlflow.pytorch.load_model(f"runs:/{best.trial_id}/network")  # the pytorch flavour too
    assert sum(p.numel() for p in network.parameters()) > 0


def test_a_model_pushed_out_of_the_top_k_is_deleted_and_an_unkept_one_retrains(store, cli) -> None:
    res = cli(
        "start", "--dataset", "wine", "--job", "mlp", "--trials", "4", "--epochs", "1",
        "--keep-models", "1", "--study-name", "K1", *store.args,
    )  # fmt: skip
    assert res.code == 0, res.err
    kb = store.kb()
    study = kb.find_study("K1")
    trials = kb.trials(study)
    best = min((t for t in trials if t.state == TRIAL_OK), key=lambda t: t.value)
    holding = [t.number for t in trials if "model" in _artifacts(store, t.trial_id)]
    assert holding == [best.number] and study.tags["kept_models"] == str(best.number + 1)
    runs = _runs(store)
    notes = [runs[t.trial_id].data.tags.get("tune_agent.model", "") for t in trials if t.number != best.number]
    assert all(n == "" or n.startswith("deleted: pushed out of the top 1 by trial ") for n in notes)

    other = next(t for t in trials if t.state == TRIAL_OK and t.number != best.number)
    reg = cli("best", "K1", "--trial", str(other.number + 1), "--register", "wine-other", "--tracking-uri", store.uri)
    assert reg.code == 0, reg.err
    assert f"trial {other.number + 1} kept no model: training it again" in reg.err
    assert json.loads(reg.out)["registered"]["source"] == "retrained"


def test_keep_models_refuses_a_bad_count(store, cli) -> None:
    res = cli("start", "--dataset", "wine", "--job", "mlp", "--keep-models", "some", *store.args)
    assert res.code == 2
    assert "'some' is neither a count of at least 0 nor 'all'" in res.err


def _checkpoint_epoch(path: Path) -> int | None:
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1
    except Exception:  # being written
        return None


def test_a_trial_killed_mid_epoch_continues_from_its_checkpoint(store, cli) -> None:
    """SIGKILL in the middle of an epoch; `resume` re-runs the slot with the same configuration from
    the checkpoint's epoch, and its final metric equals an uninterrupted run's."""
    exe = Path(sys.executable).with_name("tune-agent")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"SLOW_STEP": "0.5"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    args = ["--dataset", "wine", "--job", "tests.tuning.trial_process_jobs:slow_steps", "--trials", "1"]
    proc = subprocess.Popen(
        [str(exe), "start", *args, "--epochs", "6", "--keep-models", "0", "--study-name", "R", *store.args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.time() + 240
    try:
        # the first configuration trains one batch of 0.5 s per epoch
        checkpoint = None
        while time.time() < deadline and proc.poll() is None:
            found = list((Path(store.artifacts) / "scratch").glob("*/trial-1/last.ckpt"))
            if found and (_checkpoint_epoch(found[0]) or 0) >= 2:
                checkpoint = found[0]
                time.sleep(0.2)  # into the next epoch's step
                break
            time.sleep(0.02)
        else:
            pytest.fail("the trial never finished two epochs before it could be killed")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert checkpoint is not None
    done_epochs = _checkpoint_epoch(checkpoint)
    assert done_epochs is not None and 2 <= done_epochs < 6

    res = cli("resume", "R", *store.args)
    assert res.code == 0, res.err
    assert f"trial 1 continued from its checkpoint after epoch {done_epochs}" in res.out
    kb = store.kb()
    study = kb.find_study("R")
    trials = kb.trials(study)
    killed = [t for t in trials if t.state == TRIAL_KILLED]
    ok = [t for t in trials if t.state == TRIAL_OK]
    assert len(killed) == 1 and len(ok) == 1
    assert dict(ok[0].config) == dict(killed[0].config)  # the same configuration, continued
    resumed = _runs(store)[ok[0].trial_id].data.metrics
    assert resumed["resumed_from_epoch"] == done_epochs
    assert not checkpoint.parent.exists()  # scratch removed when the trial ended

    # the same configuration, seed and split trained without a break
    from agent.execution.trial import train_config
    from agent.tuning.service import load_study_data, open_study

    opened, job = open_study("R", kb=kb, with_sampler=False)
    data, split = load_study_data(opened, job)
    straight = train_config(job, dict(ok[0].config), 0, opened.settings, data, split, logger=False)
    assert straight.value == pytest.approx(ok[0].value, rel=1e-6, abs=1e-9)


def test_a_corrupt_checkpoint_restarts_the_trial_from_epoch_zero_with_one_line(tmp_path) -> None:
    from agent.config import StudySettings
    from agent.data import load_dataset
    from agent.execution.checkpoints import describe
    from agent.execution.trial import train_config, trial_seed
    from agent.jobs import load_job
    from agent.tuning.scratch import CHECKPOINT

    job = load_job("agent.jobs.examples:logistic")
    data = load_dataset("wine")
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data.y))
    split = (order[:120], order[120:])
    settings = StudySettings(
        job="logistic", job_name="logistic", dataset="wine", dataset_name="wine", fingerprint="f",
        space_signature="s", metric="val_loss", mode="min", epochs=2,
    )  # fmt: skip
    config = {"lr": 0.05, "weight_decay": 1e-4, "optimizer": "adam"}
    folder = tmp_path / "trial-1"
    describe(folder, config, trial_seed(settings, 0))
    (folder / CHECKPOINT).write_bytes(b"not a checkpoint")
    outcome = train_config(job, config, 0, settings, data, split, logger=False, scratch=folder)
    assert outcome.value is not None and outcome.resumed_from == 0
    assert outcome.note.startswith(f"checkpoint {folder / CHECKPOINT} is unreadable (")
    assert outcome.note.endswith("the trial starts again from epoch 0")
    assert _checkpoint_epoch(folder / CHECKPOINT) == 2  # and checkpoints afresh


def test_a_resumed_trial_is_judged_by_the_pruner_on_its_whole_curve(tmp_path, monkeypatch) -> None:
    """The pruner's view of a trial travels in its checkpoint: a trial stopped inside epoch 3 and
    run again reports the curve of all its epochs, equal to an unbroken run's, and the same verdict."""
    import lightning.pytorch as pl

    from agent.config import StudySettings
    from agent.data import load_dataset
    from agent.execution.pruning import PruningState, pruner_named
    from agent.execution.trial import train_config
    from agent.jobs import load_job

    job, data = load_job("mlp"), load_dataset("wine")
    order = np.random.default_rng(0).permutation(len(data.y))
    split = (order[:140], order[140:])
    settings = StudySettings(
        job="mlp", job_name="mlp", dataset="wine", dataset_name="wine", fingerprint="f",
        space_signature="s", metric="val_loss", mode="min", epochs=5, pruner="median",
    )  # fmt: skip
    config = {"batch_size": 32, "learning_rate": 0.01, "momentum": 0.9, "weight_decay": 1e-4,
              "num_layers": 2, "max_units": 64, "max_dropout": 0.5}  # fmt: skip
    peers = {epoch: [5.0, 5.0, 5.0] for epoch in range(1, 6)}  # far worse val_loss: it is never pruned

    def state() -> PruningState:
        return PruningState(pruner_named("median"), "val_loss", -1.0, 5, peers, name="median")

    unbroken = train_config(job, config, 0, settings, data, split, logger=False, pruning=state())

    fit = pl.Trainer.fit

    def stopped_in_epoch_3(trainer, *args, **kwargs):  # the process "dies" inside epoch 3
        class Stop(pl.Callback):
            def on_train_batch_start(self, trainer, module, batch, index):
                if trainer.current_epoch == 2 and index == 1:
                    raise RuntimeError("killed")

        trainer.callbacks.append(Stop())
        return fit(trainer, *args, **kwargs)

    folder = tmp_path / "trial-1"
    monkeypatch.setattr(pl.Trainer, "fit", stopped_in_epoch_3)
    assert train_config(job, config, 0, settings, data, split, False, state(), scratch=folder).value is None
    monkeypatch.setattr(pl.Trainer, "fit", fit)
    resumed = train_config(job, config, 0, settings, data, split, False, state(), scratch=folder)
    assert resumed.resumed_from == 2
    assert sorted(resumed.curve) == [1, 2, 3, 4, 5] and resumed.curve == unbroken.curve
    assert resumed.value == unbroken.value and not resumed.pruned and not unbroken.pruned


OWN_LOOP_KILLED = """
import os, sys
import lightning.pytorch as pl
from agent.examples.own_loop import WineNet, loaders
from agent.lightning import TuneAgentCallback, create_study

study = create_study("own", dataset="wine", job="agent.jobs.examples:logistic", trials=1, epochs=5,
                     warm_start="none", tracking_uri=sys.argv[1])

class Dies(pl.Callback):  # the process dies inside epoch 3, as under SIGKILL: no exception, no cleanup
    def on_train_batch_start(self, trainer, module, batch, index):
        if trainer.current_epoch == 2 and index == 1:
            os._exit(9)

train, val = loaders()
with study.trial() as trial:
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(max_epochs=5, callbacks=[TuneAgentCallback(trial), Dies()], logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(WineNet(**trial.config), train, val, ckpt_path=trial.resume_from)
"""


def test_an_own_loop_trial_whose_process_died_in_epoch_3_continues_from_its_checkpoint(store) -> None:
    """The Python API's own loop: TuneAgentCallback checkpoints each epoch; after the script died
    inside epoch 3, the slot's next trial has the same configuration and ``resume_from``, and
    training from it ends where an unbroken run of that configuration ends."""
    import lightning.pytorch as pl

    from agent.examples.own_loop import WineNet, loaders
    from agent.lightning import TuneAgentCallback, create_study

    died = subprocess.run([sys.executable, "-c", OWN_LOOP_KILLED, store.uri], capture_output=True, text=True)
    assert died.returncode == 9, died.stderr[-1500:]
    train, val = loaders()

    def fit(trial, ckpt_path=None, checkpoint=True):
        pl.seed_everything(0, verbose=False)
        trainer = pl.Trainer(
            max_epochs=5, callbacks=[TuneAgentCallback(trial, checkpoint)], logger=False,
            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        )  # fmt: skip
        trainer.fit(WineNet(**trial.config), train, val, ckpt_path=ckpt_path)

    study = create_study(
        "own", dataset="wine", job="agent.jobs.examples:logistic", tracking_uri=store.uri, load_if_exists=True
    )
    killed = [t for t in study.study.trials() if t.state == TRIAL_KILLED]
    assert len(killed) == 1  # the dead process's trial, closed when the study was opened again
    with study.trial() as again:
        assert again.config == dict(killed[0].config) and again.resume_from is not None
        assert _checkpoint_epoch(Path(again.resume_from)) == 2
        fit(again, ckpt_path=again.resume_from)
    assert again.value is not None and not again.checkpoint_dir.exists()  # removed when the trial ended

    unbroken = create_study(
        "own-unbroken", dataset="wine", job="agent.jobs.examples:logistic", trials=1, epochs=5,
        warm_start="none", tracking_uri=store.uri,
    )  # fmt: skip
    with unbroken.trial() as straight:
        straight.record = type(straight.record)(**{**vars(straight.record), "config": dict(killed[0].config)})
        fit(straight, checkpoint=False)
    assert again.value == straight.value


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MB tmpfs: a real filesystem that fills up (needs the right to mount; skipped without it)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()[:200]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def test_a_full_artifact_disk_while_keeping_a_model_leaves_the_trial_its_value(tiny_disk, store) -> None:
    """The disk holding the artifacts fills up as the trial's model is saved: the trial ends with its
    value and one line, and no run is left running."""
    from agent.knowledge.records import TRIAL_RUNNING

    exe = Path(sys.executable).with_name("tune-agent")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"FILL_DIR": str(tiny_disk)}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [str(exe), "start", "--dataset", "wine", "--job", "tests.tuning.trial_process_jobs:fills_disk",
         "--trials", "1", "--epochs", "2", "--warm-start", "none", "--study-name", "F",
         "--tracking-uri", store.uri, "--artifact-root", str(tiny_disk)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if "model not kept" in line]
    assert lines == ["  trial 1: model not kept (OSError: [Errno 28] No space left on device)"], done.stdout
    assert "trial 1 done (1/1): val_loss=" in done.stdout
    kb = store.kb()
    trials = kb.trials(kb.find_study("F"))
    assert [t.state for t in trials] == [TRIAL_OK] and trials[0].value is not None
    assert not any(t.state == TRIAL_RUNNING for t in trials)
    # the study's own end finds the disk still full: one line naming `resume`, exit 2
    assert done.returncode in (0, 2) and "Traceback" not in done.stderr, done.stderr[-1500:]
