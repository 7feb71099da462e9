"""Commands timed as a person and a log see them: each a fresh process (or one run by a warm
process of the benchmark's own), its output read on a pseudo-terminal or through a pipe, with the
seconds to its first output, to a marker line and to trial 1's end. The start-up, reading and
client-fault benchmarks run their commands through it."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRIAL_ONE_DONE = re.compile(rb"trial 1 done \([^)]*\): .*? in ([0-9.]+) s")


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The benchmark's own environment less any tune-agent or tracking setting; a fresh process
    (``TUNE_AGENT_DAEMON=0``) unless ``extra`` says otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    env.update({"COLUMNS": "120", "TERM": env.get("TERM", "xterm"), "TUNE_AGENT_DAEMON": "0", **(extra or {})})
    return env


@contextlib.contextmanager
def warm_process(root: Path, say: Any = print, extra: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """A warm process of its own (in ``root``) for the arms that use one, started and waited for
    before them and stopped after; yields the environment those arms run with, whole: taken now,
    since this process's own environment changes as it imports (scikit-learn sets ``KMP_*``
    variables), and a command from another environment is not the warm process's to run."""
    exe = console_script()
    env = bench_env({"TUNE_AGENT_DAEMON": "1", "TUNE_AGENT_DAEMON_DIR": str(root / "warm-process"), **(extra or {})})
    say("starting a warm process for the arms that use one")
    started = subprocess.run(
        [exe, "daemon", "start", "--wait", "600"], env=env, capture_output=True, text=True, timeout=660
    )
    if started.returncode != 0:
        raise RuntimeError(f"the warm process did not start: {started.stderr.strip()[-300:]}")
    try:
        yield env
    finally:
        status = subprocess.run([exe, "daemon", "status"], env=env, capture_output=True, text=True, timeout=60)
        say(f"the warm process at the end: {status.stdout.strip()}")
        subprocess.run([exe, "daemon", "stop"], env=env, capture_output=True, timeout=60)


def timed_run(
    args: list[str],
    cwd: Path,
    tty: bool,
    marker: bytes,
    timeout: float = 300,
    env_extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Seconds to the first output, to ``marker`` and to trial 1's end; ``training_s``: when trial
    1's training began (its end less the seconds it says it trained), wherever it trained. ``env``:
    the whole environment (a warm process's arms); else :func:`bench_env` with ``env_extra``."""
    env = dict(env) if env is not None else bench_env(env_extra)
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower, close_fds=True
        )
        os.close(follower)
        read_fd = leader
    else:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        read_fd = proc.stdout.fileno()  # type: ignore[union-attr]
    first, marked, done, seen = _watch(proc, read_fd, marker, timeout)
    proc.wait(timeout=60)
    if tty:
        os.close(read_fd)
    text = seen.decode(errors="replace")
    found = TRIAL_ONE_DONE.search(seen)
    training = round(done - float(found.group(1)), 3) if done is not None and found else None
    return {
        "first_output_s": first,
        "first_trial_s": marked,
        "training_s": training,
        "exit": proc.returncode,
        "progress_display": "\x1b[" in text and "ETA" in text,
        "fitted_sources": "source models: fitting" in text,
        "fetched": "meta-models: fetching" in text,
        "tail": text[-300:],
    }


def _watch(
    proc: subprocess.Popen[bytes], read_fd: int, marker: bytes, timeout: float
) -> tuple[float | None, float | None, float | None, bytes]:
    """Reads ``proc``'s output until it ends (or ``timeout``): seconds to the first non-blank
    output, to ``marker`` and to trial 1's end (None: not seen), and the output."""
    start = time.perf_counter()
    first: float | None = None
    marked: float | None = None
    done: float | None = None
    seen = b""
    while time.perf_counter() - start < timeout:
        ready, _, _ = select.select([read_fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:  # the pty closes when the process ends
                chunk = b""
            if not chunk:
                break
            now = time.perf_counter() - start
            if first is None and chunk.strip():
                first = now
            seen += chunk
            if marked is None and marker in seen:
                marked = now
            if done is None and TRIAL_ONE_DONE.search(seen):
                done = now
        elif proc.poll() is not None:
            break
    return first, marked, done, seen


def maybe_warm(
    root: Path, warm: bool, say: Any = print, extra: dict[str, str] | None = None
) -> contextlib.AbstractContextManager[dict[str, str]]:
    """:func:`warm_process` when ``warm``, else a context that yields an empty environment."""
    if warm:
        return warm_process(root, say, extra)
    return contextlib.nullcontext({})


def console_script() -> str:
    """The console script of this environment."""
    return str(Path(sys.executable).with_name("tune-agent"))
