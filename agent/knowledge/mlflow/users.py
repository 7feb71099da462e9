"""The team server's users, through MLflow's basic-auth REST API (``tune-agent server user ...``).

A user is made with a password and a role: ``read`` reads every study and makes their own (each
user's studies go to an experiment of their own), ``edit`` may also change every study's runs. Every
user gets EDIT on the knowledge experiment (``tune-agent/knowledge``), so the studies of any
teammate feed the shared meta-models and source models as they end, instead of each teammate's
start refitting what they cannot publish. The calls run as the admin: the credentials come from the
environment (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``) or from the server's
folder (its ``auth/basic_auth.ini``), as the caller chooses.
"""

from __future__ import annotations

from typing import Any

from agent.errors import StoreError, TuneAgentError

ROLES = ("read", "edit")
TIMEOUT = 30.0


class TeamUsers:
    """Users of the tracking server at ``url``, managed as ``admin`` (``(name, password)``)."""

    def __init__(self, url: str, admin: tuple[str, str]) -> None:
        self.url, self.admin = url.rstrip("/"), admin

    def _call(self, method: str, path: str, version: str = "2.0", **kwargs: Any) -> dict[str, Any]:
        import requests

        try:
            response = requests.request(
                method, f"{self.url}/api/{version}/mlflow/{path}", auth=self.admin, timeout=TIMEOUT, **kwargs
            )
        except requests.RequestException as exc:
            raise StoreError(f"tracking server {self.url} cannot be reached ({type(exc).__name__})") from None
        if response.status_code in (401, 403):
            raise StoreError(
                f"tracking server {self.url} refused user {self.admin[0]!r} ({response.status_code}): "
                "users are managed by the admin (its password is in the server's auth/basic_auth.ini)"
            )
        if response.status_code == 404 and "users" in path and response.text.lstrip().startswith("<"):
            raise StoreError(f"tracking server {self.url} has no users: it runs without --auth")
        if not response.ok:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise TuneAgentError(f"tracking server {self.url}: {' '.join(str(message).split())[:300]}")
        try:
            return dict(response.json() or {})
        except ValueError:
            return {}

    def add(self, name: str, password: str, role: str, knowledge_experiment: str | None) -> None:
        """Makes user ``name``; ``role`` edit grants EDIT on every experiment; every user gets EDIT
        on ``knowledge_experiment`` (its id) so their studies publish."""
        if role not in ROLES:
            raise TuneAgentError(f"--role must be one of {', '.join(ROLES)}, got {role!r}")
        self._call("POST", "users/create", json={"username": name, "password": password})
        grants = [("experiment", knowledge_experiment, "EDIT")] if knowledge_experiment else []
        if role == "edit":
            grants += [("experiment", "*", "EDIT"), ("registered_model", "*", "EDIT")]
        for resource_type, resource_id, permission in grants:
            self._call(
                "POST",
                "users/permissions/grant",
                version="3.0",
                json={
                    "username": name,
                    "resource_type": resource_type,
                    "resource_id": resource_id,
                    "permission": permission,
                },
            )

    def list(self) -> list[dict[str, Any]]:
        return [dict(u) for u in self._call("GET", "users/list").get("users", [])]

    def remove(self, name: str) -> None:
        self._call("DELETE", "users/delete", json={"username": name})
