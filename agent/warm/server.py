"""The warm process itself (:mod:`agent.warm.process` says what it is and why): imports what
the commands import, then forks one process per command it is handed, and ends when idle."""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

from agent.warm.launch import Launch
from agent.warm.process import WARM_IMPORTS, all_sockets, ask, folder, idle_seconds, recv_request, socket_path


def serve(which: str, path_list: list[str], run: Callable[[list[str], Launch], None]) -> None:
    """The warm process for key ``which``: imports, then serves until idle (see the module doc).
    ``run`` is the command line's entry point (:func:`agent.cli.main.main`)."""
    import fcntl
    import time

    where = folder()
    lock = open(where / f"{which}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another one for this key is starting or serving
    sys.path[:] = path_list  # the console script's, whose first entry is its folder, not '' (``-c``'s working folder):
    # a fork runs in the user's folder, and a module there must not shadow one a fresh process would import
    began = time.time()
    if not _import_all():
        return
    me = os.getpid()
    path = socket_path(where, which)
    listener = _listen(where, which, me, path)
    inode = os.stat(path).st_ino
    print(f"serving {path} (pid {me}, imports {time.time() - began:.1f} s)", file=sys.stderr, flush=True)
    for other in all_sockets(where):  # one per user: the newest environment wins
        if other != path:
            ask(other, {"control": "stop"}, timeout=2.0)
    loop = _Loop(listener, lock, which, began, run)
    try:
        loop.serve(path, inode)
    finally:
        if os.getpid() == me and _still_mine(path, inode):
            path.unlink(missing_ok=True)


def _import_all() -> bool:
    """Imports :data:`WARM_IMPORTS` (one that fails is said and skipped) and freezes what they made;
    False when an import started a thread, since a fork of this process is then unsafe."""
    import gc
    import importlib
    import threading

    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"not imported: {name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if threading.active_count() != 1:
        print(f"an import started {threading.active_count() - 1} thread(s): forking is unsafe; ending", file=sys.stderr)
        return False
    gc.collect()
    gc.freeze()
    return True


def _listen(where: Path, which: str, me: int, path: Path) -> socket.socket:
    """The listening socket at ``path`` (mode 0600), put in place whole."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = where / f".{which}.{me}"
    listener.bind(str(temporary))
    os.chmod(temporary, 0o600)
    listener.listen(16)
    os.replace(temporary, path)
    return listener


class _Loop:
    """The warm process's event loop: each request a fork that runs the command, each command's end
    sent to its client, and a command whose client went away ended too."""

    def __init__(
        self, listener: socket.socket, lock: IO[str], which: str, began: float, run: Callable[[list[str], Launch], None]
    ) -> None:
        import signal
        import time

        self.listener, self.lock, self.which, self.began, self.run = listener, lock, which, began, run
        self.me = os.getpid()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, "listen")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.children: dict[int, socket.socket] = {}
        self.idle = idle_seconds()
        self.last = time.monotonic()
        self.served = 0
        self.stopping = False

    def serve(self, path: Path, inode: int) -> None:
        """Until idle, stopped, or replaced at ``path``, with no command running."""
        import time

        while True:
            for item, _ in self.selector.select(timeout=1.0):
                if item.data == "wake":
                    os.read(self.wake_r, 4096)
                    _reap(self.children, self.selector)
                elif item.data == "listen":
                    self._accept()
                else:  # the client of a running command: it went away (killed), so the command ends too
                    self._client_readable(cast(socket.socket, item.fileobj), item.data)
            _reap(self.children, self.selector)
            if not self.children and (
                self.stopping or time.monotonic() - self.last > self.idle or not _still_mine(path, inode)
            ):
                break

    def _accept(self) -> None:
        import time

        conn, _ = self.listener.accept()
        self.last = time.monotonic()
        outcome = _take(conn, self.which, self.me, self.began, self.served, self.children)
        if outcome == "stop":
            self.stopping = True
        elif isinstance(outcome, tuple):  # a command: fork it
            request, fds = outcome
            self._fork(conn, request, fds)

    def _fork(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            held: tuple[socket.socket | IO[str], ...] = (self.listener, conn, self.lock, *self.children.values())
            for item in held:
                item.close()
            _become_command(request, fds, self.run)  # never returns
        try:
            os.setpgid(pid, pid)  # also here: a signal relayed at once finds the group
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        self.served += 1
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        conn.sendall(f"pid {pid}\n".encode())

    def _client_readable(self, conn: socket.socket, pid: int) -> None:
        import signal

        try:
            gone = not conn.recv(4096)
        except OSError:
            gone = True
        if gone:
            self.selector.unregister(conn)
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def _still_mine(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _take(
    conn: socket.socket, which: str, me: int, began: float, served: int, children: dict[int, socket.socket]
) -> Any:
    """Reads one request: a control one is answered here ("stop" returned for a stop); a command's
    ``(request, fds)`` is returned to be forked; anything else (another user, garbage) is closed."""
    conn.settimeout(5.0)
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        client, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return None
        request, fds = recv_request(conn)
    except (OSError, EOFError, ValueError):
        conn.close()
        return None
    conn.settimeout(None)
    control = request.get("control")
    if control is not None:
        for fd in fds:
            os.close(fd)
        answer = {
            "pid": me,
            "key": which,
            "since": began,
            "served": served,
            "running": len(children),
            "rss_mb": _rss_mb(),
        }
        try:
            conn.sendall((json.dumps(answer) + "\n").encode())
        except OSError:
            pass
        conn.close()
        return "stop" if control == "stop" else None
    if len(fds) != 3 or not isinstance(request.get("run"), list):
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    request["client"] = client  # the command counts its time from the client's launch (SO_PEERCRED's pid)
    return request, fds


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _reap(children: dict[int, socket.socket], selector: Any) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        try:
            conn.sendall((f"signal {-code}\n" if code < 0 else f"exit {code}\n").encode())
        except OSError:
            pass
        try:
            selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()


def _become_command(request: dict[str, Any], fds: list[int], run: Callable[[list[str], Launch], None]) -> None:
    """In the fork: becomes the client's command (its streams, folder, environment, umask, argv) and
    runs it; never returns (:func:`_end`)."""
    import io
    import signal

    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setpgid(0, 0)
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    argv = [str(a) for a in request["run"]]
    sys.argv = ["tune-agent", *argv]
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(  # type: ignore[misc]  # typeshed: Final; the fork replaces it
        io.FileIO(0, "r", closefd=False), encoding=encoding
    )
    out_tty = os.isatty(1)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(  # type: ignore[misc]
        io.FileIO(1, "w", closefd=False),
        encoding=encoding,
        errors=errors,
        line_buffering=out_tty,
        write_through=out_tty,
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # type: ignore[misc]
        io.FileIO(2, "w", closefd=False), encoding=encoding, errors="backslashreplace", line_buffering=True
    )
    _fresh_randomness()
    run_exit_handlers = _own_exit_handlers()
    code: Any = 0
    try:
        run(argv, Launch(client=int(request["client"]), fork=True))
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    _end(code, run_exit_handlers)


def _own_exit_handlers() -> Callable[[], None]:
    """The exit handlers the warm process's imports registered are dropped (together they take 60 ms
    per command, for state the command never made), except the two that act on what a command
    makes: logging's flush and multiprocessing's end of its pools and children. What the command
    registers runs, as in a fresh process. Returns what runs them, for :func:`_end`.

    CPython's ``atexit._clear`` and ``atexit._run_exitfuncs`` do it; an interpreter without them
    gets the same through the public API: ``atexit.register`` records the command's handlers here
    (the warm process's own stay registered and never run, as :func:`_end` leaves by ``os._exit``)."""
    import atexit
    import logging

    kept: list[Callable[[], Any]] = [logging.shutdown]
    util = sys.modules.get("multiprocessing.util")
    mp_exit = getattr(util, "_exit_function", None) if util is not None else None
    if callable(mp_exit):  # without it, a command's pools are ended as their objects are collected
        kept.append(mp_exit)
    clear, run_all = getattr(atexit, "_clear", None), getattr(atexit, "_run_exitfuncs", None)
    if callable(clear) and callable(run_all):
        clear()
        for handler in kept:
            atexit.register(handler)
        return run_all
    recorded: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = [(h, (), {}) for h in kept]

    def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        recorded.append((func, args, kwargs))
        return func

    def unregister(func: Callable[..., Any]) -> None:
        recorded[:] = [entry for entry in recorded if entry[0] != func]

    def run_recorded() -> None:
        import traceback

        for func, args, kwargs in reversed(recorded):  # last registered first, as atexit runs them
            try:
                func(*args, **kwargs)
            except Exception:
                traceback.print_exc()

    atexit.register, atexit.unregister = register, unregister  # type: ignore[assignment]
    return run_recorded


def _join_threads() -> None:
    """What the interpreter does at exit before the handlers: ``threading._shutdown`` (executors'
    exit hooks, then the non-daemon threads joined); where it is missing, the joins."""
    import threading

    shutdown = getattr(threading, "_shutdown", None)
    if callable(shutdown):
        shutdown()
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _end(code: Any, run_exit_handlers: Callable[[], None]) -> None:
    """Ends as the interpreter would (the command's threads joined, exit handlers run, streams
    flushed), without tearing down the thousands of modules the warm process imported: that
    teardown takes half a second per command and does nothing a process exit does not."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        _join_threads()
        run_exit_handlers()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


def _fresh_randomness() -> None:
    """A fresh process draws new global seeds; a fork would share the warm process's."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
