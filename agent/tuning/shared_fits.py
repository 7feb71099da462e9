"""Source GPs of a history's copies stored with their original's fit (kb-scale's cheaper fit path).

A benchmark that grows the history by copying it (``tune-agent-bench kb-scale`` at 100 times the
starter) would spend an hour fitting the copies' GPs. Here each copy's GP is stored under its own
data, as a study reads them from the store, with the fitted hyperparameters and signal check of the
original it was copied from: a study conditions that GP on the copy's own evaluations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def store_shared_fits(
    entries: Sequence[dict[str, Any]], space: Any, models_dir: Path, original: Callable[[dict[str, Any]], str]
) -> int:
    """Stores a GP fit for every entry (a starter file's study) in ``models_dir``: the first entry of
    each ``original`` is fitted, the rest take its fit. Returns how many took another's fit."""
    from agent.surrogates.gp import gp_state, impute_failures, normal_scores
    from agent.surrogates.gp_stack import stack_summary
    from agent.surrogates.source_fits import SourceTask
    from agent.surrogates.source_gp import SIGNAL_MIN_R2, fit_source_gps, source_signal
    from agent.surrogates.source_store import SourceModelStore

    store = SourceModelStore(models_dir)
    fitted: dict[str, tuple[Any, float, Any]] = {}
    count = 0
    for e in entries:
        sign = -1.0 if e["settings"].get("mode", "min") == "min" else 1.0
        pairs = [(c, v) for c, v in zip(e["configs"], e["values"]) if v is not None and np.isfinite(v)]
        if len(pairs) < 2:
            continue
        U = np.array([space.encode(c) for c, _ in pairs])
        task = SourceTask("", "", U, normal_scores(impute_failures(np.array([sign * v for _, v in pairs]))))
        name = original(e)
        if name not in fitted:
            model = fit_source_gps([(task.U, task.y)])[0]
            fitted[name] = (gp_state(model), source_signal(model), stack_summary(model))
        else:
            count += 1
        state, r2, stack = fitted[name]
        store.add_fit(task.digest, "plain", state, r2 >= SIGNAL_MIN_R2, r2, stack)
    return count
