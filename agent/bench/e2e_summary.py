"""What the end-to-end warm-start evaluation reports: regret per method at fixed trials, the paired
test against ``cold``, and regret against the seconds a study took (:mod:`agent.bench.warmstart_e2e`
runs the studies)."""

from __future__ import annotations

from typing import Any

import numpy as np

REPORT_AT = (1, 3, 5, 10)


# Seconds since a study was asked at which the wall-clock view reads each method's regret.
CLOCK_AT = (0.5, 1, 1.5, 2, 3, 5, 10, 20, 60)


def wall_clock_view(
    targets: list[dict[str, Any]], entries: list[dict[str, Any]], done: dict, config: Any
) -> dict[str, Any]:
    """Regret against seconds since the study was asked (preparation, warm start and surrogate
    included; the process's imports not: every method pays them alike), at :data:`CLOCK_AT`: the best
    value among the trials ended by then, 1 (the top of the range) before the first ends. Per method:
    mean regret, the share of runs with a result, the paired Wilcoxon p against cold, the median time
    to the first trial's start and to the last trial's end. Runs journalled before the clock was
    recorded are left out."""
    from scipy.stats import wilcoxon

    at: dict[str, list[list[float]]] = {m: [] for m in config.methods}
    started: dict[str, list[float]] = {m: [] for m in config.methods}
    total: dict[str, list[float]] = {m: [] for m in config.methods}
    for t in targets:
        table = [v for v in t["values"] if v is not None and np.isfinite(v)]
        for seed in range(config.seeds):
            runs = {m: done[(t["name"], seed, m)] for m in config.methods}
            if any("ended_s" not in r for r in runs.values()):
                continue
            found = [v for r in runs.values() for v in r["values"] if np.isfinite(v)]
            low, high = min(table + found), max(table + found)
            for m, r in runs.items():
                pairs = [(e, v) for e, v in zip(r["ended_s"], r["values"]) if e is not None]
                row = []
                for limit in CLOCK_AT:
                    seen = [v if np.isfinite(v) else high for e, v in pairs if e <= limit]
                    row.append(float(np.clip((min(seen) - low) / max(high - low, 1e-12), 0, 1)) if seen else 1.0)
                at[m].append(row)
                started[m].append(float(r["first_trial_s"]))
                total[m].append(float(r["seconds"]))
    if not at["cold"]:
        return {}
    out: dict[str, Any] = {"seconds": list(CLOCK_AT), "runs": len(at["cold"]), "methods": {}}
    C = np.array(at["cold"])
    for m, rows in at.items():
        A = np.array(rows)
        summary: dict[str, Any] = {
            "regret": A.mean(0).round(4).tolist(),
            "median_first_trial_s": round(float(np.median(started[m])), 2),
            "median_run_s": round(float(np.median(total[m])), 1),
        }
        if m != "cold":
            summary["p_vs_cold"] = [
                float(f"{wilcoxon(A[:, j] - C[:, j]).pvalue:.3g}") if np.any(A[:, j] != C[:, j]) else 1.0
                for j in range(len(CLOCK_AT))
            ]
        out["methods"][m] = summary
    return out


def summarise(
    targets: list[dict[str, Any]], entries: list[dict[str, Any]], done: dict, config: Any, seconds: float
) -> dict[str, Any]:
    from scipy.stats import wilcoxon

    curves: dict[str, list[np.ndarray]] = {m: [] for m in config.methods}
    for t in targets:
        table = [v for v in t["values"] if v is not None and np.isfinite(v)]
        for seed in range(config.seeds):
            runs = {m: np.array(done[(t["name"], seed, m)]["values"], dtype=float) for m in config.methods}
            found = [v for r in runs.values() for v in r if np.isfinite(v)]
            low, high = min(table + found), max(table + found)
            for m, r in runs.items():
                best = np.minimum.accumulate(np.where(np.isfinite(r), r, high))
                curves[m].append(np.clip((best - low) / max(high - low, 1e-12), 0.0, 1.0))
    methods: dict[str, Any] = {}
    clock = wall_clock_view(targets, entries, done, config)
    for m, rows in curves.items():
        A = np.array(rows)
        methods[m] = {f"regret@{k}": round(float(A[:, k - 1].mean()), 4) for k in REPORT_AT if k <= A.shape[1]}
        if m != "cold":
            C = np.array(curves["cold"])
            for k in REPORT_AT:
                if k <= A.shape[1]:
                    diff = A[:, k - 1] - C[:, k - 1]
                    p = float(wilcoxon(diff).pvalue) if np.any(diff != 0) else 1.0
                    methods[m][f"p_vs_cold@{k}"] = float(f"{p:.3g}")
    return {
        "protocol": (
            "leave-one-source-out end to end: real tune-agent studies (product sampler, Lightning "
            f"training, {config.epochs} epochs) of job {config.job} on {len(targets)} held-out R-package "
            f"tables, {config.seeds} seeds, {config.trials} trials; every dataset of the target's R package "
            "removed from the history; methods without a meta-model run as before `dvc repro` (auto = handcrafted + "
            "rgpe), the learned ones and tnp with the extractor / TNP trained on the history without the "
            "target's source; "
            "regret over "
            "the target's 64-configuration bootstrap table joined with all values found; paired Wilcoxon "
            "signed-rank test against cold over (target, seed)"
        ),
        "history_datasets": len(entries),
        "history_sources": len({e["summary"].get("source") for e in entries}),
        "targets": [t["name"] for t in targets],
        "seeds": config.seeds,
        "methods": methods,
        "wall_clock": clock,
        "wall_seconds": round(seconds, 1),
        "mean_curves": {m: np.array(r).mean(0).round(4).tolist() for m, r in curves.items()},
    }
