"""Where studies, trials and meta-model runs are kept: the :class:`KnowledgeBase` contract
(:mod:`agent.knowledge.base`) and the function that opens a backend by URI.

``open_knowledge_base`` reads the URI's scheme, as MLflow picks a store:

- ``memory:`` or ``memory://NAME``: a new, empty :class:`~agent.knowledge.memory.InMemoryKnowledgeBase`;
- ``sqlite:``, ``http:``, ``https:``, ``file:`` or a plain path:
  :class:`~agent.knowledge.mlflow_store.MlflowKnowledgeBase`;
- ``None``: ``MLFLOW_TRACKING_URI`` if set, else the embedded ``sqlite:///mlflow/mlflow.db``,
  then by scheme as above.

Backends are imported on demand, so importing this package loads neither MLflow nor Lightning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from agent.knowledge.base import KnowledgeBase


def open_knowledge_base(uri: str | None, artifact_root: str | None = None) -> KnowledgeBase:
    """The knowledge base at ``uri``; ``artifact_root`` is where MLflow backends keep artifacts.

    Raises:
        StoreError: the scheme is none of the above, or the MLflow store cannot be reached.
    """
    from agent.errors import StoreError
    from agent.knowledge.memory import SCHEME as MEMORY
    from agent.knowledge.mlflow_store import SCHEMES as MLFLOW
    from agent.knowledge.mlflow_store import resolve_tracking_uri

    resolved = resolve_tracking_uri(uri)
    scheme = urlparse(resolved).scheme
    if scheme == MEMORY:
        from agent.knowledge.memory import InMemoryKnowledgeBase

        return InMemoryKnowledgeBase(resolved)
    if scheme in MLFLOW:
        from agent.knowledge.mlflow_store import MlflowKnowledgeBase

        return MlflowKnowledgeBase(resolved, artifact_root)
    known = ", ".join(f"{s}:" for s in (MEMORY, *MLFLOW) if s)
    raise StoreError(f"unknown knowledge-base URI scheme {scheme!r} in {resolved!r} (known: {known} or a path)")


__all__ = ["open_knowledge_base"]
