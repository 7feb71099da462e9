"""A user job that notes torch's thread count each time a trial builds it: in ``seen`` (in this
process) and, when ``THREADS_DIR`` was set as the job loaded, as one file per trial there (the path
travels with the pickled job to Ray workers)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from agent.jobs.examples import LogisticJob


class ThreadsJob(LogisticJob):
    name = "threads"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.report_dir = os.environ.get("THREADS_DIR", "")

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        self.seen.append(torch.get_num_threads())
        if self.report_dir:
            (Path(self.report_dir) / f"trial-{seed}").write_text(f"{torch.get_num_threads()} {os.getpid()}")
        return super().build(config, dataset, train_idx, val_idx, seed)


job = ThreadsJob()
