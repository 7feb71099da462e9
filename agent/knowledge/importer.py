"""`tune-agent import`: evaluations made elsewhere (a benchmark table, another tuner's log) as history.

A table (``.csv`` or ``.parquet``) has a ``task`` column (the dataset or task each row belongs to),
one column per hyperparameter of the search space and a ``value`` column (the objective). Each task
becomes one finished study of job ``external:<job_name>``, so warm starting and transfer surrogates
read it back through the same knowledge-base code as studies that ran here. A task whose study the
store holds finished is skipped, so an interrupted import runs again to complete.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config import StudySettings
from agent.errors import TuneAgentError
from agent.knowledge.imports import Imported, import_many
from agent.space import SearchSpace


def read_table(path: Path) -> Any:
    import pandas as pd

    if not path.exists():
        raise TuneAgentError(f"table not found: {path}")
    try:
        return pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path)
    except Exception as exc:
        raise TuneAgentError(f"cannot read table {path}: {type(exc).__name__}") from None


def load_space(path: Path) -> SearchSpace:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise TuneAgentError(f"cannot read search space {path}: {type(exc).__name__}") from None
    return SearchSpace.from_dict(raw["params"] if isinstance(raw, dict) else raw)


def _row_config(space: SearchSpace, row: Any) -> dict[str, Any]:
    config = {}
    for p in space.params:
        v = row[p.name]
        if isinstance(v, float) and math.isnan(v):
            continue
        config[p.name] = int(v) if p.kind == "int" else (float(v) if p.kind == "float" else v)
    return config


def task_fingerprint(job_name: str, task: str) -> str:
    """The fingerprint an imported task gets; a benchmark job's task of the same name gets the same,
    so a study on it never counts its own imported evaluations as history."""
    return hashlib.sha256(f"{job_name}/{task}".encode()).hexdigest()[:16]


def import_table(
    kb: Any,
    table: Any,
    space: SearchSpace,
    job_name: str,
    metric: str,
    mode: str,
    prefix: str = "import",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Writes one study per task (:func:`agent.knowledge.imports.import_many`), skipping tasks whose
    study the store holds finished (an interrupted import resumes); returns counts and seconds."""
    missing = [c for c in ["task", "value", *space.names] if c not in table.columns]
    if missing:
        raise TuneAgentError(f"table lacks columns {missing}")
    start = time.perf_counter()
    studies = []
    for task, group in table.groupby("task", sort=True):
        configs = [_row_config(space, r) for r in group.to_dict("records")]
        for c in configs:
            space.validate(c)
        settings = StudySettings(
            job=f"external:{job_name}",
            job_name=job_name,
            dataset=str(task),
            dataset_name=str(task),
            fingerprint=task_fingerprint(job_name, str(task)),
            space_signature=space.signature(),
            metric=metric,
            mode=mode,
            trials=len(configs),
            n_init=len(configs),
            warm_start="none",
        )
        description = f"Evaluations of `{job_name}` on task `{task}` imported from a table."
        values = [float(v) for v in group["value"]]
        studies.append(
            Imported(f"{prefix}-{job_name}-{task}", settings.to_dict(), space.to_dict(), configs, values, description)
        )
    read_s = time.perf_counter() - start
    with kb.many_imports():  # the listing below is fresh: a study an interrupted import wrote is skipped
        present = {s.name for s in kb.list_studies() if s.status == "finished"}
        todo = [s for s in studies if s.name not in present]
        count = import_many(kb, todo, len(todo), progress)
    return {
        "studies": count.studies,
        "rows": count.rows,
        "skipped": len(studies) - len(todo),
        "seconds": round(time.perf_counter() - start, 2),
        "stages": {"read_s": round(read_s, 2), "import_s": round(count.seconds, 2)},
        "per_second": round(count.rate, 1) if count.studies else None,
    }
