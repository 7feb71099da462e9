"""A user job that notes torch's thread count each time a trial builds it (in this process)."""

from __future__ import annotations

from typing import Any

import torch

from agent.jobs.examples import LogisticJob


class ThreadsJob(LogisticJob):
    name = "threads"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        self.seen.append(torch.get_num_threads())
        return super().build(config, dataset, train_idx, val_idx, seed)


job = ThreadsJob()
