"""Trials trained in a second process, started the moment ``tune-agent start`` (or ``resume``) begins.

Why: a study's first trial needs torch and Lightning, and their import alone takes 3.5-3.8 s of the
6.2-6.5 s a cold ``start`` in one process takes to its first trial on 2 cores; the study's own
preparation (MLflow, the data, the history) takes most of the rest. Done one after the other in one
process, the first trial waits for both. :class:`TrialProcess` is started before the preparation
and imports torch and Lightning while this process prepares, so on two cores the first trial waits
for the longer of the two, not their sum.

The child trains with a Lightning logger that sends what it logs (params as Lightning would write
them, epoch metrics, the end) over a socket, and this process writes it to the trial's run through
:meth:`~agent.knowledge.base.KnowledgeBase.trial_writer`: only the study's process talks to the
store, and it never imports Lightning. The job, data and split go to the child once, with its first
trial; each trial's config and the pruner's state go with the trial.

Also: a trial that kills its process (a segmentation fault in a native library, the out-of-memory
killer) is a failed trial with that reason, and the next trial gets a fresh process; the study goes
on. A job that cannot be sent to another process (defined in ``__main__``, holding a lock) trains
in this process, after one line that says so. ``TUNE_AGENT_TRIAL_PROCESS=0`` trains
every trial in the study's process (the test suite does, for speed: one Lightning import per
session instead of one per study; its own tests run the child).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.tuning.scratch import trial_scratch

ENV = "TUNE_AGENT_TRIAL_PROCESS"


def wanted() -> bool:
    """Whether a study that trains in this machine's one worker starts a trial process (``ENV``)."""
    return os.environ.get(ENV, "1").strip() != "0"


