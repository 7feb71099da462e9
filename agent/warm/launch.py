"""How a command's process came to be, handed to the command line's entry point
(:func:`agent.cli.main.main`) by whoever started it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    """A fresh process is ``Launch()``. A command the warm process forked (:mod:`agent.warm.server`)
    carries its client's pid (the command's time counts from the client's launch: the closing
    line's "since launch") and ``fork=True``: this process imported Lightning and has not computed
    with torch, so a study's first trial process may be a fork of it."""

    client: int | None = None
    fork: bool = False
