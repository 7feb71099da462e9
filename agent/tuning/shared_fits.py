"""Source GPs of a history's copies stored with their original's fit (kb-scale's cheaper fit path).

A benchmark that grows the history by copying it (``tune-agent-bench kb-scale`` at 100 times the
starter) would spend an hour fitting the copies' GPs. Here each copy's GP is stored under its own
data, as a study reads them from the store, with the fitted hyperparameters and signal check of the
original it was copied from: a study conditions that GP on the copy's own evaluations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def store_shared_fits(
    entries: Sequence[dict[str, Any]], space: Any, models_dir: Path, original: Callable[[dict[str, Any]], str]
) -> int:
    """Stores a GP fit for every entry (a starter file's study) in ``models_dir``: the first entry of
    each ``original`` is fitted (:meth:`SourceFits.gp`), the rest take its fit. Each entry's data are
    those a study reads (:func:`agent.surrogates.source_fits.source_task`). Returns how many took
    another's fit."""
    from agent.knowledge.history import Evaluation
    from agent.surrogates.source_fits import MIN_SOURCE_POINTS, SourceFits, source_task
    from agent.surrogates.source_store import SourceModelStore

    store = SourceModelStore(models_dir)
    fits = SourceFits(store)
    firsts: dict[str, str] = {}  # original -> the digest of its fitted data
    count = 0
    for e in entries:
        done = tuple(
            Evaluation(c, v, None) for c, v in zip(e["configs"], e["values"]) if v is not None and math.isfinite(v)
        )
        task = source_task(
            SimpleNamespace(key="", name="", evaluations=done, mode=e["settings"].get("mode", "min")), space
        )
        if len(task.y) < MIN_SOURCE_POINTS:
            continue
        name = original(e)
        if name not in firsts:
            fits.gp(task)
            firsts[name] = task.digest
            continue
        held = store.fit(firsts[name], "plain")
        assert held is not None  # stored by fits.gp above
        store.add_fit(task.digest, "plain", held["state"], held["informative"], held["r2"], held.get("stack"))
        count += 1
    return count
