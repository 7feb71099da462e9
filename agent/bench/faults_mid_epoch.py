"""The kill campaign's mid-epoch variant: each study is SIGKILLed while a trial trains, at a uniform
fraction of an epoch after its checkpoint moved on by one epoch, then ``resume``d; checked: the study
finished with its full budget, no slot twice, the killed slot's re-run continued from the epoch its
checkpoint held at the kill (``resumed_from_epoch``), and its final value equals that of the same
configuration trained without a break (same seed and split, in this process).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.bench.faults import _check, _continue, _env, _start_args

TRIALS, EPOCHS = 2, 8  # the campaign's study: epochs enough that a kill after two lands in a trial


def _checkpoint_epoch(path: Path) -> int | None:
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1
    except Exception:  # being written, or gone with its trial
        return None


def _kill_mid_epoch(start_args: list[str], store: Path, fraction: float, deadline: float) -> tuple[str, int] | None:
    """Starts a study, waits until a trial's checkpoint has moved on by one epoch (so an epoch's
    length is known), then ``fraction`` of that length into the next epoch, and SIGKILLs the
    process group; the trial's folder and its checkpoint's epoch after the kill."""
    proc = subprocess.Popen(
        start_args, env=_env(), cwd=store, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    found: Path | None = None
    seen: dict[Path, tuple[int, float]] = {}  # checkpoint -> (epoch, when it was first seen)
    try:
        while proc.poll() is None and time.time() < deadline:
            for path in (store / "artifacts" / "scratch").glob("*/trial-*/last.ckpt"):
                epoch = _checkpoint_epoch(path)
                if epoch is None or (path in seen and seen[path][0] == epoch):
                    continue
                if path in seen:  # an epoch later: one epoch's length measured
                    found = path
                    time.sleep(fraction * (time.time() - seen[path][1]))
                    break
                seen[path] = (epoch, time.time())
            if found is not None:
                break
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if found is None or not found.exists():
        return None  # the trial ended (and cleared its scratch) before the kill
    epoch = _checkpoint_epoch(found)
    return (found.parent.name, epoch) if epoch is not None else None


def _straight_value(store: Path, name: str, number: int, config: dict[str, Any]) -> float | None:
    """The final value of ``config`` in slot ``number`` trained without a break, here."""
    import lightning.pytorch  # noqa: F401 - first: its import sets the levels that quiet_lightning lowers

    from agent.execution.trial import quiet_lightning, train_config
    from agent.knowledge import open_knowledge_base
    from agent.tuning.service import load_study_data, open_study

    quiet_lightning()
    kb = open_knowledge_base(f"sqlite:///{store / 'mlflow.db'}", str(store / "artifacts"))
    study, job = open_study(name, kb=kb, with_sampler=False)
    data, split = load_study_data(study, job)
    return train_config(job, config, number, study.settings, data, split, logger=False).value


def _resumed(store: Path, name: str, folder: str) -> dict[str, Any]:
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.records import TRIAL_OK

    number = int(folder.split("-")[1]) - 1
    kb = open_knowledge_base(f"sqlite:///{store / 'mlflow.db'}", str(store / "artifacts"))
    study = kb.find_study(name)
    rerun = [t for t in kb.trials(study) if t.number == number and t.state == TRIAL_OK] if study else []
    if not rerun:
        return {"trial": number + 1, "resumed_from_epoch": None}
    trial = rerun[-1]
    straight = _straight_value(store, name, number, dict(trial.config))
    return {
        "trial": number + 1,
        "resumed_from_epoch": trial.extra.get("resumed_from_epoch"),
        "value": trial.value,
        "uninterrupted_value": straight,
        "value_equal": straight is not None and trial.value is not None and abs(straight - trial.value) <= 1e-6,
    }


# long: one campaign, its loop and its report; splitting it would scatter a short protocol
def run_mid_epoch_campaign(
    studies: int = 10,
    trials: int = TRIALS,
    epochs: int = EPOCHS,
    dataset: str = "digits",
    job: str = "mlp",
    seed: int = 0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    exe = str(Path(sys.executable).with_name("tune-agent"))
    rng = random.Random(seed)
    rows = []
    for i in range(studies):
        fraction = rng.uniform(0.0, 1.0)
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp)
            name = f"mid-{i}"
            start_args = _start_args(exe, store, name, trials, epochs, dataset, job) + ["--keep-models", "0"]
            hit = _kill_mid_epoch(start_args, store, fraction, time.time() + 300)
            how, resumed = _continue(exe, start_args, store, name)
            row: dict[str, Any] = {
                "study": i,
                "epoch_fraction": round(fraction, 3),
                "continued_with": how,
                "exit": resumed.returncode,
                **_check(store, name, trials),
            }
            if hit is not None:
                row |= {"checkpoint_epoch_at_kill": hit[1], **_resumed(store, name, hit[0])}
            row["continued_from_checkpoint"] = hit is not None and row.get("resumed_from_epoch") == hit[1]
            rows.append(row)
            say(
                f"  {i + 1}/{studies}: "
                + (f"killed in trial {row['trial']} after epoch {hit[1]}, " if hit else "killed between trials, ")
                + f"resumed from epoch {row.get('resumed_from_epoch')}, "
                + f"value equal: {row.get('value_equal')}, {'finished' if row['finished'] else 'NOT finished'}"
            )
    hits = [r for r in rows if "checkpoint_epoch_at_kill" in r]
    return {
        "studies": studies,
        "trials": trials,
        "epochs": epochs,
        "dataset": dataset,
        "job": job,
        "finished": sum(r["finished"] for r in rows),
        "killed_mid_trial": len(hits),
        "continued_from_checkpoint": sum(r["continued_from_checkpoint"] for r in hits),
        "value_equal": sum(bool(r.get("value_equal")) for r in hits),
        "running_left": sum(r.get("running", 0) for r in rows),
        "duplicated": sum(r.get("duplicated", 0) for r in rows),
        "rows": rows,
        "protocol": "fresh embedded store per study (--keep-models 0); SIGKILL of the agent's process group "
        "a uniform fraction of one epoch's measured length after a trial's checkpoint in scratch moved on by "
        "one epoch (so mid-epoch); then `resume NAME`; "
        "continued_from_checkpoint = the killed slot's re-run records resumed_from_epoch equal to the "
        "checkpoint's epoch at the kill; value_equal = its final value within 1e-6 of the same "
        "configuration, seed and split trained without a break in the benchmark's process",
    }
