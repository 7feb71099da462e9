"""A per-user process that keeps tune-agent's libraries imported, so a command starts in a fraction of a second.

Why: on two cores a fresh ``tune-agent start`` spends 4-5 s importing before its first trial trained
(torch 1.9 s, Lightning 2.3 s, MLflow 2.2 s, scikit-learn 1.0 s, pandas 0.9 s), and
no lazy import removes an import that the first trial needs. The same pattern as Gradle's daemon
and Rails' Spring preloader: the console script (:mod:`agent.cli.entry`) hands its command to a
process that already imported everything; that process forks, and the fork runs the command
with the client's arguments, working directory, environment, umask and standard streams (passed
as file descriptors), as its own process group. The client forwards the signals a terminal sends
(Ctrl-C reaches the command as it would have) and exits with the command's exit code, or dies
of the same signal. A trial process the command starts is a fork of the command's process too
(:mod:`agent.execution.trial_process`), so the first trial trains at once.

The rules that keep it from surprising anyone:
- **Keyed**: a command goes to the warm process only when it was started from the same
  interpreter, import path, installed packages (each ``sys.path`` folder's modification time),
  tune-agent source files (their sizes and modification times) and environment (every variable
  but a few that name the terminal session: :data:`VOLATILE`). Anything else: a fresh process,
  and a new warm process for next time, which replaces the old one: one per user at a time.
- **Private**: its socket lives in a folder only the user can open (mode 0700, checked), and it
  serves only connections of its own user (``SO_PEERCRED``).
- **Bounded**: it ends after :data:`IDLE_SECONDS` without a command (``TUNE_AGENT_DAEMON_IDLE``);
  it never computes anything itself (so no thread pool of torch is running when it forks), only
  imports; ``gc.freeze()`` keeps the forks from copying its pages as they collect.
- **Said**: the first command that starts one says so in one line on stderr;
  ``tune-agent daemon status`` / ``stop``; ``TUNE_AGENT_DAEMON=0`` never uses or starts one.

The warm process itself is :mod:`agent.warm.server`. The first command of an environment runs
in a fresh process and starts the warm process at its end, in the background (about 10 s of
imports, on a core the command does not need any more).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
from pathlib import Path
from typing import Any

from agent.warm.relay import Relay, follow

ENV = "TUNE_AGENT_DAEMON"  # 0: never use or start one
DIR_ENV = "TUNE_AGENT_DAEMON_DIR"  # where the sockets live (default: $XDG_RUNTIME_DIR or ~/.cache)
IDLE_ENV = "TUNE_AGENT_DAEMON_IDLE"
IDLE_SECONDS = 15 * 60

# Variables that differ between two terminals of one user and that no import reads.
VOLATILE = frozenset(
    {
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "COLUMNS",
        "LINES",
        "TERM_SESSION_ID",
        "WINDOWID",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "TMUX_PANE",
        "STY",
        "PS1",
        "PS2",
        "PROMPT_COMMAND",
        "LS_COLORS",
        "XDG_SESSION_ID",
        "GPG_TTY",
        "HISTFILE",
        "HISTSIZE",
        "HISTCONTROL",
        "SECURITYSESSIONID",
    }
)

# What the commands import, imported once by the warm process (names, so this module stays light).
WARM_IMPORTS = (
    "numpy",
    "pandas",
    "scipy.stats",
    "sklearn",
    "sklearn.preprocessing",
    "sklearn.model_selection",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "torch",
    "lightning.pytorch",
    "torchmetrics",
    "botorch",
    "gpytorch",
    "matplotlib",
    "optuna",
    "rich.console",
    "click",
    "agent.tuning.service",
    "agent.execution.launch",
    "agent.execution.runner",
    "agent.execution.workers",
    "agent.execution.trial",
    "agent.execution.trial_process",
    "agent.execution.progress",
    "agent.knowledge.base",
    "agent.knowledge.mlflow",
    "agent.samplers.bo",
    "agent.jobs.registry",
    "agent.data.load",
    "agent.data.builtin",
    "agent.data.tabular",
    "agent.meta.handcrafted",
    "agent.meta.neighbours",
    "agent.tuning.warmstart",
    "agent.tuning.source_models",
    "agent.tuning.report",
    "agent.tuning.report_store",
    "agent.ops.doctor",
)

_LEN = struct.Struct("!I")


class Unusable(Exception):
    """The socket folder cannot be trusted (another owner, open to others) or made."""


def idle_seconds() -> float:
    return float(os.environ.get(IDLE_ENV, IDLE_SECONDS))


def platform_gap() -> str | None:
    """What this platform lacks for a warm process (Unix sockets, passing descriptors, the peer's
    credentials, fork), or None: without it every command runs fresh."""
    import socket

    for name, present in (
        ("Unix sockets", hasattr(socket, "AF_UNIX")),
        ("passing file descriptors over a socket", hasattr(socket, "send_fds")),
        ("the peer's credentials (SO_PEERCRED)", hasattr(socket, "SO_PEERCRED")),
        ("fork", hasattr(os, "fork")),
    ):
        if not present:
            return name
    return None


def enabled(env: dict[str, str] | None = None) -> bool:
    """Whether commands go through a warm process: asked for (``TUNE_AGENT_DAEMON`` not 0) and
    possible here (:func:`platform_gap`)."""
    return (env if env is not None else os.environ).get(ENV, "1").strip() != "0" and platform_gap() is None


def folder() -> Path:
    """The user's socket folder, made 0700 if missing; :class:`Unusable` if another user owns it or
    others may enter it."""
    given = os.environ.get(DIR_ENV)
    if given:
        where = Path(given)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        where = Path(os.environ["XDG_RUNTIME_DIR"]) / "tune-agent"
    else:
        where = Path.home() / ".cache" / "tune-agent" / "daemon"
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = where.stat()
    except OSError as exc:
        raise Unusable(f"{where}: {exc.strerror}") from None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise Unusable(
            f"{where} is not private to this user (owner uid {info.st_uid}, mode {oct(info.st_mode & 0o777)})"
        )
    return where


def _source_stats() -> list[tuple[str, int, int]]:
    import agent

    root = Path(agent.__file__).parent
    stats = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                info = os.stat(os.path.join(dirpath, name))
                stats.append((os.path.relpath(os.path.join(dirpath, name), root), info.st_mtime_ns, info.st_size))
    return sorted(stats)


def _path_stats(path: list[str]) -> list[tuple[str, int]]:
    out = []
    for entry in path:
        try:
            out.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            out.append((entry, -1))
    return out


def key(env: dict[str, str] | None = None, path: list[str] | None = None) -> str:
    """What a command must share with a warm process to be run by it (see the module doc)."""
    env = dict(os.environ if env is None else env)
    path = list(sys.path if path is None else path)
    parts = {
        "uid": os.getuid(),
        "python": sys.executable,
        "version": sys.version,
        "path": _path_stats(path[1:]),  # [0] is the script's folder, or the daemon's working folder
        "source": _source_stats(),
        "env": sorted((k, v) for k, v in env.items() if k not in VOLATILE),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def socket_path(where: Path, which: str) -> Path:
    return where / f"{which}.sock"


# -- the wire --------------------------------------------------------------------------------------
def send_request(sock: socket.socket, request: dict[str, Any], fds: list[int] = ()) -> None:  # type: ignore[assignment]
    body = json.dumps(request).encode()
    head = _LEN.pack(len(body))
    if fds:
        socket.send_fds(sock, [head], list(fds))
    else:
        sock.sendall(head)
    sock.sendall(body)


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise EOFError("closed mid-message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(sock, _LEN.size, 3)
    if len(head) < _LEN.size:
        head += _exactly(sock, _LEN.size - len(head))
    (n,) = _LEN.unpack(head)
    return json.loads(_exactly(sock, n)), list(fds)


def ask(path: Path, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
    """A control request (``status``, ``stop``) to the warm process at ``path``; None if none answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            send_request(sock, request)
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        return json.loads(data) if data else None
    except (OSError, ValueError):
        return None


