"""One runner per study: the lease a process holds on a study while it runs it.

A study being run carries a ``lease`` tag on its study run: who holds it (host, pid, a random
token) and when the holder last refreshed it. :class:`StudyLease` takes it before any trial is
closed or asked (``start``, ``resume``), refreshes it from a thread every :data:`REFRESH` seconds
while the study runs, and gives it back at the end. Another process that finds a live lease
refuses in one line naming the holder, or, with ``join``, runs as one more worker inside the same
budget without closing the holder's running trials: it marks the run (``lease_joined``) and waits
until the holder, at its next refresh, answers the mark (``lease_joined_seen``); from then on both
read the store before each ask and claim their slot (:attr:`agent.tuning.study.Study.shared`), so
the budget holds across them. A holder reads the store once per refresh, not more.

A lease is dead when its holder's process is gone from this host (checked at once), or when it
has not been refreshed for :data:`TTL` seconds (a holder on another host that died, or a hung one);
a dead lease
is taken over, and the trials its holder left running are closed as killed by the taker. Each
taking is a generation: the taker claims the write-once value ``lease.<n>`` of the study
(:meth:`~agent.knowledge.base.KnowledgeBase.claim_study_value`), ``n`` one past the lease it
found; of two processes taking at once, the store lets exactly one set it, and the other refuses.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.errors import StudyBusyError

TAG = "lease"
JOINED = "lease_joined"  # a joiner's mark: the holder's asks read the store and claim slots from then on
SEEN = "lease_joined_seen"  # the holder's answer to a joiner's mark, written with its next refresh
TTL = 90.0  # seconds without a refresh after which a lease of another host is dead
REFRESH = 15.0  # seconds between a holder's refreshes (one read of the study's tags, one write)
JOIN_WAIT = REFRESH + 5.0  # a joiner's longest wait for the holder's answer before its first ask
JOIN_POLL = 1.0  # seconds between a joiner's looks for that answer


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    token: str
    beat: float  # epoch seconds of the last refresh
    generation: int = 1
    released: bool = False  # given back at the end of its run: dead, and its generation taken

    @classmethod
    def read(cls, text: str | None) -> Holder | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(
                str(data["host"]),
                int(data["pid"]),
                str(data["token"]),
                float(data["beat"]),
                int(data.get("gen", 1)),
                bool(data.get("released", False)),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def text(self) -> str:
        fields = {"host": self.host, "pid": self.pid, "token": self.token, "beat": self.beat, "gen": self.generation}
        return json.dumps({**fields, "released": True} if self.released else fields)

    def claim(self) -> str:
        """What this holder claims as its generation's write-once value."""
        return json.dumps({"host": self.host, "pid": self.pid, "token": self.token})

    def alive(self, now: float | None = None) -> bool:
        """Whether the holder runs: refreshed within :data:`TTL` (a hung holder, or a pid the
        system gave to another process, is dead after it), and on this host its process alive."""
        fresh = (now if now is not None else time.time()) - self.beat < TTL
        return not self.released and fresh and (self.host != socket.gethostname() or _process_alive(self.pid))

    def describe(self, now: float | None = None) -> str:
        ago = max(0.0, (now if now is not None else time.time()) - self.beat)
        return f"pid {self.pid} on {self.host} (lease refreshed {ago:.0f} s ago)"


GENERATIONS = 50  # generations a taker walks past (each given back or dead) before it gives up


def _claimant_alive(claimant: Holder, tagged: Holder | None) -> bool:
    """Whether the process that claimed a generation runs: as its tag says once it wrote one, else
    by its process on this host; one of another host that has not written its tag yet is taken
    to run (it is between its claim and its tag)."""
    if tagged is not None and tagged.token == claimant.token:
        return tagged.alive()
    if claimant.host == socket.gethostname():
        return _process_alive(claimant.pid)
    return True


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return _not_a_zombie(pid)


