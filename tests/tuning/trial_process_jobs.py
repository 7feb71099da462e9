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


class SlowStepsJob:
    """The built-in ``mlp`` whose every training step first waits ``SLOW_STEP`` seconds (none when
    unset), so a test can kill a trial in the middle of an epoch (tests/test_kept_models.py)."""

    def __init__(self) -> None:
        from agent.jobs import MLPJob

        self.inner = MLPJob()
        self.name, self.space, self.metric, self.mode = "slow-steps", self.inner.space, "val_loss", "min"
        self.metrics = self.inner.metrics

    def check_dataset(self, dataset: Any) -> None:
        self.inner.check_dataset(dataset)

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        module, datamodule = self.inner.build(config, dataset, train_idx, val_idx, seed)
        wait = float(os.environ.get("SLOW_STEP", "0"))
        step = module.training_step

        def slow_step(*args: Any, **kwargs: Any) -> Any:
            time.sleep(wait)
            return step(*args, **kwargs)

        module.training_step = slow_step
        return module, datamodule


slow_steps = SlowStepsJob()


class FillsDiskJob:
    """The example ``logistic`` job whose module, when its fit ends (its last checkpoint written),
    fills the filesystem of ``FILL_DIR`` with one file until no byte is left: the disk is full
    as the trial's model is saved (tests/test_kept_models.py)."""

    def __init__(self) -> None:
        from agent.jobs.examples import LogisticJob

        self.inner = LogisticJob()
        self.name, self.space, self.metric, self.mode = "fills-disk", self.inner.space, "val_loss", "min"
        self.metrics = self.inner.metrics

    def check_dataset(self, dataset: Any) -> None:
        self.inner.check_dataset(dataset)

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        module, datamodule = self.inner.build(config, dataset, train_idx, val_idx, seed)
        fit_end = module.on_fit_end

        def fill() -> None:
            fit_end()
            with open(os.path.join(os.environ["FILL_DIR"], "filler"), "wb", buffering=0) as out:
                try:
                    while True:
                        out.write(b"\0" * 4096)
                except OSError:  # no space left on the device: full
                    pass

        module.on_fit_end = fill
        return module, datamodule


fills_disk = FillsDiskJob()
