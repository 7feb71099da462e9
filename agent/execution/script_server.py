"""A user's LightningCLI script run for each trial in a fork of a process that has Lightning imported.

Importing torch and Lightning takes seconds (5 to 7 on 2 busy cores), and a LightningCLI trial
that starts a fresh Python pays it every time. :class:`ScriptServer` is a child of the study's
process that imports them once (and jsonargparse, MLflow's model saving and tune-agent's reporting
callback), then forks one process per trial: the fork becomes the user's script, run as
``__main__`` with the trial's command line, folder, environment and output files, in a process
group of its own. The user's own modules are imported by each fork, never by the server, so an
edit to them reaches the next trial. Each fork's exit code is written to its ``exit`` file.

The server ends when the study's process closes its input (or dies), taking its forks with it. An
import that starts a thread makes forking unsafe: the server then says so and each trial starts a
fresh Python (:mod:`agent.execution.cli_trial`), as it does where ``fork`` does not exist.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

PRELOAD = (
    "torch",
    "lightning.pytorch",
    "lightning.pytorch.cli",
    "jsonargparse",
    "agent.execution.cli_reporter",
    "agent.project.probe",
)


class ScriptServer:
    """The study's side: starts the server; :meth:`run` hands it one trial and returns its pid."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from agent.execution.script_server import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.ready: bool | None = None  # None until the server said whether it forks
        self.lock = threading.Lock()

    def usable(self) -> bool:
        """Waits for the server's imports; whether it forks trials (False: run them fresh)."""
        with self.lock:
            if self.ready is None:
                assert self.process.stdout is not None
                line = self.process.stdout.readline()
                self.ready = line.strip() == "ready"
            return bool(self.ready) and self.process.poll() is None

    def run(self, argv: list[str], cwd: str, env: dict[str, str], folder: Path) -> int:
        """Forks the trial (``argv[1:]`` is the script and its arguments); its pid."""
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {"argv": argv[1:], "cwd": cwd, "env": env, "folder": str(folder)}
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            return int(json.loads(self.process.stdout.readline())["pid"])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()


def serve() -> None:
    """The server's loop (in its own process): imports, then one fork per request line."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    forks = threading.active_count() == 1 and hasattr(os, "fork")
    print("ready" if forks else "no-fork", flush=True)
    if not forks:
        return
    children: dict[int, Path] = {}
    try:
        while True:
            _reap(children)
            readable, _, _ = select.select([sys.stdin], [], [], 0.1)
            if not readable:
                continue
            line = sys.stdin.readline()
            if not line:
                break
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _become_trial(request)
            children[pid] = Path(request["folder"])
            print(json.dumps({"pid": pid}), flush=True)
    finally:
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(children, wait=True)


def _reap(children: dict[int, Path], wait: bool = False) -> None:
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 0
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            (children.pop(pid) / EXIT).write_text(str(code))


EXIT = "exit"  # the fork's exit code, in the trial's folder


def _become_trial(request: dict[str, Any]) -> None:
    """In the fork: the user's script as ``__main__`` (never returns)."""
    code = 1
    try:
        os.setsid()  # a group of its own: a stop reaches the DataLoader workers it starts
        folder = Path(request["folder"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for stream, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, stream)
            os.close(fd)
        sys.stdin.close()
        script = request["argv"][0]
        sys.argv = list(request["argv"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = [str(Path(script).resolve().parent), *extra]
        import runpy

        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
