"""Files in the in-memory store: a study's figures and artifacts, and meta-model runs with their model files.

Also the two pieces every record of :class:`agent.knowledge.memory.InMemoryKnowledgeBase` is built
from, since model runs use them too: :class:`FrozenDict`, the read-only mapping records hand out, and
``_Run``, a run's metrics and params.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import StoreError
from agent.knowledge import layout
from agent.knowledge.records import StudyRecord


class FrozenDict(dict):
    """A dict that refuses writes, so a record can hand out the store's own mapping.

    Still a ``dict`` (JSON, ``==``, ``dict(...)`` copies work); it pickles and copies as itself.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("knowledge-base records are read-only; copy with dict(...) to change one")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


@dataclass(eq=False)
class _Run:
    """What trials and model runs share: metrics (latest by step, and their history) and params."""

    run_id: str
    latest: dict[str, tuple[int, float]] = field(default_factory=dict)
    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)

    def log(self, key: str, value: float, step: int) -> None:
        old = self.latest.get(key)
        if old is None or step >= old[0]:  # the later write wins a tie
            self.latest[key] = (step, value)
        self.history.setdefault(key, []).append((step, value))


@dataclass(frozen=True)
class ModelRun:
    """A meta-model run as the in-memory store holds it (artifacts by name, ``model/<file>``)."""

    run_id: str
    kind: str
    description: str
    params: Mapping[str, str]
    metrics: Mapping[str, float]
    artifacts: Mapping[str, bytes]
    finished: bool


class InMemoryFiles:
    """Study figures and artifacts (a study's ``figures``) and model runs (``_model_runs``), under
    the store's lock."""

    # the store's own (:class:`agent.knowledge.memory.InMemoryKnowledgeBase`)
    _lock: Any
    _uri: str
    _model_runs: dict[str, tuple[_Run, dict[str, Any]]]
    _new_id: Any
    _study: Any
    _log_metric: Any
    _log_params: Any

    # -- a study's figures and artifacts -------------------------------------------------------
    def log_study_artifacts(self, study: StudyRecord, paths: list[str], artifact_path: str) -> None:
        files = {f"{artifact_path}/{Path(p).name}": Path(p).read_bytes() for p in paths}
        with self._lock:
            self._study(study.study_id).figures.update(files)

    def fetch_study_file(self, study: StudyRecord, artifact_file: str, target: Path) -> bool:
        data = self.study_figure(study, artifact_file)  # artifacts and figures are kept alike
        if data is None:
            return False
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return True

    def log_study_figure(self, study: StudyRecord, figure: Any, artifact_file: str) -> None:
        with self._lock:
            self._study(study.study_id)
        buffer = io.BytesIO()
        figure.savefig(buffer, format=Path(artifact_file).suffix.lstrip(".") or "png")
        with self._lock:
            self._study(study.study_id).figures[artifact_file] = buffer.getvalue()

    def study_figure(self, study: StudyRecord, artifact_file: str) -> bytes | None:
        """The bytes :meth:`log_study_figure` saved under ``artifact_file``, or None."""
        with self._lock:
            return self._study(study.study_id).figures.get(artifact_file)

    # -- meta-model runs -----------------------------------------------------------------------
    def _model_run(self, run_id: str) -> tuple[_Run, dict[str, Any]]:
        try:
            return self._model_runs[run_id]
        except KeyError:
            raise StoreError(f"tracking store {self._uri}: no model run with id {run_id!r}") from None

    def start_model_run(self, kind: str, params: Mapping[str, Any], description: str) -> tuple[str, Any]:
        from agent.knowledge.memory_logger import MemoryLogger

        with self._lock:
            run = _Run(self._new_id(), params={k: str(v)[: layout.PARAM_LIMIT] for k, v in params.items()})
            self._model_runs[run.run_id] = (
                run,
                {"kind": kind, "description": description, "artifacts": {}, "finished": False},
            )
        logger = MemoryLogger(
            run.run_id, lambda k, v, s: self._log_metric(run, k, v, s), lambda p: self._log_params(run, p)
        )
        return run.run_id, logger

    def finish_model_run(self, run_id: str, metrics: Mapping[str, float], artifacts: list[str]) -> None:
        files = {}
        for path in artifacts:
            try:
                files[f"model/{Path(path).name}"] = Path(path).read_bytes()
            except OSError as exc:
                raise StoreError(f"cannot read model artifact {path} ({type(exc).__name__})") from None
        with self._lock:
            run, info = self._model_run(run_id)
            for key, value in metrics.items():
                if math.isfinite(float(value)):
                    run.log(key, float(value), 0)
            info["artifacts"].update(files)
            info["finished"] = True

    def model_run(self, run_id: str) -> ModelRun:
        """A snapshot of a meta-model run."""
        with self._lock:
            run, info = self._model_run(run_id)
            return ModelRun(
                run_id,
                info["kind"],
                info["description"],
                FrozenDict(run.params),
                FrozenDict((k, v) for k, (_, v) in run.latest.items()),
                FrozenDict(info["artifacts"]),
                info["finished"],
            )


__all__ = ["FrozenDict", "InMemoryFiles", "ModelRun"]
