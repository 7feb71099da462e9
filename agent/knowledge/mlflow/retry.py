"""How store calls survive a server that drops a connection or goes down: delays, and which errors
are an outage, a server fault or a race between two agents."""

from __future__ import annotations

import os

from agent.errors import StoreError, StoreUnwritableError

RETRY_DELAYS = (2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0)  # seconds between tries of an unreachable server
# A trial's epoch metrics are written at most this often, as one batch (and always when training
# ends): one write per epoch cost ~15 ms on sqlite, ~3 s of a 100-epoch trial, and on the driver of
# a parallel study, which replays its workers' records, a whole core (`bench parallel`).
METRICS_FLUSH_SECONDS = 1.0
# The pause before :meth:`MlflowKnowledgeBase._call`'s first, silent retry of an unreachable server.
QUICK_RETRY_SECONDS = 0.2
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
