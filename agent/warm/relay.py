"""The client's side of a command run in the warm process (:func:`agent.warm.process.forward`):
the signals a terminal sends, relayed to the command, and the warm process's lines about the
command, followed to its exit code."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO


class Relay:
    """The signals a terminal sends, passed on to the command's process group once the warm process
    says its pid (held until then); Ctrl-Z stops the command and this process together."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []

    def install(self) -> dict[int, Any]:
        """Sets the handlers; returns the ones they replace."""
        import signal

        relayed = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)
        before: dict[int, Any] = {signum: signal.getsignal(signum) for signum in (*relayed, signal.SIGTSTP)}
        for signum in relayed:
            signal.signal(signum, self.relay)
        signal.signal(signal.SIGTSTP, self.suspend)
        return before

    def started(self, pid: int) -> None:
        """The command runs as process group ``pid``: the signals held so far go to it."""
        self.pid = pid
        for signum in self.pending:
            self.relay(signum, None)

    def relay(self, signum: int, frame: object) -> None:
        if self.pid is not None:
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:
                pass
        else:
            self.pending.append(signum)

    def suspend(self, signum: int, frame: object) -> None:  # Ctrl-Z: the command stops and goes on with this process
        import signal

        if self.pid is not None:
            os.killpg(self.pid, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stopped here until the shell's SIGCONT
        signal.signal(signal.SIGTSTP, self.suspend)
        if self.pid is not None:
            os.killpg(self.pid, signal.SIGCONT)


def follow(reader: TextIO, relay: Relay, before: dict[int, Any]) -> int | None:
    """The command's exit code from the warm process's lines about it (its pid, its end), or this
    process dies of the signal that ended it; None when the warm process closed before it forked."""
    import signal

    while True:
        try:
            line = reader.readline()
        except InterruptedError:
            continue
        if not line and relay.pid is None:  # closed before it forked (a warm process ending as this connected)
            for signum, handler in before.items():
                signal.signal(signum, handler)
            if relay.pending:
                sys.stderr.write("tune-agent: interrupted\n")
                return 130
            return None  # the command runs here
        if not line:
            sys.stderr.write(
                "tune-agent: the warm process went away while it ran the command "
                f"(pid {relay.pid}); `tune-agent daemon status` says more\n"
            )
            return 1
        word, _, value = line.strip().partition(" ")
        if word == "pid":
            relay.started(int(value))
        elif word == "exit":
            return int(value)
        elif word == "signal":  # die as the command died, so a shell sees the same status
            number = int(value)
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)
            return 128 + number
