"""The report's section for a study of several metrics or with constraints: its Pareto front over
the first and last metrics, its hypervolume against trials, and the front's trials."""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import TrialRecord


def front_section(trials: list[TrialRecord], settings: StudySettings, figures: dict[str, Any]) -> str:
    """For several metrics: the front over the first two objectives, and the hypervolume against
    trials; draws ``pareto_front.png``."""
    import matplotlib.pyplot as plt

    from agent.samplers.pareto import (
        feasible,
        front_summary,
        hypervolume,
        maximised,
        objective_values,
        pareto_front,
        reference_point,
    )

    names = [n for n, _ in settings.objective_list()]
    summary = front_summary(trials, settings)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    points = [(objective_values(t, settings), feasible(t, settings)) for t in trials if t.state == "ok"]
    for values, ok in points:
        if values is not None:
            left.scatter(values[names[0]], values[names[-1]], color="tab:gray" if ok else "tab:red", s=14, alpha=0.6)
    front = sorted((p["values"][names[0]], p["values"][names[-1]]) for p in summary["pareto"])
    if front:
        left.plot(*zip(*front), color="tab:orange", marker="o", lw=2, label="front")
        left.legend(loc="best", fontsize=7)
    left.set_xlabel(names[0])
    left.set_ylabel(names[-1])
    ordered = sorted(trials, key=lambda t: t.number)
    reference = reference_point(ordered, settings)  # the study's: one yardstick for every prefix
    volumes = []
    for i in range(len(ordered)):
        front_i = [objective_values(t, settings) or {} for t in pareto_front(ordered[: i + 1], settings)]
        found = np.array([maximised(v, settings) for v in front_i])
        volumes.append(hypervolume(found, reference) if len(found) and reference is not None else 0.0)
    right.plot(range(1, len(volumes) + 1), volumes, color="tab:orange", lw=2)
    right.set_xlabel("trial")
    right.set_ylabel("hypervolume")
    fig.tight_layout()
    figures["pareto_front.png"] = fig
    rows = "".join(
        f"<tr><td>{p['trial']}</td>"
        + "".join(f"<td>{p['values'][n]:.5g}</td>" for n in names)
        + f"<td><code>{html.escape(json.dumps(p['config']))}</code></td></tr>"
        for p in summary["pareto"]
    )
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    return (
        "<h2>Pareto front</h2><img src='pareto_front.png'>"
        f"<p>orange: the feasible trials no other beats on every metric; grey: the other finished trials; red: "
        f"those breaking a constraint. Hypervolume {summary['hypervolume']:.5g} from the reference "
        f"{html.escape(json.dumps(summary['reference']))} (right: against trials; the reference is "
        "the study's).</p>"
        f"<table><tr><th>trial</th>{head}<th>configuration</th></tr>{rows}</table>"
    )
