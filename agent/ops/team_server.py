"""A team tracking server: ``mlflow server`` over PostgreSQL, proxying its artifact store.

``tune-agent server --data-dir DIR`` keeps everything under DIR: ``postgres/`` (the PostgreSQL
cluster of :mod:`agent.ops.postgres`, on 127.0.0.1 only, its password in ``auth/postgres_password``),
``artifacts/`` (served by MLflow's artifact proxy, so agents need no shared disk) and ``logs/``. The
MLflow server binds to 127.0.0.1 unless ``--host`` says otherwise; with ``--auth`` it runs MLflow's
basic-auth app (its user database under ``auth/``, 0700, files 0600).

PostgreSQL and MLflow are children of this process that die with it: both get a parent-death
signal, so a ``SIGKILL`` of the server leaves nothing running. Stopping it (Ctrl-C, SIGTERM) stops
MLflow, then PostgreSQL. A start that finds a PostgreSQL or MLflow of its data dir still running
says so in one line and points to ``tune-agent server --data-dir DIR --stop``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.ops.postgres import PASSWORD_FILE, Postgres, alive, die_with_parent

ADMIN = "admin"
MLFLOW_PID = "mlflow.pid"  # under DIR/logs/: the MLflow server this data dir runs


def without_job_runner(env: dict[str, str]) -> dict[str, str]:
    """``env`` for an ``mlflow server``/``ui`` process without MLflow 3's GenAI job runner and its huey
    consumers (eight processes that import MLflow and poll; a store of training runs uses none),
    unless the variable is already set."""
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    return env


@dataclass(frozen=True)
class TeamServer:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 5000
    pg_port: int = 5433
    auth: bool = False
    made_admin_password: str = ""  # the admin's password when this start made it (said once)

    # -- where things are ----------------------------------------------------------------------
    @property
    def postgres(self) -> Postgres:
        return Postgres(self.data_dir, self.pg_port)

    @property
    def backend_uri(self) -> str:
        return self.postgres.uri

    @property
    def auth_dir(self) -> Path:
        return self.postgres.auth_dir

    @property
    def url(self) -> str:
        return f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '::') else self.host}:{self.port}"

    # -- what runs -----------------------------------------------------------------------------
    def running(self) -> list[str]:
        """What of this data dir is still running (a server up, or left by one that was killed)."""
        postgres = self.postgres.running()
        out = [postgres] if postgres else []
        mlflow = self.data_dir / "logs" / MLFLOW_PID
        if mlflow.exists():
            pid = mlflow.read_text().strip()
            if pid.isdigit() and alive(int(pid)):
                out.append(f"MLflow (pid {pid})")
        return out

    def check_not_running(self) -> None:
        left = self.running()
        if left:
            raise StoreError(
                f"{' and '.join(left)} of {self.data_dir} already running (a server still up, or left by "
                f"one that was killed); stop it with: tune-agent server --data-dir {self.data_dir} --stop"
            )

    def stop(self, say: Callable[[str], None] = print) -> bool:
        """Stops what of this data dir is running; False when nothing was."""
        left = self.running()
        mlflow = self.data_dir / "logs" / MLFLOW_PID
        if mlflow.exists():
            pid = mlflow.read_text().strip()
            if pid.isdigit() and alive(int(pid)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGTERM)
            mlflow.unlink(missing_ok=True)
        self.postgres.stop()
        say(f"stopped {' and '.join(left)} of {self.data_dir}" if left else f"nothing of {self.data_dir} was running")
        return bool(left)

    # -- MLflow --------------------------------------------------------------------------------
    def mlflow_command(self) -> list[str]:
        artifacts = self.data_dir / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            self.backend_uri,
            "--artifacts-destination",
            str(artifacts),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--workers",
            "2",
        ]
        if self.auth:
            cmd += ["--app-name", "basic-auth"]
        return cmd

    def mlflow_env(self) -> dict[str, str]:
        env = without_job_runner(dict(os.environ))
        env["PGPASSWORD"] = self.postgres.password()
        if self.auth:
            from agent.ops.team_users import auth_environment

            made, extra = auth_environment(self.auth_dir, ADMIN)
            if made:  # said once by serve(); the instance is otherwise fixed
                object.__setattr__(self, "made_admin_password", made)
            env.update({k: v for k, v in extra.items() if k not in env or k == "MLFLOW_AUTH_CONFIG_PATH"})
        return env

    def _say_ready(self, say: Callable[[str], None]) -> None:
        say(
            f"tracking server ready at {self.url} (backend {self.backend_uri}; artifacts proxied from "
            f"{self.data_dir / 'artifacts'}{'; basic auth on' if self.auth else ''})"
        )
        say(f"agents: tune-agent start ... --tracking-uri {self.url}")
        if self.auth:
            say(
                f"basic auth: admin user '{ADMIN}', password in {self.data_dir / 'auth' / 'basic_auth.ini'}; "
                "agents read MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"
            )
            if self.made_admin_password:  # made by this start: said once, here
                say(f"admin password (made now, shown once): {self.made_admin_password}")
                say(f"add teammates with: tune-agent server user add NAME --data-dir {self.data_dir}")

    def serve(self, say: Callable[[str], None] = print, ready_timeout: float = 180) -> int:
        """Runs until interrupted or until MLflow exits; returns MLflow's exit code (0 when stopped)."""
        from agent.tuning.heartbeat import phase

        self.check_not_running()
        phase(say, "making PostgreSQL's cluster (initdb, on the first start only)")
        created = self.postgres.init()
        phase(say, "starting PostgreSQL")
        postgres = self.postgres.start(say)
        say(
            f"PostgreSQL {'created and ' if created else ''}running on 127.0.0.1:{self.pg_port} "
            f"({self.postgres.pgdata}; password in {self.auth_dir / PASSWORD_FILE})"
        )
        log = open(self.data_dir / "logs" / "mlflow.log", "a")
        try:
            proc = subprocess.Popen(
                self.mlflow_command(),
                env=self.mlflow_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # files MLflow makes (the auth app's users.db) are its own alone
                preexec_fn=die_with_parent(signal.SIGTERM, umask=0o077),
            )
        except BaseException:
            self.postgres.stop(postgres)
            raise
        (self.data_dir / "logs" / MLFLOW_PID).write_text(str(proc.pid))
        phase(say, "starting the MLflow server (its database's tables made on the first start)")
        stop = {"now": False}

        def _stop(signum: int, frame: object) -> None:
            stop["now"] = True

        old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if wait_until_up(self.url, ready_timeout, proc, stop):
                for made in self.auth_dir.glob("*"):  # made before this version kept them private
                    made.chmod(0o600)
                self._say_ready(say)
            phase(say, "")  # serving: silence is right until it stops
            while proc.poll() is None and not stop["now"]:
                time.sleep(0.2)
            return 0 if stop["now"] else int(proc.returncode or 0)
        finally:
            phase(say, "stopping the MLflow server and PostgreSQL")
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            log.close()
            (self.data_dir / "logs" / MLFLOW_PID).unlink(missing_ok=True)
            self.postgres.stop(postgres)
            for s, handler in old.items():
                signal.signal(s, handler)
            say("tracking server and PostgreSQL stopped")


