"""The `evaluate` stage: leave-one-dataset-out warm-start evaluation on the knowledge base.

For each held-out dataset, BO is replayed over its evaluated configurations (a lookup table, see
:mod:`agent.meta.replay`) from each initialisation: ``learned`` (k nearest by learned
meta-features), ``handcrafted``, ``random``, ``lhs`` and ``sobol`` (points snapped to the nearest
evaluated configuration), ``learned+prior`` (with the neighbours' prior mean) and each extra wing
(``learned:<aggregator>``), with EI and UCB.

No leakage: the meta-feature extractor used for a held-out dataset is trained by k-fold over
datasets, on the folds that do not contain it, from target distances among those datasets only;
its neighbours' trials are history, its own trials never reach its warm start. The objective is
the validation error (1 - val accuracy), as in paper 003.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agent.knowledge.history import HistoricalDataset
from agent.meta.replay import normalised_regret, snap_to_table

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
        per.append({json.dumps(dict(e.config), sort_keys=True): (e.val_error if e.val_error is not None else e.value)
                    for e in h.evaluations})
    shared = sorted(set.intersection(*(set(p) for p in per))) if per else []
    if len(shared) < 5:
        shared = sorted(set.union(*(set(p) for p in per)))
    U = np.array([space.encode(json.loads(k)) for k in shared])
    E = np.array([[p.get(k, np.nan) for k in shared] for p in per], dtype=float)
    return Table(U, E, shared)


def fold_ids(n: int, folds: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = np.arange(n) % max(min(folds, n), 2)
    rng.shuffle(ids)
    return ids


def neighbour_inits(vectors: np.ndarray, E: np.ndarray, target: int, k: int, standardise: bool) -> tuple[list[int], list[int]]:
    """(neighbour dataset indices, their best configurations as table rows, distinct)."""
    from agent.meta.neighbours import nearest

    others = [i for i in range(len(vectors)) if i != target]
    found = nearest(vectors[target], vectors[others], k, standardise)
    neigh = [others[n.index] for n in found]
    rows: list[int] = []
    for j in neigh:
        for r in np.argsort(np.nan_to_num(E[j], nan=np.inf), kind="stable"):
            if int(r) not in rows:
                rows.append(int(r))
                break
    return neigh, rows


def design_inits(method: str, k: int, U: np.ndarray, seed: int) -> list[int]:
    from agent.design import initial_design

    if method == "random":
        return [int(i) for i in np.random.default_rng(seed).choice(len(U), size=k, replace=False)]
    return snap_to_table(initial_design(method, k, U.shape[1], seed), U)


def plan_runs(t: int, vectors: Mapping[str, tuple[np.ndarray, bool]], E: np.ndarray, U: np.ndarray,
              k: int, seeds: int, acquisitions: Sequence[str]) -> list[tuple[str, list[int], str, list[int] | None]]:
    runs = []
    for method, (vec, standardise) in vectors.items():
        neigh, rows = neighbour_inits(vec, E, t, k, standardise)
        for acq in acquisitions:
            runs.append((f"{method}/{acq}", rows, acq, None))
        if method == "learned":
            runs.append((f"learned+prior/{acquisitions[0]}", rows, acquisitions[0], neigh))
    for method in ("random", "lhs", "sobol"):
        for s in range(seeds):
            init = design_inits(method, k, U, seed=1000 * t + s)
            for acq in acquisitions:
                runs.append((f"{method}/{acq}#{s}", init, acq, None))
    return runs


def summarise(curves_by_dataset: list[dict[str, list[float]]], primary_acq: str) -> dict[str, dict[str, float]]:
    """Mean regret@t and average rank@5 per method (seed repeats averaged first)."""
    per: list[dict[str, np.ndarray]] = []
    for curves in curves_by_dataset:
        merged: dict[str, list[np.ndarray]] = {}
        for name, c in curves.items():
            merged.setdefault(name.split("#")[0], []).append(np.asarray(c))
        per.append({m: np.mean(v, axis=0) for m, v in merged.items()})
    methods = sorted(per[0])
    out: dict[str, dict[str, float]] = {}
    from scipy.stats import rankdata

    ranks = np.array([rankdata([p[m][min(4, len(p[m]) - 1)] for m in methods]) for p in per])
    for j, m in enumerate(methods):
        label = m.replace(f"/{primary_acq}", "")
        out[label] = {f"regret@{r}": float(np.mean([p[m][min(r, len(p[m])) - 1] for p in per])) for r in REPORT_AT}
        out[label]["rank@5"] = float(ranks[:, j].mean())
    return out


def neighbour_precision(vectors: np.ndarray, sources: Sequence[str], k: int, standardise: bool) -> float:
    from agent.meta.neighbours import nearest

    hits = []
    for t in range(len(vectors)):
        others = [i for i in range(len(vectors)) if i != t]
        found = nearest(vectors[t], vectors[others], k, standardise)
        hits.append(np.mean([sources[others[n.index]] == sources[t] for n in found]))
    return float(np.mean(hits))


def write_outputs(report: Mapping[str, Any], curves: list[dict[str, list[float]]], metrics_path: Path, plots_dir: Path, budget: int) -> None:
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    plots_dir.mkdir(parents=True, exist_ok=True)
    methods = report["methods"]
    rows = ["trial,method,regret"]
    mean_curves: dict[str, np.ndarray] = {}
    for label in methods:
        keys = [n for n in curves[0] if n.split("#")[0].replace("/ei", "") == label]
        arr = np.mean([[c[n] for n in keys] for c in curves], axis=(0, 1))
        mean_curves[label] = arr
        rows += [f"{i + 1},{label},{v:.6f}" for i, v in enumerate(arr)]
    (plots_dir / "regret.csv").write_text("\n".join(rows) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for label, arr in sorted(mean_curves.items()):
        ax.plot(np.arange(1, len(arr) + 1), arr, label=label, lw=2 if label.startswith("learned") else 1)
    ax.set_xlabel("trials")
    ax.set_ylabel("mean normalised regret")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_title(f"Warm start, leave-one-dataset-out ({report['datasets']} datasets)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(plots_dir / "regret.png", dpi=110)
    plt.close(fig)
