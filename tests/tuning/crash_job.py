"""A user job whose worker dies (SIGKILL of its own process) the first time it trains, once per
marker file: the fault a parallel study must survive. The marker path is read in the driver when
the job is loaded (``CRASH_MARKER``) and travels with the pickled job to the Ray workers."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from agent.jobs.examples import LogisticJob


class CrashOnceJob(LogisticJob):
    name = "crash-once"

    def __init__(self) -> None:
        super().__init__()
        self.marker = os.environ.get("CRASH_MARKER", "")

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> Any:
        marker = Path(self.marker)
        if self.marker and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return super().build(config, dataset, train_idx, val_idx, seed)


job = CrashOnceJob()
