"""A team tracking server: ``mlflow server`` over PostgreSQL, proxying its artifact store.

``tune-agent server --data-dir DIR`` keeps everything under DIR: ``postgres/`` (a PostgreSQL
cluster made with ``initdb`` on first start, listening on 127.0.0.1 only, trust authentication
for local connections — the database is reachable only from this machine; people reach MLflow
over HTTP), ``artifacts/`` (served by MLflow's artifact proxy, so agents need no shared disk) and
``logs/``. The MLflow server binds to 127.0.0.1 unless ``--host`` says otherwise; with ``--auth``
it runs MLflow's basic-auth app (its user database under ``auth/``). Stopping the server
(Ctrl-C, SIGTERM) stops MLflow, then PostgreSQL.

PostgreSQL refuses to run as root: when this process is root, the cluster is made and run as the
``postgres`` system user (the data directory is handed to it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent.errors import StoreError, TuneAgentError

DATABASE = "mlflow"
DB_USER = "tune_agent"
ADMIN = "admin"
PG_SEARCH = ("/usr/lib/postgresql",)  # Debian keeps the server binaries (initdb, pg_ctl) here


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

    # -- where things are ----------------------------------------------------------------------
    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def backend_uri(self) -> str:
        return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def url(self) -> str:
        return f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '::') else self.host}:{self.port}"

    # -- PostgreSQL ----------------------------------------------------------------------------
    def _pg_user(self) -> str | None:
        """The system user PostgreSQL runs as: ``postgres`` when we are root, else ourselves."""
        if os.geteuid() != 0:
            return None
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise TuneAgentError("PostgreSQL cannot run as root and there is no 'postgres' user to run it as") from None
        return "postgres"

    def _pg(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self._pg_user()
        try:
            return subprocess.run([pg_binary(tool), *args], user=user, capture_output=True, text=True, check=check,
                                  timeout=timeout, cwd="/")
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or exc.stdout or "").strip().splitlines()
            raise StoreError(f"{tool} failed: {detail[-1] if detail else exc.returncode}") from None

    def init_postgres(self) -> bool:
        """Makes the cluster on first use; False when it already existed."""
        if (self.pgdata / "PG_VERSION").exists():
            return False
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        user = self._pg_user()
        if user is not None:
            shutil.chown(self.pgdata, user, user)
        self._pg("initdb", "-D", str(self.pgdata), "-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-instructions")
        return True

    def start_postgres(self) -> None:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        log = self.pgdata / "server.log"  # inside the cluster's folder: the postgres user may write there
        options = f"-p {self.pg_port} -c listen_addresses=127.0.0.1 -k {self.pgdata}"
        self._pg("pg_ctl", "-D", str(self.pgdata), "-l", str(log), "-o", options, "-w", "-t", "60", "start")
        exists = self._pg("psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", DB_USER, "-d", "postgres", "-tAc",
                          f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.stdout.strip() != "1":
            self._pg("psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", DB_USER, "-d", "postgres", "-c",
                     f"CREATE DATABASE {DATABASE}")

    def stop_postgres(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)

    # -- MLflow --------------------------------------------------------------------------------
    def mlflow_command(self) -> list[str]:
        artifacts = self.data_dir / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_uri,
               "--artifacts-destination", str(artifacts), "--host", self.host, "--port", str(self.port),
               "--workers", "2"]
        if self.auth:
            cmd += ["--app-name", "basic-auth"]
        return cmd

    def mlflow_env(self) -> dict[str, str]:
        env = without_job_runner(dict(os.environ))
        if self.auth:
            auth = self.data_dir / "auth"
            auth.mkdir(parents=True, exist_ok=True)
            ini = auth / "basic_auth.ini"
            if not ini.exists():  # a random admin password, readable only here (MLflow refuses its old default)
                import secrets

                password = secrets.token_urlsafe(18)
                ini.write_text("[mlflow]\ndefault_permission = READ\n"
                               f"database_uri = sqlite:///{auth / 'users.db'}\n"
                               f"admin_username = {ADMIN}\nadmin_password = {password}\n"
                               "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                               # MLflow checks the password hash (PBKDF2, tens of ms) on every request
                               # unless told to cache a verified credential; a study makes hundreds
                               "auth_cache_ttl_seconds = 60\n")
                ini.chmod(0o600)
            env["MLFLOW_AUTH_CONFIG_PATH"] = str(ini)
            secret = auth / "secret_key"  # CSRF key of the auth app's forms: one per server, kept across restarts
            if not secret.exists():
                import secrets

                secret.write_text(secrets.token_hex(32))
                secret.chmod(0o600)
            env.setdefault("MLFLOW_FLASK_SERVER_SECRET_KEY", secret.read_text().strip())
        return env

    def serve(self, say: Callable[[str], None] = print, ready_timeout: float = 180) -> int:
        """Runs until interrupted or until MLflow exits; returns MLflow's exit code (0 when stopped)."""
        created = self.init_postgres()
        self.start_postgres()
        say(f"PostgreSQL {'created and ' if created else ''}running on 127.0.0.1:{self.pg_port} ({self.pgdata})")
        log = open(self.data_dir / "logs" / "mlflow.log", "a")
        proc = subprocess.Popen(self.mlflow_command(), env=self.mlflow_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        stop = {"now": False}

        def _stop(signum: int, frame: object) -> None:
            stop["now"] = True

        old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if wait_until_up(self.url, ready_timeout, proc, stop):
                say(f"tracking server ready at {self.url} (backend {self.backend_uri}; artifacts proxied from "
                    f"{self.data_dir / 'artifacts'}{'; basic auth on' if self.auth else ''})")
                say(f"agents: tune-agent start ... --tracking-uri {self.url}")
                if self.auth:
                    say(f"basic auth: admin user '{ADMIN}', password in {self.data_dir / 'auth' / 'basic_auth.ini'}; "
                        "agents read MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD")
            while proc.poll() is None and not stop["now"]:
                time.sleep(0.2)
            return 0 if stop["now"] else int(proc.returncode or 0)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            log.close()
            self.stop_postgres()
            for s, handler in old.items():
                signal.signal(s, handler)
            say("tracking server and PostgreSQL stopped")


def wait_until_up(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None,
                  stop: dict[str, bool] | None = None) -> bool:
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


def pg_binary(tool: str) -> str:
    """``tool`` (initdb, pg_ctl, psql) from PATH or the distribution's PostgreSQL folder."""
    found = shutil.which(tool)
    if found:
        return found
    for root in PG_SEARCH:
        for candidate in sorted(Path(root).glob(f"*/bin/{tool}"), reverse=True):
            return str(candidate)
    raise TuneAgentError(f"PostgreSQL's {tool} is not installed (apt-get install postgresql)")