def serve_ui(
    args: list[str], url: str, say: Callable[[str], None] = print, meanwhile: Callable[[], None] | None = None
) -> int:
    """Runs ``mlflow ui`` (``args``) until Ctrl-C or its own exit, its output passed through ``say``
    line by line, and a line of its own once it answers at ``url``; while it starts, a heartbeat's
    ``say`` speaks for it, and ``meanwhile`` runs here (the server starts in its own process, in
    parallel). Returns its exit code (0 when stopped by Ctrl-C)."""
    import threading

    from agent.tuning.heartbeat import phase

    env = without_job_runner(dict(os.environ))
    # its web stack's deprecation notices are MLflow's to act on, not the user's
    env.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore:starlette.middleware.wsgi is deprecated")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _relay() -> None:
        for line in proc.stdout or ():
            if line.strip():
                say(line.rstrip())

    relay = threading.Thread(target=_relay, name="tune-agent-ui-output", daemon=True)
    relay.start()
    try:
        if meanwhile is not None:
            meanwhile()
        phase(say, "starting the MLflow UI")
        if wait_until_up(url, 600, proc):
            say(f"MLflow UI answers on {url} (Ctrl-C stops it)")
        phase(say, "")
        return int(proc.wait())
    except KeyboardInterrupt:
        phase(say, "stopping the MLflow UI")
        proc.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reached it too; a signal to this process alone did not
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    finally:
        relay.join(timeout=5)


def wait_until_up(
    url: str, timeout: float, proc: subprocess.Popen[Any] | None = None, stop: dict[str, bool] | None = None
) -> bool:
    """Polls ``url``/health until it answers; False when ``proc`` died, ``stop`` was set or time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (proc is not None and proc.poll() is not None) or (stop and stop["now"]):
            return False
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    return False
