"""A team tracking server: ``mlflow server`` over PostgreSQL, proxying its artifact store.

``tune-agent server --data-dir DIR`` keeps everything under DIR: ``postgres/`` (a PostgreSQL
cluster made with ``initdb`` on first start, listening on 127.0.0.1 only, every connection
authenticated by password with scram-sha-256: the password is random, made on first start and kept
in ``auth/postgres_password`` (0600), so another local user cannot read the runs past MLflow; a
cluster made by an older tune-agent with trust authentication is given the password and switched on
its next start), ``artifacts/`` (served by MLflow's artifact proxy, so agents need no shared disk)
and ``logs/``. The MLflow server binds to 127.0.0.1 unless ``--host`` says otherwise; with
``--auth`` it runs MLflow's basic-auth app (its user database under ``auth/``, 0700, files 0600).

PostgreSQL and MLflow are children of this process that die with it: PostgreSQL runs in the
foreground (not daemonised by ``pg_ctl``) and both get a parent-death signal, so a ``SIGKILL`` of
the server leaves nothing running. Stopping it (Ctrl-C, SIGTERM) stops MLflow, then PostgreSQL. A
start that finds a PostgreSQL or MLflow of its data dir still running says so in one line and
points to ``tune-agent server --data-dir DIR --stop``.

PostgreSQL refuses to run as root: when this process is root, the cluster is made and run as the
``postgres`` system user (the data directory is handed to it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.errors import StoreError, TuneAgentError

DATABASE = "mlflow"
DB_USER = "tune_agent"
ADMIN = "admin"
PASSWORD_FILE = "postgres_password"  # under DIR/auth/
MLFLOW_PID = "mlflow.pid"  # under DIR/logs/: the MLflow server this data dir runs


def _die_with_parent(signum: int, umask: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` asking Linux to send ``signum`` to the child when its parent dies (the
    library is loaded here, in the parent: the child between fork and exec only calls it)."""
    import ctypes

    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    PR_SET_PDEATHSIG = 1

    def set_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signum)
        if umask is not None:
            os.umask(umask)

    return set_signal


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left for a parent that never reaps it does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


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
    made_admin_password: str = ""  # the admin's password when this start made it (said once)

    # -- where things are ----------------------------------------------------------------------
    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def backend_uri(self) -> str:
        """PostgreSQL's URI without its password: MLflow's libpq reads ``PGPASSWORD`` from its own
        environment, which no other user can read (a password on the command line would be in ``ps``)."""
        return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def auth_dir(self) -> Path:
        return self.data_dir / "auth"

    def password(self) -> str:
        """PostgreSQL's password: made on first use, kept 0600 under ``auth/`` (0700)."""
        import secrets

        self.auth_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.auth_dir.chmod(0o700)
        path = self.auth_dir / PASSWORD_FILE
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24))
        path.chmod(0o600)
        return path.read_text().strip()

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
        env = {**os.environ, "PGPASSWORD": self.password(), "PGPASSFILE": os.devnull}
        try:
            return subprocess.run(
                [pg_binary(tool), *args],
                user=user,
                capture_output=True,
                text=True,
                check=check,
                timeout=timeout,
                cwd="/",
                env=env,
            )
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
        pwfile = self.data_dir / ".initdb-password"  # readable by PostgreSQL's user only, gone after initdb
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.password() + "\n")
        if user is not None:
            shutil.chown(pwfile, user, user)
        try:
            self._pg(
                "initdb",
                "-D",
                str(self.pgdata),
                "-U",
                DB_USER,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--no-instructions",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        return True

    def _trusting(self) -> bool:
        """Whether the cluster still lets local connections in without a password (made by an
        older tune-agent)."""
        hba = self.pgdata / "pg_hba.conf"
        lines = [ln.split() for ln in hba.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return any(parts[-1] == "trust" for parts in lines if parts)

    def _require_passwords(self, say: Callable[[str], None]) -> None:
        """An older cluster's trust authentication replaced by scram-sha-256 with this server's
        password (set while trust still lets us in, then the rules reloaded)."""
        if not self._trusting():
            return
        self._psql("postgres", f"ALTER USER {DB_USER} PASSWORD '{self.password()}'")
        hba = self.pgdata / "pg_hba.conf"
        lines = []
        for line in hba.read_text().splitlines():
            parts = line.split()
            if parts and not line.lstrip().startswith("#") and parts[-1] == "trust":
                line = line[: line.rstrip().rfind("trust")] + "scram-sha-256"
            lines.append(line)
        hba.write_text("\n".join(lines) + "\n")
        self._psql("postgres", "SELECT pg_reload_conf()")
        say(
            f"PostgreSQL of {self.data_dir} trusted local connections: it now asks for the password in "
            f"{self.auth_dir / PASSWORD_FILE}"
        )

    def _psql(self, database: str, sql: str) -> subprocess.CompletedProcess[str]:
        return self._pg("psql", "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", DB_USER, "-d", database, "-tAc", sql)

    def running(self) -> list[str]:
        """What of this data dir is still running (a server up, or left by one that was killed)."""
        out = []
        pid_file = self.pgdata / "postmaster.pid"
        if pid_file.exists():
            first = pid_file.read_text().split("\n", 1)[0].strip()
            if first.isdigit() and _alive(int(first)):
                out.append(f"PostgreSQL (pid {first})")
        mlflow = self.data_dir / "logs" / MLFLOW_PID
        if mlflow.exists():
            pid = mlflow.read_text().strip()
            if pid.isdigit() and _alive(int(pid)):
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
            if pid.isdigit() and _alive(int(pid)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pid), signal.SIGTERM)
            mlflow.unlink(missing_ok=True)
        if (self.pgdata / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)
        say(f"stopped {' and '.join(left)} of {self.data_dir}" if left else f"nothing of {self.data_dir} was running")
        return bool(left)

    def start_postgres(self, say: Callable[[str], None] = print) -> subprocess.Popen[bytes]:
        """PostgreSQL in the foreground, a child that dies with this process; returns once it
        accepts connections, with the database made and passwords required."""
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        log = open(self.pgdata / "server.log", "ab")  # inside the cluster's folder: the postgres user may write there
        proc = subprocess.Popen(
            [
                pg_binary("postgres"),
                "-D",
                str(self.pgdata),
                "-p",
                str(self.pg_port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-k",
                str(self.pgdata),
            ],
            user=self._pg_user(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            preexec_fn=_die_with_parent(signal.SIGINT),
        )  # SIGINT: PostgreSQL's fast shutdown
        log.close()
        deadline = time.monotonic() + 60
        while self._pg("pg_isready", "-h", "127.0.0.1", "-p", str(self.pg_port), check=False).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.pgdata / "server.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise StoreError(
                    f"PostgreSQL did not start: {tail[0] if tail else 'see ' + str(self.pgdata / 'server.log')}"
                )
            time.sleep(0.3)
        self._require_passwords(say)
        if self._psql("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'").stdout.strip() != "1":
            self._psql("postgres", f"CREATE DATABASE {DATABASE}")
        return proc

    def stop_postgres(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
                return
            except subprocess.TimeoutExpired:
                pass
        if (self.pgdata / "postmaster.pid").exists():
            self._pg("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)

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
        env["PGPASSWORD"] = self.password()
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
        self.check_not_running()
        created = self.init_postgres()
        postgres = self.start_postgres(say)
        say(
            f"PostgreSQL {'created and ' if created else ''}running on 127.0.0.1:{self.pg_port} ({self.pgdata}; "
            f"password in {self.auth_dir / PASSWORD_FILE})"
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
                preexec_fn=_die_with_parent(signal.SIGTERM, umask=0o077),
            )
        except BaseException:
            self.stop_postgres(postgres)
            raise
        (self.data_dir / "logs" / MLFLOW_PID).write_text(str(proc.pid))
        stop = {"now": False}

        def _stop(signum: int, frame: object) -> None:
            stop["now"] = True

        old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if wait_until_up(self.url, ready_timeout, proc, stop):
                for made in self.auth_dir.glob("*"):  # made before this version kept them private
                    made.chmod(0o600)
                self._say_ready(say)
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
            (self.data_dir / "logs" / MLFLOW_PID).unlink(missing_ok=True)
            self.stop_postgres(postgres)
            for s, handler in old.items():
                signal.signal(s, handler)
            say("tracking server and PostgreSQL stopped")


def wait_until_up(
    url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None, stop: dict[str, bool] | None = None
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


def pg_binary(tool: str) -> str:
    """``tool`` (initdb, pg_ctl, psql) from PATH or the distribution's PostgreSQL folder."""
    found = shutil.which(tool)
    if found:
        return found
    for root in PG_SEARCH:
        for candidate in sorted(Path(root).glob(f"*/bin/{tool}"), reverse=True):
            return str(candidate)
    raise TuneAgentError(f"PostgreSQL's {tool} is not installed (apt-get install postgresql)")
