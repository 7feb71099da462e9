"""How store calls survive a server that drops a connection or goes down: delays, which errors are
an outage, a server fault or a race between two agents, and :class:`RetriedCalls`, the call every
request of an MLflow store goes through (in a helper thread, one quiet try)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any
from urllib.parse import urlparse

from agent.errors import StoreError, StoreUnwritableError
from agent.knowledge.mlflow.store_file import unwritable

RETRY_DELAYS = (2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0)  # seconds between tries of an unreachable server
# A trial's epoch metrics are written at most this often, as one batch (and always when training
# ends): one write per epoch cost ~15 ms on sqlite, ~3 s of a 100-epoch trial, and on the driver of
# a parallel study, which replays its workers' records, a whole core (`bench parallel`).
METRICS_FLUSH_SECONDS = 1.0
# The pause before :meth:`RetriedCalls._call`'s first, silent retry of an unreachable server.
QUICK_RETRY_SECONDS = 0.2
# Threads named so (the study lease's refresher) fail at once, quietly, where the command itself would
# wait for an unreachable server and say so.
BACKGROUND = "tune-agent-background"
# Tag of a run this agent created: a token that lets a retry find the run its lost answer made.
CREATE_TOKEN = "tune_agent.create_token"
# How far the tracking server's clock may run behind ours when a retry looks for what the try
# before it made (a model version's creation time is the server's).
CLOCK_SKEW_MS = 60_000
# Tries of an experiment tag write that lost a race with another agent's write of the same key.
TAG_RACE_ATTEMPTS = 4
_UNIQUE_RACE = ("uniqueviolation", "duplicate key value", "unique constraint failed", "integrityerror")


def _unique_key_race(message: str) -> bool:
    """Whether a store's refusal is a unique-key clash (postgres, sqlite, mysql wording)."""
    low = message.lower()
    return any(word in low for word in _UNIQUE_RACE)


def retry_delays() -> tuple[float, ...]:
    """:data:`RETRY_DELAYS`, the first ``TUNE_AGENT_STORE_RETRIES`` of them when that is set."""
    raw = os.environ.get("TUNE_AGENT_STORE_RETRIES")
    if raw is None or not raw.strip().isdigit():
        return RETRY_DELAYS
    return RETRY_DELAYS[: int(raw)]


_UNREACHABLE = (
    "connectionerror",
    "connection refused",
    "max retries exceeded",
    "failed to establish",
    "remotedisconnected",
    "connection aborted",
    "read timed out",
    "temporarily_unavailable",
    "connection broken",
    "connection reset",
    "remote end closed",
    "incompleteread",
    "error code 502",
    "error code 503",
    "error code 504",
    "bad gateway",
    "service unavailable",
)


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the tracking server could not be reached (down, restarting, overloaded),
    as opposed to a refusal or a bad request that retrying cannot fix."""
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    code = str(getattr(exc, "error_code", ""))
    if code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED"):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(marker in text for marker in _UNREACHABLE)


def server_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the server's own failure (HTTP 5xx, 429), which a second try may not
    meet (a busy database): the kind of failure MLflow's own single retry absorbs. ``INTERNAL_ERROR`` is
    also MLflow's code for an error of no known kind: those get the one quick retry too."""
    code = str(getattr(exc, "error_code", ""))
    text = str(exc).lower()
    return code == "INTERNAL_ERROR" or any(f"error code {n}" in text for n in (429, 500, 502, 503, 504))


def explain_mlflow_error(uri: str, exc: Exception) -> StoreError:
    """An MLflow error as one line, of the kind the user can act on: refused credentials and
    permissions say what to do; a read-only or full store is a :class:`StoreUnwritableError`."""
    text = str(exc).strip()
    code = str(getattr(exc, "error_code", ""))
    if code == "UNAUTHENTICATED" or "error code 401" in text:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        who = f"as user {user!r}" if user else "without credentials"
        return StoreError(
            f"tracking server {uri} refused the request {who} (401): set MLFLOW_TRACKING_USERNAME and "
            "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to an account on that server"
        )
    low = text.lower()
    if "readonly database" in low or "read-only file system" in low:
        return StoreUnwritableError(
            f"tracking store {uri} is read-only (attempt to write a readonly database); nothing was written"
        )
    if "database or disk is full" in low or "no space left" in low:
        return StoreUnwritableError(
            f"tracking store {uri}: its disk is full (database or disk is full); nothing was written"
        )
    if code == "PERMISSION_DENIED" or "error code 403" in text:
        user = os.environ.get("MLFLOW_TRACKING_USERNAME", "this user")
        return StoreError(
            f"tracking server {uri}: {user} has no permission for this (403); a study can be changed "
            "only by its owner (everyone reads it): start your own, or ask the server's admin for EDIT on "
            "its experiment"
        )
    first = text.splitlines()[0] if text else type(exc).__name__
    return StoreError(f"tracking store {uri}: {first}")


