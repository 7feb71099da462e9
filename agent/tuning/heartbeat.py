"""No silent phase: a line whenever a command has said nothing for :data:`EVERY` seconds.

:class:`Heartbeat` wraps a command's output function. Its steps name the phase they enter
(:meth:`Heartbeat.phase`: importing Lightning and your classes, sampling a DataModule, writing
the study to the store); while a phase runs past ``EVERY`` seconds without a line, a thread says
which phase it is and for how long (``  still importing Lightning and your classes (4 s)``), so a
log or a person watching a pipe knows the command is alive and where it is. Steps that do not know
of it (plain ``echo`` functions) call :func:`phase` on whatever they were given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

EVERY = (
    1.5  # seconds of silence before the heartbeat speaks (the promise is 2: a poll and a busy machine fit in between)
)
POLL = 0.1
PATIENT_AFTER = 60.0  # seconds into a patient phase (a trial that trains) after which it speaks less often
PATIENT_EVERY = 30.0  # seconds of silence between its lines from then on


class Heartbeat:
    """``beat(line)`` prints a line; ``beat.phase(what)`` names the phase that follows. Use as a
    context manager: the watching thread runs inside it."""

    def __init__(self, echo: Callable[[str], None], every: float = EVERY) -> None:
        self.echo, self.every = echo, every
        self.lock = threading.Lock()
        self.last = self.since = time.perf_counter()
        self.what = ""
        self.patient = False
        self.key = ""
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def __call__(self, line: str) -> None:
        with self.lock:
            self.echo(line)
            self.last = time.perf_counter()

    def phase(self, what: str, patient: bool = False, key: str | None = None) -> None:
        """``what`` runs from now (empty: nothing to speak for); ``key``: the phase it continues when
        the last one had the same key (a trial's next epoch: its time runs on); ``patient``: a phase
        that can run for hours (a trial that trains), spoken for every :data:`PATIENT_EVERY` seconds
        once it has run :data:`PATIENT_AFTER`."""
        with self.lock:
            key = what if key is None else key
            if key != self.key:
                self.since = time.perf_counter()
            self.what, self.patient, self.key = what, patient, key

    def __enter__(self) -> Heartbeat:
        self.thread = threading.Thread(target=self._watch, name="tune-agent-heartbeat", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=1.0)

    def _watch(self) -> None:
        while not self.stopped.wait(POLL):
            with self.lock:
                now = time.perf_counter()
                elapsed = now - self.since
                quiet = PATIENT_EVERY if self.patient and elapsed > PATIENT_AFTER else self.every
                if not self.what or now - self.last < quiet:
                    continue
                self.echo(f"  still {self.what} ({elapsed:.0f} s)" if elapsed >= 1.0 else f"  now {self.what}")
                self.last = now


def phase(echo: Any, what: str) -> None:
    """Names the phase that follows for ``echo`` when it is a :class:`Heartbeat`; else nothing."""
    name = getattr(echo, "phase", None)
    if callable(name):
        name(what)