def _not_a_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class StudyLease:
    """The lease on ``study`` (a :class:`~agent.tuning.study.Study`) for this process."""

    def __init__(self, study: Any, say: Callable[[str], None] = lambda _: None) -> None:
        self.study, self.say = study, say
        self.holder: Holder | None = None
        self.joined = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> Holder | None:
        return Holder.read(self.study.kb.study_tags(self.study.record).get(TAG))

    def acquire(self, join: bool = False, fresh: bool = False) -> bool:
        """Takes the lease; ``join``: where a live process holds it, runs beside it instead (True
        then). Raises :class:`StudyBusyError` naming the holder when it is alive and not joined.
        ``fresh``: the study was made by this process a moment ago (no look at a holder first)."""
        found = None if fresh else self.current()
        if found is not None and found.alive() and found.pid != os.getpid():
            return self._busy(found, join)
        generation = (found.generation + 1) if found is not None else 1
        token = secrets.token_hex(8)
        for _ in range(GENERATIONS):
            mine = Holder(socket.gethostname(), os.getpid(), token, time.time(), generation)
            held = self.study.kb.claim_study_value(self.study.record, f"lease.{generation}", mine.claim())
            if held == mine.claim():
                break
            winner = json.loads(held)
            rival = Holder(str(winner["host"]), int(winner["pid"]), str(winner["token"]), time.time(), generation)
            if _claimant_alive(rival, self.current()):  # another process took this generation and runs
                return self._busy(rival, join)
            generation += 1  # a generation its taker gave back or died with: the next one
        else:
            raise StudyBusyError(f"study {self.study.name}: no lease could be taken after {GENERATIONS} tries")
        self.study.kb.set_study_tags(self.study.record, {TAG: mine.text()})
        self.holder = mine
        self._thread = threading.Thread(target=self._refresh, name="tune-agent-background-lease", daemon=True)
        self._thread.start()
        return False

    def _busy(self, holder: Holder, join: bool) -> bool:
        if join:
            self.joined = True
            self.say(f"study {self.study.name} runs in {holder.describe()}: joining it as one more worker")
            self.study.shared = True
            self._await_seen(f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")
            return True
        raise StudyBusyError(
            f"study {self.study.name} is being run by {holder.describe()}; wait for it to end, or add "
            "--join to run beside it within the same budget"
        )

    def _await_seen(self, mark: str) -> None:
        """Marks the run and waits (at most :data:`JOIN_WAIT` s) until the holder answers the mark,
        or is gone: from then on the holder claims its slots too."""
        from agent.tuning.heartbeat import phase

        self.study.kb.set_study_tags(self.study.record, {JOINED: mark})
        phase(self.say, f"waiting for its runner to see this one (at most {JOIN_WAIT:.0f} s)")
        deadline = time.monotonic() + JOIN_WAIT
        while time.monotonic() < deadline:
            tags = self.study.kb.study_tags(self.study.record)
            found = Holder.read(tags.get(TAG))
            if tags.get(SEEN) == mark or found is None or not found.alive():
                return
            time.sleep(JOIN_POLL)

    def _refresh(self) -> None:
        """Every :data:`REFRESH` seconds one read of the study's tags and one write: the beat, and the
        answer to a joiner's new mark (this process's asks claim slots from then on)."""
        while not self._stop.wait(REFRESH):
            holder = self.holder
            if holder is None:
                return
            try:
                tags = self.study.kb.study_tags(self.study.record)
                now = Holder.read(tags.get(TAG))
                if now is not None and now.generation > holder.generation:  # taken over: no longer ours
                    return
                beat = Holder(holder.host, holder.pid, holder.token, time.time(), holder.generation)
                update = {TAG: beat.text()}
                mark = tags.get(JOINED)
                if mark and tags.get(SEEN) != mark:
                    self.study.shared = True
                    update[SEEN] = str(mark)
                self.study.kb.set_study_tags(self.study.record, update)
                self.holder = beat
            except Exception:  # the store went away for a moment: the next refresh tries again
                continue

    def release(self) -> None:
        """Stops refreshing and clears the tag, when it is still this process's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=REFRESH)
        if self.holder is None:
            return
        try:
            found = self.current()
            if found is not None and found.token == self.holder.token:
                holder = self.holder
                given = Holder(holder.host, holder.pid, holder.token, time.time(), holder.generation, released=True)
                self.study.kb.set_study_tags(self.study.record, {TAG: given.text()})
        except Exception:  # a lease left behind is dead once this process is: the next run takes it
            pass
        self.holder = None

    def __enter__(self) -> StudyLease:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