def _died(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"the trial's process died: killed by {name}{hint}"
    return f"the trial's process died: exit code {code}"


class TrialProcess:
    """A child Python process that imports torch and Lightning at once, then trains the trials it
    is sent (:func:`child_main`). ``abandon`` stops it (a study that fails before its first trial,
    or runs its trials elsewhere)."""

    def __init__(self, fork: bool = False) -> None:
        """``fork``: the caller may fork (a command the warm process forked); it forks where
        :func:`fork_safe` agrees, and spawns a fresh Python otherwise."""
        self._spawn(fork and fork_safe())

    def _spawn(self, fork: bool = False) -> None:
        import socket
        import subprocess
        from multiprocessing.connection import Connection

        mine, theirs = socket.socketpair()
        if fork:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # or the fork would print what is buffered again
            pid = os.fork()
            if pid == 0:
                try:
                    mine.close()
                    child_main(theirs.detach())
                finally:
                    for stream in (sys.stdout, sys.stderr):
                        try:
                            stream.flush()
                        except Exception:
                            pass
                    os._exit(0)  # none of the study's exit handlers: they are the study's
            self.proc: Any = _Forked(pid)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent.execution.trial_process", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        theirs.close()
        self.conn = Connection(mine.detach())
        self.given = False  # the job, data and split sent

    def respawn(self) -> None:
        """A fresh process after one died: spawned, since this process may have computed with torch
        by now (a fork of a process whose OpenMP pool ran can hang in its first parallel loop)."""
        self.close()
        self._spawn(fork=False)

    def close(self) -> None:
        """Stops the child at once: it keeps nothing (what a trial logged went to this process), and
        an orderly exit of a process holding torch takes seconds."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()

    abandon = close


def fork_safe() -> bool:
    """Whether a fork of this process can be the trial process: it imported Lightning (so the fork
    trains at once) and runs one thread. The caller knows the rest (:class:`agent.warm.launch.Launch`):
    only a command the warm process forked, which has never computed with torch, asks; a fork of a
    process whose torch thread pool has run hangs in its first parallel loop (seen: a test process
    that had trained in-process)."""
    import threading

    return "lightning.pytorch" in sys.modules and threading.active_count() == 1 and hasattr(os, "fork")


class _Forked:
    """A forked trial process, with the part of :class:`subprocess.Popen` the executor uses
    (``returncode`` as Popen's: negative for the signal that killed it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ProcessExecutor:
    """One trial at a time in a :class:`TrialProcess` (see the module doc); the study's process
    writes what the trial logs to its run as it comes, and hears each epoch. ``inline`` makes the
    executor that trains here, for a job the process cannot take."""

    capacity = 1
    ask_ahead = 0
    where = "a trial process"
    per_trial = ""

    def __init__(
        self,
        study: Any,
        job: Any,
        dataset: Any,
        split: Any,
        resources: Any,
        process: TrialProcess,
        inline: Callable[[], Any],
    ) -> None:
        self.study, self.job, self.dataset, self.split = study, job, dataset, split
        self.resources, self.process, self._make_inline = resources, process, inline
        self.notes: list[str] = []
        self.on_epoch: Any = None  # set by the study loop: the reporter hears each epoch
        self._queue: deque[Any] = deque()
        self.first_wait = 0.0  # seconds the first trial waited for the process (its imports) to begin training
        self._sent_first: float | None = None
        self._inline: Any = None  # when the job cannot go to another process
        self.say: Callable[[str], None] = lambda line: None

    def _setup(self) -> bool:
        """Sends the job, data and split; False (and trains here from now on) when they cannot be sent."""
        import pickle

        try:
            payload = pickle.dumps(
                (
                    self.job,
                    self.dataset,
                    self.split,
                    self.study.settings,
                    self.resources.accelerator,
                    self.resources.torch_threads,
                )
            )
        except Exception as exc:
            return self._go_inline(f"the job cannot be sent to a trial process ({type(exc).__name__}: {exc})")
        self.process.conn.send(("path", list(sys.path)))  # first: where the job's module is found
        self.process.conn.send_bytes(payload)
        self.process.given = True
        return True

    def _go_inline(self, why: str) -> bool:
        self.process.close()
        self._inline = self._make_inline()  # agent.execution.workers.InlineExecutor
        self._inline.on_epoch = self.on_epoch
        self.say(f"{why}: its trials train in this process")
        return False

    def _train_inline(self, trial: Any) -> tuple[Any, Any]:
        """``trial`` trained in this process, by the executor :meth:`_go_inline` made."""
        inline: Any = self._inline
        inline.submit(trial)
        return inline.wait()

    def submit(self, trial: Any) -> None:
        if self._inline is not None:
            self._inline.submit(trial)
            return
        self._queue.append(trial)

    def wait(self) -> tuple[Any, Any]:
        from agent.execution.pruning import pruning_state
        from agent.execution.trial import TrialOutcome

        if self._inline is not None:
            return self._inline.wait()
        trial = self._queue.popleft()
        if not self.process.given and not self._setup():
            return self._train_inline(trial)
        pruning = pruning_state(self.study.settings, self.study.trials)
        writer = self.study.kb.trial_writer(self.study.record, trial)
        try:
            scratch = trial_scratch(self.study.kb, self.study.record.study_id, trial.number)
            self.process.conn.send(("trial", trial.number, dict(trial.config), pruning, str(scratch)))
            if self._sent_first is None:
                self._sent_first = time.perf_counter()
            while True:
                message = self.process.conn.recv()
                kind = message[0]
                if kind == "begun":
                    if not self.first_wait and self._sent_first is not None:
                        self.first_wait = time.perf_counter() - self._sent_first
                        self._warm_up()  # once the child has begun: earlier, it would slow the child's imports
                elif kind == "params":
                    writer.log_params(message[1])
                elif kind == "metrics":
                    writer.log_metrics(message[1], message[2], message[3])
                elif kind == "finalize":
                    writer.finalize(message[1])
                elif kind == "epoch":
                    if self.on_epoch is not None:
                        self.on_epoch(*message[1:])
                elif kind == "done":
                    self._warmed()
                    return trial, message[1]
                elif kind == "refused":  # the child could not take the job (its module, its pickle)
                    self._go_inline(f"the trial process could not load the job ({message[1]})")
                    return self._train_inline(trial)
        except (EOFError, OSError):
            code = self.process.proc.wait()
            try:
                writer.finalize("failed")  # what it logged before it died is kept
            except Exception:
                pass
            self.process.respawn()
            self._warmed()
            return trial, TrialOutcome(None, _died(code))

    def _warm_up(self) -> None:
        """While the first trial trains over there (its process's imports done), this process, idle
        and waiting for it, imports what the sampler's BO steps will need (``warm_up``: BoTorch,
        about 2 s) on a thread; joined when that trial ends, so no import of this process ever
        overlaps the study's own."""
        import threading

        warm = getattr(self.study.sampler, "warm_up", None)
        if callable(warm):
            self._warming = threading.Thread(target=_quietly, args=(warm,), name="tune-agent-warm-up", daemon=True)
            self._warming.start()

    def _warmed(self) -> None:
        warming = self.__dict__.pop("_warming", None)
        if warming is not None:
            if warming.is_alive():  # a short first trial: the rest of the import is waited for here, said
                self.say(
                    "trial 1 ended; finishing what the BO steps need (BoTorch, the surrogate's source models), "
                    "begun while it trained"
                )
            warming.join()

    def poll(self) -> tuple[Any, Any] | None:
        return None

    def cancel(self) -> None:
        self._queue.clear()

    def close(self) -> None:
        self._queue.clear()
        if self._inline is not None:
            self._inline.close()
        else:  # interrupted mid-trial, the trial is closed as killed by the study loop
            self.process.close()
        # a warm-up still running outlives no study: it sets process-wide GPyTorch flags while it works
        warming = self.__dict__.pop("_warming", None)
        if warming is not None:
            warming.join()


def _quietly(warm: Callable[[], None]) -> None:
    """A warm-up that fails says nothing here: the BO step that needs what it made makes it again,
    and fails, if it must, where the study says so in one line."""
    try:
        warm()
    except Exception:
        pass


# -- the child ---------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """Linux: SIGTERM when the study's process dies, even while a trial trains (best effort)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_main(fd: int) -> None:
    """Imports torch and Lightning, then trains each trial it is sent until told to stop or the
    study's process goes away. Ctrl-C is the study's to handle: it stops this process."""
    import pickle
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a fork inherits the study's handler, which ends its workers
    _die_with_parent()
    conn = Connection(fd)
    import lightning.pytorch  # noqa: F401 - the point of this process: imported while the study prepares

    from agent.execution.trial import forwarding_logger, quiet_lightning, train_config

    quiet_lightning()
    try:
        first = conn.recv()
        if first[0] != "path":
            return
        sys.path[:] = first[1]
        setup = conn.recv_bytes()
    except (EOFError, OSError):
        return
    try:
        job, dataset, split, settings, accelerator, threads = pickle.loads(setup)
    except Exception as exc:
        conn.send(("refused", f"{type(exc).__name__}: {exc}"))
        return
    if threads is not None:
        import torch

        torch.set_num_threads(int(threads))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "trial":
            return
        _, number, config, pruning, scratch = message
        try:
            conn.send(("begun",))
            outcome = train_config(
                job,
                config,
                number,
                settings,
                dataset,
                split,
                forwarding_logger(conn.send, set(config)),
                pruning,
                on_epoch=lambda *epoch: conn.send(("epoch", *epoch)),
                accelerator=accelerator,
                scratch=Path(scratch),
            )
            conn.send(("done", outcome))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return


if __name__ == "__main__":
    child_main(int(sys.argv[1]))
