"""Helpers of the `evaluate` stage: leave-one-source-out warm-start evaluation on the knowledge base.

Every bootstrap dataset was evaluated at one shared set of configurations, so the history is one
table (:func:`build_table`). For each held-out target, BO is replayed over its row of that table
(the candidates) by the product's own sampler (:mod:`agent.pipeline.replay`) from each method's
initial configurations. Folds hold whole sources (:func:`source_folds`): when a dataset is the
target, no dataset of its R package or built-in source is history, and the learned extractor that
places it was trained without its fold. Neighbours are taken as the product takes them: nearest
first, one per source before a second from any (:func:`distinct_first`). The objective is the
validation error (1 - val accuracy), as in paper 003.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.knowledge.history import HistoricalDataset
from agent.pipeline.regret import snap_to_table

REPORT_AT = (1, 3, 5, 10, 20)


@dataclass(frozen=True)
class Table:
    U: np.ndarray  # `m x d` shared configurations in the cube
    E: np.ndarray  # `n x m` validation errors (nan = not evaluated)
    keys: list[str]


def build_table(datasets: Sequence[HistoricalDataset], space: Any) -> Table:
    """Configurations evaluated on every dataset (the bootstrap's shared Sobol set) as one table."""
    per = []
    for h in datasets:
        per.append(
            {
                json.dumps(dict(e.config), sort_keys=True): (e.val_error if e.val_error is not None else e.value)
                for e in h.evaluations
            }
        )
    shared = sorted(set.intersection(*(set(p) for p in per))) if per else []
    if len(shared) < 5:
        shared = sorted(set.union(*(set(p) for p in per)))
    U = np.array([space.encode(json.loads(k)) for k in shared])
    E = np.array([[p.get(k, np.nan) for k in shared] for p in per], dtype=float)
    return Table(U, E, shared)


def source_folds(sources: Sequence[str], folds: int, seed: int) -> np.ndarray:
    """Fold id per dataset with every dataset of one source in the same fold (leave-source-out).

    Sources are shuffled by ``seed`` and dealt, largest first, to the fold holding fewest datasets,
    so folds are balanced in datasets while no source is split across them.
    """
    names = sorted(set(sources))
    np.random.default_rng(seed).shuffle(names)
    count = {s: sum(1 for x in sources if x == s) for s in names}
    load = np.zeros(max(min(folds, len(names)), 2))
    of: dict[str, int] = {}
    for s in sorted(names, key=lambda s: -count[s]):  # stable sort: equal counts keep the shuffled order
        of[s] = int(np.argmin(load))
        load[of[s]] += count[s]
    return np.array([of[s] for s in sources])


def best_rows(E: np.ndarray, datasets: Sequence[int], k: int) -> list[int]:
    """Each dataset's best table row in turn (rows distinct), up to ``k`` rows."""
    rows: list[int] = []
    for j in datasets:
        for r in np.argsort(np.nan_to_num(E[j], nan=np.inf), kind="stable"):
            if int(r) not in rows:
                rows.append(int(r))
                break
        if len(rows) == k:
            break
    return rows


def table_regrets(E: np.ndarray) -> np.ndarray:
    """Each row's errors as regrets in [0, 1] over that row's range (a missing value: 1)."""
    lo, hi = np.nanmin(E, axis=1, keepdims=True), np.nanmax(E, axis=1, keepdims=True)
    return np.nan_to_num((E - lo) / np.where(hi > lo, hi - lo, 1.0), nan=1.0)


def rank_correlation(features: np.ndarray, targets: np.ndarray, t: int, history: Sequence[int]) -> float:
    """Spearman correlation, over the ``history`` datasets, between their meta-feature distance to
    dataset ``t`` (row ``t`` of ``features``) and their target distance to it (paper 003 eq. 2): 1
    means the meta-features order the history exactly as the response surfaces do."""
    from scipy.stats import spearmanr

    h = list(history)
    if len(h) < 3:
        return float("nan")
    rho = spearmanr(features[t, h], targets[t, h]).statistic
    return float(rho) if np.isfinite(rho) else 0.0


def design_inits(method: str, k: int, U: np.ndarray, seed: int) -> list[int]:
    """``k`` table rows from a space-filling design (``sobol``, ``lhs``) snapped to the table, or random rows."""
    from agent.samplers.design import initial_design

    if method == "random":
        return [int(i) for i in np.random.default_rng(seed).choice(len(U), size=k, replace=False)]
    return snap_to_table(initial_design(method, k, U.shape[1], seed), U)


def summarise(per_target: Sequence[Mapping[str, np.ndarray]], baseline: str = "cold") -> dict[str, dict[str, float]]:
    """Mean regret@t per method over targets (each target's curves already averaged over seeds) and
    the paired Wilcoxon signed-rank p-value of each method against ``baseline`` at each t."""
    from scipy.stats import wilcoxon

    methods = list(per_target[0])
    out: dict[str, dict[str, float]] = {}
    for m in methods:
        A = np.array([c[m] for c in per_target])
        row: dict[str, float] = {}
        for t in REPORT_AT:
            if t > A.shape[1]:
                continue
            row[f"regret@{t}"] = round(float(A[:, t - 1].mean()), 4)
            if m != baseline and baseline in per_target[0]:
                diff = A[:, t - 1] - np.array([c[baseline][t - 1] for c in per_target])
                p = float(wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
                row[f"p_vs_{baseline}@{t}"] = float(f"{p:.3g}")
        out[m] = row
    return out


def write_outputs(
    report: Mapping[str, Any], mean_curves: Mapping[str, np.ndarray], metrics_path: Path, plots_dir: Path
) -> None:
    """``metrics/warmstart.json``, the regret curves as a DVC plot (``regret.csv``) and ``regret.png``."""
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    plots_dir.mkdir(parents=True, exist_ok=True)
    rows = ["trial,method,regret"]
    for label, arr in mean_curves.items():
        rows += [f"{i + 1},{label},{v:.6f}" for i, v in enumerate(arr)]
    (plots_dir / "regret.csv").write_text("\n".join(rows) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, arr in mean_curves.items():
        ax.plot(np.arange(1, len(arr) + 1), arr, label=label, lw=2 if label in ("learned", "cold") else 1)
    ax.set_xlabel("trials")
    ax.set_ylabel("mean normalised regret")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_title(
        f"Warm start, leave-one-source-out replay ({report['datasets']} datasets, {report['sources']} sources)"
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(plots_dir / "regret.png", dpi=110)
    plt.close(fig)
