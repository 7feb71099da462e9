"""The ``tune-agent`` console script: the command goes to this user's warm process when one runs for
this environment (:mod:`agent.warm.process`), and runs here otherwise, starting one at its end
for the next command. Only standard-library modules and that light module are imported before the
command is handed over."""

from __future__ import annotations

import sys
import time

_IMPORTED = time.perf_counter()  # the console script's launch, near enough: this is its first import
LAUNCHED: float | None = None  # set by main(): a command of its own process, timed from its launch

# Commands that gain from the warm process's imports; ``daemon`` manages it, ``bench`` measures
# fresh processes, ``server`` and ``ui`` run for hours, ``--help`` and ``--version`` are light.
FORWARDED = frozenset(
    {
        "start",
        "resume",
        "create",
        "ask",
        "tell",
        "best",
        "report",
        "history",
        "doctor",
        "neighbors",
        "evaluate",
        "import",
        "bootstrap",
        "meta",
    }
)


def _command(argv: list[str]) -> str | None:
    """The command's name; None when an option comes first (``--help``, ``--version``)."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main() -> None:
    import os

    global LAUNCHED
    LAUNCHED = _IMPORTED

    argv = sys.argv[1:]
    launched_with = dict(os.environ)  # before any import sets a variable: the key of this command's environment
    warm, which = None, ""
    if _command(argv) in FORWARDED and not ({"-h", "--help", "--help-all", "--version"} & set(argv)):
        from agent.warm import process as warm_process

        if warm_process.enabled():
            warm, which = warm_process, warm_process.key(launched_with)  # once: to hand over, or to start one
            forwarded = warm.forward(argv, which)
            if forwarded is not None:
                sys.exit(forwarded)
    try:
        from agent.cli.main import main as run

        run(argv)
        code: object = 0
    except SystemExit as exc:  # every command ends here: its exit status
        code = exc.code
    finally:
        if warm is not None:
            _start_for_next_time(warm, launched_with, which)
    _exit_now(code)


def bench_main() -> None:
    """The ``tune-agent-bench`` console script: the benchmarks, each a fresh process."""
    from agent.cli.main import bench_main as run

    try:
        run(sys.argv[1:])
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    _exit_now(code)


def _exit_now(code: object) -> None:
    """Ends the process once its work is said and written: its other threads that are not daemons
    joined, the exit handlers run (temporary folders, loggers, child processes) and the output
    flushed, then ``os._exit``. The interpreter's own teardown of torch, MLflow and their C
    libraries, 1 to 3 s of silence after the last line, is skipped, as a forked child skips it."""
    import atexit
    import os
    import threading

    if isinstance(code, str):  # sys.exit("message"): said on stderr, exit status 1, as Python does
        sys.stderr.write(code + "\n")
        code = 1
    # as the interpreter ends: the thread pools' exit hooks first (they stop their idle workers), then
    # every thread that is not a daemon joined
    shutdown = getattr(threading, "_shutdown", None)
    if callable(shutdown):
        shutdown()
    else:
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a pipe closed by its reader; a stream already closed
            pass
    os._exit(code if isinstance(code, int) else 0)


def _start_for_next_time(warm, env: dict[str, str], which: str) -> None:
    pid = warm.start_in_background(env, which)
    if pid is not None:
        sys.stderr.write(
            f"tune-agent: started a warm process (pid {pid}) that keeps the libraries imported, so the "
            f"next commands start at once; it ends after {warm.idle_seconds() / 60:g} min without one "
            "(`tune-agent daemon stop`; TUNE_AGENT_DAEMON=0 never starts one)\n"
        )
        sys.stderr.flush()


def serve_here() -> None:
    """The warm process: ``python -c "from agent.cli.entry import serve_here; serve_here()" KEY PATH``
    (:func:`agent.warm.process.start_in_background` starts it); its forks run :func:`agent.cli.main.main`."""
    import json

    from agent.cli.main import main as run
    from agent.warm.server import serve

    serve(sys.argv[1], json.loads(sys.argv[2]), run=run)
