"""User jobs for the trial process's tests (tests/tuning/test_trial_process.py): one that cannot be
pickled, one whose builds wait (to be interrupted). The one that kills its process is crash_job's."""

from __future__ import annotations

import os
import time
from typing import Any

from agent.jobs.examples import LogisticJob


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


unpicklable = UnpicklableJob()
slow = SlowJob()
