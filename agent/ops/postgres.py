"""The team tracking server's PostgreSQL: its cluster made, run and stopped under ``DIR/postgres``.

The cluster is made with ``initdb`` on first start, listens on 127.0.0.1 only and authenticates
every connection by password with scram-sha-256: the password is random, made on first start and
kept in ``DIR/auth/postgres_password`` (0600), so another local user cannot read the runs past
MLflow; a cluster made by an older tune-agent with trust authentication is given the password and
switched on its next start. PostgreSQL runs in the foreground (not daemonised by ``pg_ctl``) as a
child that gets a parent-death signal, so it dies with the server; ``pg_ctl`` stops one left running.

PostgreSQL refuses to run as root: when this process is root, the cluster is made and run as the
``postgres`` system user (the data directory is handed to it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.errors import StoreError, TuneAgentError

DATABASE = "mlflow"
DB_USER = "tune_agent"
PASSWORD_FILE = "postgres_password"  # under DIR/auth/
PG_SEARCH = ("/usr/lib/postgresql",)  # Debian keeps the server binaries (initdb, pg_ctl) here


def die_with_parent(signum: int, umask: int | None = None) -> Callable[[], None]:
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


def alive(pid: int) -> bool:
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


def pg_binary(tool: str) -> str:
    """``tool`` (initdb, pg_ctl, psql) from PATH or the distribution's PostgreSQL folder."""
    found = shutil.which(tool)
    if found:
        return found
    for root in PG_SEARCH:
        for candidate in sorted(Path(root).glob(f"*/bin/{tool}"), reverse=True):
            return str(candidate)
    raise TuneAgentError(f"PostgreSQL's {tool} is not installed (apt-get install postgresql)")


@dataclass(frozen=True)
class Postgres:
    data_dir: Path
    port: int = 5433

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "postgres"

    @property
    def auth_dir(self) -> Path:
        return self.data_dir / "auth"

    @property
    def uri(self) -> str:
        """The URI without its password: MLflow's libpq reads ``PGPASSWORD`` from its own
        environment, which no other user can read (a password on the command line would be in ``ps``)."""
        return f"postgresql+psycopg://{DB_USER}@127.0.0.1:{self.port}/{DATABASE}"

    def password(self) -> str:
        """The password: made on first use, kept 0600 under ``auth/`` (0700)."""
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

    def _user(self) -> str | None:
        """The system user PostgreSQL runs as: ``postgres`` when we are root, else ourselves."""
        if os.geteuid() != 0:
            return None
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise TuneAgentError("PostgreSQL cannot run as root and there is no 'postgres' user to run it as") from None
        return "postgres"

    def _run(self, tool: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self._user()
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

    def init(self) -> bool:
        """Makes the cluster on first use; False when it already existed."""
        if (self.pgdata / "PG_VERSION").exists():
            return False
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        user = self._user()
        if user is not None:
            shutil.chown(self.pgdata, user, user)
        pwfile = self.data_dir / ".initdb-password"  # readable by PostgreSQL's user only, gone after initdb
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.password() + "\n")
        if user is not None:
            shutil.chown(pwfile, user, user)
        try:
            self._run(
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
        return self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, "-d", database, "-tAc", sql)

    def running(self) -> str | None:
        """``PostgreSQL (pid N)`` while the cluster's server runs (up, or left by a server that was
        killed); None when it does not."""
        pid_file = self.pgdata / "postmaster.pid"
        if pid_file.exists():
            first = pid_file.read_text().split("\n", 1)[0].strip()
            if first.isdigit() and alive(int(first)):
                return f"PostgreSQL (pid {first})"
        return None

    def start(self, say: Callable[[str], None] = print) -> subprocess.Popen[bytes]:
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
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-k",
                str(self.pgdata),
            ],
            user=self._user(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            preexec_fn=die_with_parent(signal.SIGINT),
        )  # SIGINT: PostgreSQL's fast shutdown
        log.close()
        deadline = time.monotonic() + 60
        while self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), check=False).returncode != 0:
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

    def stop(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Stops ``proc`` (fast shutdown), else the cluster's server through ``pg_ctl``."""
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
                return
            except subprocess.TimeoutExpired:
                pass
        if (self.pgdata / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", check=False)