def _is_mlflow_error(exc: BaseException) -> bool:
    """Whether ``exc`` is MLflow's; MLflow is not imported for it (a process that reads an embedded
    store through :mod:`.sqlite_reads` never imports it, and then no error can be MLflow's)."""
    errors = sys.modules.get("mlflow.exceptions")
    return errors is not None and isinstance(exc, errors.MlflowException)


class RetriedCalls:
    """The call every request of a store goes through (:meth:`_call`) and the rules of its retries:
    which failures earn the one quick retry, which the outage's announced waits, and a helper
    thread's single quiet try."""

    # the store's own (:class:`agent.knowledge.mlflow.connection.MlflowConnection`)
    tracking_uri: Any
    artifact_root: str | None

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` with MLflow's errors as one line; a tracking server that cannot be reached is
        retried with backoff (:data:`RETRY_DELAYS`, about two minutes in all), each wait announced
        on stderr, before the error is raised. In a :data:`BACKGROUND` thread, :meth:`_call_quietly`."""
        if threading.current_thread().name.startswith(BACKGROUND):
            return self._call_quietly(fn, *args, **kwargs)
        delays = retry_delays()
        attempt = 0
        first_failure: float | None = None
        quick = True  # one silent retry at once: a dropped keep-alive connection is not an outage
        while True:
            try:
                result = fn(*args, **kwargs)
                self.__dict__["_gave_up"] = False
                return result
            except Exception as exc:
                mlflow_error = _is_mlflow_error(exc)
                if not (mlflow_error or isinstance(exc, OSError)):
                    raise
                down = self._remote and unreachable(exc)
                if down and self.__dict__.get("_gave_up"):  # the same outage: one wait in all, not one per call
                    raise StoreError(f"tracking server {self.tracking_uri} still unreachable") from None
                first_failure = time.monotonic() if first_failure is None else first_failure
                if quick and self._retry_at_once(exc):
                    quick = False
                    time.sleep(QUICK_RETRY_SECONDS)
                    continue
                if down and attempt < len(delays):
                    delay = delays[attempt]
                    attempt += 1
                    sys.stderr.write(
                        f"tracking server {self.tracking_uri} unreachable, retrying ({attempt}/{len(delays)}) "
                        f"in {delay:g} s\n"
                    )
                    sys.stderr.flush()
                    time.sleep(delay)
                    continue
                if down:
                    self.__dict__["_gave_up"] = True
                    raise StoreError(
                        f"tracking server {self.tracking_uri} unreachable; gave up after {len(delays)} "
                        f"retries over {time.monotonic() - first_failure:.0f} s"
                    ) from None
                if mlflow_error or not isinstance(exc, OSError):  # not an MLflow error: an OSError
                    raise explain_mlflow_error(self.tracking_uri, exc) from None
                raise unwritable(
                    f"tracking store {self.tracking_uri} (artifacts in {self.artifact_root or 'its default place'})",
                    exc,
                ) from None

    def _call_quietly(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn`` tried once, for a helper thread: no waits of its own and no lines (the command's
        own calls say what happens to the store); its MLflow error or OSError is a bare
        :class:`StoreError`."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not (_is_mlflow_error(exc) or isinstance(exc, OSError)):
                raise
            raise StoreError(f"tracking store {self.tracking_uri}: {type(exc).__name__}") from None

    def _retry_at_once(self, exc: BaseException) -> bool:
        """Whether a failed request earns the one silent retry at once: a server (not a sqlite
        file) that could not be reached or failed on its side."""
        return self._remote and (unreachable(exc) or server_error(exc))

    @property
    def _remote(self) -> bool:
        return urlparse(self.tracking_uri).scheme in ("http", "https")
