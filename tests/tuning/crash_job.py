"""User jobs for the trial process's tests (tests/tuning/test_trial_process.py): one whose first
build kills its own process, one that cannot be pickled, one whose builds wait (to be interrupted)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from agent.jobs.examples import LogisticJob


class CrashOnceJob(LogisticJob):
    """The first build (no file at ``CRASH_MARKER`` yet) writes the file and SIGKILLs its process,
    as the out-of-memory killer would; every later build trains."""

    name = "crash-once"

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        marker = Path(os.environ["CRASH_MARKER"])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().build(config, dataset, train_idx, val_idx, seed)


class UnpicklableJob(LogisticJob):
    name = "unpicklable"

    def __init__(self) -> None:
        super().__init__()
        self.hook = lambda value: value  # a lambda: pickle refuses the job


class SlowJob(LogisticJob):
    """Each build notes its process id in ``SLOW_PIDS`` and waits ``SLOW_SECONDS``."""

    name = "slow"

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        with open(os.environ["SLOW_PIDS"], "a") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("SLOW_SECONDS", "60")))
        return super().build(config, dataset, train_idx, val_idx, seed)


crash_once = CrashOnceJob()
unpicklable = UnpicklableJob()
slow = SlowJob()
