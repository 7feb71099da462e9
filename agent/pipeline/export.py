"""The `export` stage: the knowledge base as versioned files for the meta-model pipeline.

``export_history`` writes, deterministically (same store → byte-identical files, so DVC reruns
downstream stages only when the history really changed):

- ``datasets.json``: one record per historical dataset (name, source, kind, job, space, summary);
- ``evaluations.csv``: every finished trial (dataset key, configuration, objective, validation error);
- ``samples/<fingerprint>.X.npy`` / ``.y.npy``: the dataset samples logged on study runs.

``load_export`` reads them back as :class:`~agent.knowledge.history.HistoricalDataset` records.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import EmptyHistoryError
from agent.knowledge.history import Evaluation, HistoricalDataset, load_history


def export_history(kb: Any, out: Path, job: str | None = None, min_datasets: int = 2) -> int:
    history = load_history(kb, job=job)
    if len(history) < min_datasets:
        raise EmptyHistoryError(
            f"the tracking store {kb.tracking_uri} holds {len(history)} historical dataset(s)"
            f"{' for job ' + job if job else ''}; need at least {min_datasets}: run `tune-agent bootstrap` first"
        )
    if out.exists():
        shutil.rmtree(out)
    (out / "samples").mkdir(parents=True)
    records = []
    for h in history:
        records.append(
            {
                "key": h.key,
                "name": h.name,
                "source": h.source,
                "kind": h.kind,
                "job": h.job,
                "space_signature": h.space_signature,
                "fingerprint": h.fingerprint,
                "metric": h.metric,
                "mode": h.mode,
                "studies": list(h.studies),
                "summary": dict(h.summary),
                "has_sample": h.sample is not None,
            }
        )
        if h.sample is not None:
            np.save(out / "samples" / f"{h.fingerprint}.X.npy", h.sample[0], allow_pickle=False)
            np.save(out / "samples" / f"{h.fingerprint}.y.npy", h.sample[1], allow_pickle=False)
    (out / "datasets.json").write_text(json.dumps(records, indent=1, sort_keys=True, default=str) + "\n")
    rows = sorted(
        (
            h.key,
            json.dumps(dict(e.config), sort_keys=True),
            repr(e.value),
            "" if e.val_error is None else repr(e.val_error),
        )
        for h in history
        for e in h.evaluations
    )
    with open(out / "evaluations.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["key", "config", "value", "val_error"])
        writer.writerows(rows)
    return len(history)


def load_export(root: Path) -> list[HistoricalDataset]:
    if not (root / "datasets.json").exists():
        raise EmptyHistoryError(f"no export in {root}: run the export stage (dvc repro export) first")
    records = json.loads((root / "datasets.json").read_text())
    evaluations: dict[str, list[Evaluation]] = {}
    with open(root / "evaluations.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            err = float(row["val_error"]) if row["val_error"] else None
            evaluations.setdefault(row["key"], []).append(
                Evaluation(json.loads(row["config"]), float(row["value"]), err)
            )
    out = []
    for r in records:
        sample = None
        if r["has_sample"]:
            base = root / "samples" / r["fingerprint"]
            sample = (np.load(f"{base}.X.npy"), np.load(f"{base}.y.npy"))
        out.append(
            HistoricalDataset(
                key=r["key"],
                name=r["name"],
                source=r["source"],
                kind=r["kind"],
                job=r["job"],
                space_signature=r["space_signature"],
                fingerprint=r["fingerprint"],
                metric=r["metric"],
                mode=r["mode"],
                studies=tuple(r["studies"]),
                study_ids=(),
                summary=r["summary"],
                evaluations=tuple(evaluations.get(r["key"], ())),
                sample=sample,
            )
        )
    return out
