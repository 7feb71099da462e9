"""Helpers of the `evaluate` stage: leave-one-source-out warm-start evaluation on the knowledge base.

Every bootstrap dataset was evaluated at one shared set of configurations, so the history is one
table (:func:`build_table`). For each held-out target, BO is replayed over its row of that table
(the candidates) by the product's own sampler (:mod:`agent.pipeline.replay`) from each method's
initial configurations. Folds hold whole sources (:func:`source_folds`): when a dataset is the
target, no dataset of its R package or built-in source is history, and the learned extractor that
places it was trained without its fold. Neighbours are taken as the product takes them: nearest
first, one per source before a second from any (:func:`distinct_first`). The objective is the
validation error (1 - val accuracy), as in paper 003. The report's summaries live here too: mean
regret with paired Wilcoxon tests (:func:`summarise`, :func:`paired`), the rank correlation of
meta-feature and target distances (:func:`rank_summary`) and the verdict for ``--warm-start auto``
(:func:`choose_meta_features`).
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


def paired(against_hand: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Learned against hand-crafted meta-features, target by target: the paired Wilcoxon p-value
    of their regret at each reported trial."""
    row = against_hand["learned"]
    return {
        "p_at": {k.split("@")[1]: v for k, v in row.items() if k.startswith("p_vs_handcrafted@")},
        "pairs": "each target's regret with learned against hand-crafted meta-features (paired Wilcoxon)",
    }


def choose_meta_features(report: Mapping[str, Any]) -> dict[str, Any]:
    """What ``--warm-start auto`` uses after this evaluation: the learned extractor only where it is
    at least as good as hand-crafted meta-features at trials 1, 3 and 5 and in rank correlation."""
    m = report["methods"]
    at = [t for t in (1, 3, 5) if f"regret@{t}" in m["learned"]]
    rc = report["rank_correlation"]
    better = (
        all(m["learned"][f"regret@{t}"] <= m["handcrafted"][f"regret@{t}"] for t in at)
        and rc["learned"]["mean"] >= rc["handcrafted"]["mean"]
    )
    at_str = "/".join(str(t) for t in at)
    learned = "/".join(f"{m['learned'][f'regret@{t}']:.2g}" for t in at)
    hand = "/".join(f"{m['handcrafted'][f'regret@{t}']:.2g}" for t in at)
    why = (
        f"learned vs hand-crafted on this history: regret@{at_str} {learned} vs {hand}, rank correlation "
        f"{rc['learned']['mean']:.2g} vs {rc['handcrafted']['mean']:.2g}"
    )
    return {"method": "learned" if better else "handcrafted", "why": why}


def rank_summary(facts: Mapping[str, Mapping[str, Any]], holdout: str = "source") -> dict[str, Any]:
    """Mean/median rank correlation per meta-feature kind, and the paired test learned vs hand-crafted."""
    from scipy.stats import wilcoxon

    out: dict[str, Any] = {}
    values = {
        m: np.array([f["rank_correlation"][m] for f in facts.values()], dtype=float) for m in ("handcrafted", "learned")
    }
    for m, v in values.items():
        v = v[np.isfinite(v)]
        out[m] = {
            "mean": round(float(v.mean()), 4),
            "median": round(float(np.median(v)), 4),
            "positive_share": round(float((v > 0).mean()), 4),
        }
    ok = np.isfinite(values["learned"]) & np.isfinite(values["handcrafted"])
    diff = values["learned"][ok] - values["handcrafted"][ok]
    out["p_learned_vs_handcrafted"] = float(f"{float(wilcoxon(diff).pvalue):.3g}") if np.any(diff != 0) else 1.0
    history = "every dataset of other sources" if holdout == "source" else "every other dataset"
    out["pairs"] = f"each target against {history} (held-out target, extractor of its fold)"
    return out
