"""Where studies, trials and meta-model runs are kept: the :class:`KnowledgeBase` contract
(:mod:`agent.knowledge.base`) and the function that opens a backend by URI.

``open_knowledge_base`` reads the URI's scheme, as MLflow picks a store:

- ``memory:`` or ``memory://NAME``: a new, empty :class:`~agent.knowledge.memory.InMemoryKnowledgeBase`;
- ``sqlite:``, ``http:``, ``https:``: :class:`~agent.knowledge.mlflow.backend.MlflowKnowledgeBase`
  (``file:`` and plain folders, MLflow's file store in maintenance mode, are refused in one line);
- ``None``: ``MLFLOW_TRACKING_URI`` if set, else the embedded ``sqlite:///mlflow/mlflow.db``,
  then by scheme as above.

Backends are imported on demand, so importing this package loads neither MLflow nor Lightning.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from agent.knowledge.base import KnowledgeBase


def open_knowledge_base(uri: str | None, artifact_root: str | None = None, fast_reads: bool = False) -> KnowledgeBase:
    """The knowledge base at ``uri``; ``artifact_root`` is where MLflow backends keep artifacts;
    ``fast_reads`` reads an embedded sqlite store without importing MLflow (the reading commands,
    :mod:`agent.knowledge.mlflow.sqlite_reads`).

    Raises:
        StoreError: the scheme is none of the above, or the MLflow store cannot be reached.
    """
    from agent.errors import StoreError
    from agent.knowledge.memory import SCHEME as MEMORY
    from agent.knowledge.mlflow.store_file import SCHEMES as MLFLOW
    from agent.knowledge.mlflow.store_file import resolve_tracking_uri

    resolved = resolve_tracking_uri(uri)
    scheme = urlparse(resolved).scheme
    if scheme == MEMORY:
        from agent.knowledge.memory import InMemoryKnowledgeBase

        return InMemoryKnowledgeBase(resolved)
    if scheme in MLFLOW or scheme in ("", "file"):  # the last two: refused by the backend with what to use
        from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

        return MlflowKnowledgeBase(resolved, artifact_root, fast_reads=fast_reads)
    known = ", ".join(f"{s}:" for s in (MEMORY, *MLFLOW) if s)
    raise StoreError(f"unknown knowledge-base URI scheme {scheme!r} in {resolved!r} (known: {known} or a path)")


def resolve_tracking_uri(uri: str | None) -> str:
    """``uri``, else ``MLFLOW_TRACKING_URI``, else the embedded store's URI."""
    from agent.knowledge.mlflow.store_file import resolve_tracking_uri as resolve

    return resolve(uri)


def check_reachable(uri: str) -> None:
    """Raises StoreError (one line) when ``uri`` names no store this product can open."""
    from agent.knowledge.mlflow.store_file import check_reachable as check

    check(uri)


def store_exists(uri: str) -> bool:
    """Whether the store at ``uri`` exists (a server always does; a sqlite file once made)."""
    from agent.knowledge.mlflow.store_file import store_exists as exists

    return exists(uri)


def sqlite_path(uri: str) -> Path | None:
    """The file of a ``sqlite:`` URI, else None."""
    from agent.knowledge.mlflow.store_file import _sqlite_path

    return _sqlite_path(uri)


def make_store_folder(uri: str | None) -> Path | None:
    """Makes the missing folder of a ``sqlite:`` store (commands that build a knowledge base
    into a new place); returns the folder it made, None when there was nothing to make."""
    path = sqlite_path(resolve_tracking_uri(uri))
    if path is None or path.parent.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent


DEFAULT_ARTIFACT_ROOT = "mlflow/artifacts"  # the embedded store's artifacts (a test checks the backend agrees)

__all__ = [
    "DEFAULT_ARTIFACT_ROOT",
    "check_reachable",
    "make_store_folder",
    "open_knowledge_base",
    "resolve_tracking_uri",
    "sqlite_path",
    "store_exists",
]


def save_model_files(folder: Path, model: object, example: object, predictions: object, network: object) -> None:
    """Writes ``model`` (``predict(rows)``) as an MLflow pyfunc in ``folder/model`` (signature from
    ``example`` -> ``predictions``, and the example) and ``network`` (a torch module) in
    ``folder/network`` (MLflow's pytorch flavour): what a store's ``keep_model_files`` keeps. Runs
    where the model trained (a trial's worker), which may not reach the store."""
    from agent.knowledge.mlflow.kept import save_model_files as save

    save(folder, model, example, predictions, network)


def save_torch_model_files(
    folder: Path, network: object, example: object = None, outputs: object = None, extra_files: list[str] | None = None
) -> None:
    """Writes ``network`` (a torch module, a user's LightningModule) in ``folder/model`` as MLflow's
    pytorch flavour, which is also a pyfunc when ``example`` (input rows) and ``outputs`` (what the
    network returned for them) give its signature; ``extra_files`` (the Lightning checkpoint) go
    with it. What a store's ``keep_model_files`` keeps of a user's project."""
    from agent.knowledge.mlflow.kept import save_torch_model_files as save

    save(folder, network, example, outputs, extra_files or [])


def team_users(url: str, admin: tuple[str, str]) -> Any:
    """The users of the team server at ``url``, managed as ``admin`` (:mod:`agent.knowledge.mlflow.users`)."""
    from agent.knowledge.mlflow.users import TeamUsers

    return TeamUsers(url, admin)


def knowledge_experiment_id(url: str, admin: tuple[str, str]) -> str | None:
    """The id of the store's knowledge experiment (meta-models), made as ``admin`` when missing."""
    import os

    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = admin
    try:
        from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

        return MlflowKnowledgeBase(url).knowledge_experiment_id()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def warm_model_saving() -> None:
    """Starts, once per process, what :func:`save_model_files` first spends seconds on (MLflow's
    imports and its map of the installed packages) on a background thread, so that a trial
    training meanwhile finds it done when it saves its model."""
    from agent.knowledge.mlflow.kept import warm_model_saving as warm

    warm()
