"""``tune-agent server user add|list|remove``: a team server's users, made by its admin.

The admin's credentials come from the server's folder (``--data-dir``: its
``auth/basic_auth.ini``, readable by the account that runs the server) or from the environment
(``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``). What a role allows, and why every user
may publish meta-models, is in :mod:`agent.knowledge.mlflow.users`.
"""

from __future__ import annotations

import configparser
import os
import secrets
from pathlib import Path
from typing import Any

from agent.errors import TuneAgentError

AUTH_INI = Path("auth") / "basic_auth.ini"


def admin_credentials(data_dir: str | None) -> tuple[str, str]:
    """``(admin name, password)``: from ``data_dir``'s basic-auth file, else the environment."""
    if data_dir:
        ini = Path(data_dir) / AUTH_INI
        parser = configparser.ConfigParser()
        try:
            parser.read_string(ini.read_text())
            return parser["mlflow"]["admin_username"], parser["mlflow"]["admin_password"]
        except (OSError, KeyError, configparser.Error) as exc:
            raise TuneAgentError(f"--data-dir {data_dir}: cannot read the admin's password in {ini} ({exc})") from None
    name, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if not name or not password:
        raise TuneAgentError(
            "users are managed by the server's admin: give --data-dir DIR (on the server) or set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD to the admin's"
        )
    return name, password


def add_user(url: str, name: str, role: str, password: str | None, data_dir: str | None) -> str:
    """Makes user ``name`` with ``role``; returns the password (made when none is given)."""
    from agent.knowledge import knowledge_experiment_id, team_users

    if not name.strip() or any(c.isspace() for c in name):
        raise TuneAgentError(f"a user name has no spaces and is not empty, got {name!r}")
    admin = admin_credentials(data_dir)
    password = password or secrets.token_urlsafe(12)
    if len(password) < 12:
        raise TuneAgentError("--password must be at least 12 characters (MLflow refuses shorter ones)")
    users = team_users(url, admin)
    users.add(name, password, role, knowledge_experiment_id(url, admin))
    return password


def list_users(url: str, data_dir: str | None) -> list[dict[str, Any]]:
    from agent.knowledge import team_users

    return team_users(url, admin_credentials(data_dir)).list()


def remove_user(url: str, name: str, data_dir: str | None) -> None:
    from agent.knowledge import team_users

    team_users(url, admin_credentials(data_dir)).remove(name)


def auth_environment(auth: Path, admin: str) -> tuple[str, dict[str, str]]:
    """The basic-auth app's files in ``auth`` (0700): its settings (a random admin password, made
    when missing: MLflow refuses its old default) and the forms' CSRF key, kept across restarts.
    Returns ``(the admin password if made now, else '', the variables MLflow reads)``."""
    auth.mkdir(mode=0o700, parents=True, exist_ok=True)
    ini, made = auth / "basic_auth.ini", ""
    if not ini.exists():
        made = secrets.token_urlsafe(18)
        ini.write_text(
            "[mlflow]\ndefault_permission = READ\n"
            f"database_uri = sqlite:///{auth / 'users.db'}\n"
            f"admin_username = {admin}\nadmin_password = {made}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            # MLflow checks the password hash (PBKDF2, tens of ms) on every request unless told to
            # cache a verified credential; a study makes hundreds
            "auth_cache_ttl_seconds = 60\n"
        )
        ini.chmod(0o600)
    secret = auth / "secret_key"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
        secret.chmod(0o600)
    return made, {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_FLASK_SERVER_SECRET_KEY": secret.read_text().strip()}