def all_sockets(where: Path) -> list[Path]:
    return sorted(where.glob("*.sock"))


# -- the client's half: used by agent.cli.entry -----------------------------------------------------
def forward(argv: list[str], which: str | None = None) -> int | None:
    """Runs ``argv`` in this user's warm process for this environment (``which``: its :func:`key`,
    when the caller has it) and returns its exit code (or dies of the signal that ended it); None
    when there is no such process (run it here)."""
    sock = _send_command(argv, which)
    if sock is None:
        return None
    relay = Relay()
    before = relay.install()
    return follow(sock.makefile("r", encoding="utf-8"), relay, before)


def _send_command(argv: list[str], which: str | None) -> socket.socket | None:
    """A connection to the warm process that ``argv`` was sent on; None when there is none."""
    try:
        where = folder()
    except Unusable:
        return None
    path = socket_path(where, which or key())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    streams = [_stream(fd) for fd in (0, 1, 2)]  # a closed one (a job started with <&-) becomes /dev/null there too
    try:
        sock.connect(str(path))
        send_request(sock, {"run": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": _umask()}, streams)
    except OSError:
        sock.close()
        return None
    finally:
        for fd, stream in zip((0, 1, 2), streams):
            if stream != fd:
                os.close(stream)
    return sock


def _stream(fd: int) -> int:
    try:
        os.fstat(fd)
        return fd
    except OSError:
        return os.open(os.devnull, os.O_RDWR)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def start_in_background(env: dict[str, str] | None = None, which: str | None = None) -> int | None:
    """Starts the warm process for this environment unless one is up; its pid, or None. ``env``:
    the environment the command was launched with, when this process's own has changed since (a
    command's imports set variables: scikit-learn's ``KMP_*``), so the next command's key matches."""
    import subprocess

    env = dict(os.environ if env is None else env)

    try:
        where = folder()
    except Unusable:
        return None
    import fcntl

    which = which or key(env)
    if ask(socket_path(where, which), {"control": "status"}, timeout=1.0) is not None:
        return None
    with open(where / f"{which}.lock", "w") as lock:  # held by one that is still importing
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        fcntl.flock(lock, fcntl.LOCK_UN)
    log = open(where / f"{which}.log", "ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from agent.cli.entry import serve_here; serve_here()", which, json.dumps(sys.path)],
            cwd=where,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    return proc.pid


def describe() -> tuple[bool, str]:
    """``doctor``'s line: (fine, what it says) on whether commands here start at once."""
    gap = platform_gap()
    if gap is not None:
        return True, f"off: this platform lacks {gap}; every command is a fresh process"
    if not enabled():
        return True, "off (TUNE_AGENT_DAEMON=0): every command is a fresh process"
    try:
        where = folder()
    except Unusable as exc:
        return False, f"{exc}: every command runs fresh (set {DIR_ENV})"
    answer = ask(socket_path(where, key()), {"control": "status"}, timeout=2.0)
    if answer is None:
        return True, "none for this environment: the next command starts one when it ends"
    return True, (
        f"pid {answer['pid']} serves this environment: {answer['served']} command(s) run, "
        f"{answer['rss_mb']:.0f} MB resident (`tune-agent daemon stop` ends it)"
    )
