"""A long phase's progress, said at most every :data:`PROGRESS_EVERY` seconds with an ETA, so that no
phase is silent for longer than that (history reads, source fits, meta-feature recomputation,
content checks, benchmarks)."""

from __future__ import annotations

import time
from collections.abc import Callable

PROGRESS_EVERY = 2.0  # seconds between progress lines of a long phase


class Ticker:
    """``tick(done)`` after each of ``total`` steps; ``progress`` (None: silent) hears of it."""

    def __init__(self, progress: Callable[[str], None] | None, what: str, total: int) -> None:
        self.progress, self.what, self.total = progress, what, total
        self.start = self.last = time.perf_counter()

    def tick(self, done: int) -> None:
        now = time.perf_counter()
        if self.progress is None or now - self.last < PROGRESS_EVERY or done >= self.total:
            return
        self.last = now
        eta = (now - self.start) / done * (self.total - done) if done else float("nan")
        self.progress(f"  {self.what}: {done}/{self.total}" + (f", about {eta:.0f} s left" if done else ""))
