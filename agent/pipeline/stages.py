"""The meta-model pipeline's stages (`dvc.yaml`): export → distances → train-metafeatures → evaluate.

Each stage is one function taking its ``params.yaml`` section, reading the previous stage's files
and writing its own; only ``export`` talks to the knowledge base (and ``train`` logs its run to it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agent.knowledge.history import HistoricalDataset
from agent.pipeline.export import export_history, load_export

EXPORT_DIR = Path("data/export")
DISTANCES_FILE = Path("data/distances.json")


def load_params(path: Path) -> dict[str, Any]:
    """The pipeline's settings (``params.yaml``): a mapping of stage names to their settings."""
    import yaml

    from agent.errors import TuneAgentError

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TuneAgentError(f"cannot read --params {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise TuneAgentError(f"--params {path} must map stage names (export, distances, ...) to their settings")
    return data


def stage_export(kb: Any, p: Mapping[str, Any], out: Path = EXPORT_DIR) -> int:
    return export_history(kb, out, job=p.get("job"), min_datasets=int(p.get("min_datasets", 2)))


def history_space(datasets: list[HistoricalDataset]) -> Any:
    from agent.jobs import load_job

    return load_job(datasets[0].job).space


def stage_distances(p: Mapping[str, Any], export: Path = EXPORT_DIR, out: Path = DISTANCES_FILE) -> np.ndarray:
    from agent.pipeline.distances import emd_distance_matrix, target_distance_matrix
    from agent.pipeline.evaluation_tables import build_table

    datasets = load_export(export)
    table = build_table(datasets, history_space(datasets))
    how = p.get("normalisation", "rank")
    D = emd_distance_matrix(table.E, how=how) if p.get("emd") else target_distance_matrix(table.E, how=how)
    D = np.where(np.isfinite(D), D, np.nanmax(D[np.isfinite(D)]) if np.isfinite(D).any() else 1.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "keys": [h.key for h in datasets],
        "names": [h.name for h in datasets],
        "sources": [h.source for h in datasets],
        "normalisation": how,
        "emd": bool(p.get("emd")),
        "configs": len(table.keys),
        "matrix": np.round(D, 8).tolist(),
    }
    out.write_text(json.dumps(record, indent=1) + "\n")
    return D


def _samples(datasets: list[HistoricalDataset]) -> list[Any]:
    """Each dataset's sample (the export holds one for every dataset)."""
    from agent.meta.siamese import DatasetSample

    samples = []
    for h in datasets:
        assert h.sample is not None, f"{h.name}: the export holds no sample"
        samples.append(DatasetSample(h.name, h.sample[0], h.sample[1], h.kind, h.num_classes, h.source))
    return samples


def _extractor_config(p: Mapping[str, Any], aggregator: str | None = None) -> Any:
    from agent.meta.siamese import ExtractorConfig

    d = dict(p)
    if aggregator:
        d["aggregator"] = aggregator
    return ExtractorConfig.from_dict(d)


def stage_train(
    kb: Any,
    p: Mapping[str, Any],
    models: Path,
    metrics: Path,
    plots: Path,
    export: Path = EXPORT_DIR,
    distances: Path = DISTANCES_FILE,
) -> dict[str, float]:
    from agent.meta.extractor_train import train_extractor
    from agent.meta.neighbours import EXTRACTOR_FILE, INDEX_FILE

    datasets = load_export(export)
    D = np.array(json.loads(distances.read_text())["matrix"])
    config = _extractor_config(p)
    run_id, logger = kb.start_model_run(
        "metafeature-extractor",
        {**config.to_dict(), "datasets": len(datasets)},
        f"Siamese meta-feature extractor ({config.aggregator}) trained on {len(datasets)} historical datasets.",
    )
    start = time.perf_counter()
    extractor, history = train_extractor(_samples(datasets), D, config, logger=logger, threads=2)
    seconds = time.perf_counter() - start
    models.mkdir(parents=True, exist_ok=True)
    extractor.save(models / EXTRACTOR_FILE)
    vectors = extractor.embed_many(_samples(datasets))
    index = {h.key: np.round(v, 6).tolist() for h, v in zip(datasets, vectors)}
    (models / INDEX_FILE).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    last = history[-1]
    summary = {
        "datasets": len(datasets),
        "steps": config.steps,
        "train_seconds": round(seconds, 1),
        "final_train_loss": float(last.get("train_loss", np.nan)),
        "final_val_loss": float(last.get("val_loss", np.nan) if last.get("val_loss") is not None else np.nan),
    }
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    plots.parent.mkdir(parents=True, exist_ok=True)
    rows = ["step,train_loss,val_loss"] + [
        f"{h['step']},{h.get('train_loss', '')},{'' if h.get('val_loss') is None else h['val_loss']}" for h in history
    ]
    plots.write_text("\n".join(rows) + "\n")
    kb.finish_model_run(run_id, summary, [str(models / EXTRACTOR_FILE), str(models / INDEX_FILE)])
    return summary


def train_without_source(
    datasets: list[HistoricalDataset], p: Mapping[str, Any], source: str, normalisation: str = "rank"
) -> Any:
    """An extractor trained as the pipeline trains one, on every dataset not from ``source``, with
    target distances among those datasets only: what ``dvc repro`` would build from a history that
    never held that source (the end-to-end evaluation's per-target meta-model)."""
    from agent.meta.extractor_train import train_extractor
    from agent.pipeline.distances import target_distance_matrix
    from agent.pipeline.evaluation_tables import build_table

    kept = [h for h in datasets if h.source != source]
    E = build_table(kept, history_space(kept)).E
    D = target_distance_matrix(E, how=normalisation)
    D = np.where(np.isfinite(D), D, np.nanmax(D[np.isfinite(D)]) if np.isfinite(D).any() else 1.0)
    extractor, _ = train_extractor(_samples(kept), D, _extractor_config(p), threads=2)
    return extractor


def fold_vectors(
    datasets: list[HistoricalDataset], D: np.ndarray, p: Mapping[str, Any], aggregator: str, folds: np.ndarray
) -> dict[int, np.ndarray]:
    """Per fold, every dataset's learned meta-features from an extractor trained without that fold.

    A target in fold ``f`` is compared with the rest using ``out[f]``: its own row comes from a
    model that never saw it, the others are history embedded by the same model.
    """
    from agent.meta.extractor_train import train_extractor

    samples = _samples(datasets)
    out = {}
    for f in np.unique(folds):
        train = np.where(folds != f)[0]
        extractor, _ = train_extractor(
            [samples[i] for i in train], D[np.ix_(train, train)], _extractor_config(p, aggregator), threads=2
        )
        out[int(f)] = extractor.embed_many(samples)
    return out


def normalisation_report(E: np.ndarray, sources: list[str], k: int) -> dict[str, dict[str, float]]:
    """Why the chosen normalisation: with the *true* target distance as an oracle, how often the
    k nearest share the source, and the regret of their best configurations on the target."""
    from agent.pipeline.distances import NORMALISATIONS, target_distance_matrix
    from agent.pipeline.regret import normalised_regret

    out = {}
    for how in NORMALISATIONS:
        D = target_distance_matrix(E, how=how)
        prec, reg = [], []
        for t in range(len(E)):
            d = np.where(np.arange(len(E)) == t, np.inf, np.nan_to_num(D[t], nan=np.inf))
            neigh = np.argsort(d, kind="stable")[:k]
            prec.append(np.mean([sources[j] == sources[t] for j in neigh]))
            rows = [int(np.nanargmin(E[j])) for j in neigh]
            reg.append(normalised_regret(E[t], rows)[-1])
        out[how] = {"oracle_neighbour_precision": float(np.mean(prec)), "oracle_regret@k": float(np.mean(reg))}
    return out
