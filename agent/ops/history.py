"""`tune-agent history`: the studies in a store and the datasets they covered, as text tables."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agent.knowledge.base import KnowledgeBase


def render_history(kb: KnowledgeBase) -> str:
    studies = kb.list_studies()
    if not studies:
        return f"no studies in {kb.tracking_uri}"
    rows = [("study", "job", "dataset", "status", "trials", "best")]
    by_dataset: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s in studies:
        best = f"{s.best_value:.5g}" if s.best_value is not None else "-"
        objective = f"{s.settings.get('mode', '')} {s.settings.get('metric', '')}"
        rows.append(
            (s.name, s.job, s.dataset, s.status, str(s.settings.get("trials", "")), f"{best} ({objective.strip()})")
        )
        by_dataset[(s.dataset, s.fingerprint)].append(s.name)
    lines = [f"{len(studies)} stud{'y' if len(studies) == 1 else 'ies'} in {kb.tracking_uri}", *_table(rows), ""]
    lines.append(f"{len(by_dataset)} datasets")
    lines += _table(
        [("dataset", "fingerprint", "studies")] + [(d, f, str(len(n))) for (d, f), n in sorted(by_dataset.items())]
    )
    return "\n".join(lines)


def history_rows(kb: KnowledgeBase) -> dict[str, Any]:
    """What :func:`render_history` shows, as data (``history --json``)."""
    studies = kb.list_studies()
    return {
        "tracking_uri": kb.tracking_uri,
        "studies": [
            {
                "study": s.name,
                "job": s.job,
                "dataset": s.dataset,
                "fingerprint": s.fingerprint,
                "status": s.status,
                "trials": s.settings.get("trials"),
                "metric": s.settings.get("metric"),
                "mode": s.settings.get("mode"),
                "best_value": s.best_value,
                "best_config": dict(s.best_config) if s.best_config else None,
            }
            for s in studies
        ],
    }


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
