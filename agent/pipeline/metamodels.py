"""Meta-training the transfer surrogates' networks from a knowledge base's history.

One function per meta-model, shared by the ``train-transfer`` pipeline stage and the benchmark's
fold-wise training, so both train on the history exactly as a study reads it
(:func:`agent.surrogates.source_fits.source_tasks`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import TuneAgentError
from agent.surrogates.source_fits import SourceTask, source_tasks
from agent.surrogates.specs import TNP_FILE, TNP_META


def tnp_settings(params: Mapping[str, Any] | None = None) -> Any:
    """The TNP's meta-training settings (``params.yaml`` ``transfer``; defaults when empty)."""
    from agent.surrogates.tnp import TNPConfig

    return TNPConfig.from_dict(dict(params or {}))


def tnp_key(sources: Sequence[SourceTask], settings: Any) -> str:
    """A name for the network these sources and settings give (a cache key)."""
    import hashlib

    h = hashlib.sha256(json.dumps(settings.to_dict(), sort_keys=True).encode())
    for s in sources:
        h.update(s.digest.encode())
    return h.hexdigest()[:12]


def history_sources(kb: Any, job_name: str, space: Any) -> list[SourceTask]:
    from agent.knowledge.history import load_history

    return source_tasks(load_history(kb, job=job_name, space_signature=space.signature(), with_samples=False), space)


def train_tnp(
    sources: Sequence[SourceTask],
    job_name: str,
    space_signature: str,
    models_dir: Path,
    settings: Any,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Meta-trains the TNP (paper 004, Algorithm 1) into ``models_dir/tnp.pt`` (+ ``tnp.json``);
    ``progress`` gets a line about every 5% of the outer steps, with the loss and an ETA."""
    from agent.surrogates.tnp_train import meta_train_tnp

    if len(sources) < 2:
        raise TuneAgentError(f"TNP meta-training needs at least 2 source tasks, the history has {len(sources)}")
    start = time.perf_counter()
    logger = None
    if progress is not None:
        steps = int(settings.meta_steps)

        def logger(record: dict[str, Any]) -> None:
            done = record["step"] + 1
            left = (time.perf_counter() - start) / done * (steps - done)
            progress(
                f"step {done}/{steps}, loss {record['loss']:.3f}"
                + (f", about {left:.0f} s left" if done < steps else "")
            )

    tnp, history = meta_train_tnp(
        [(s.U, s.y) for s in sources], settings, logger=logger, log_every=max(1, int(settings.meta_steps) // 20)
    )
    models_dir.mkdir(parents=True, exist_ok=True)
    tnp.save(str(models_dir / TNP_FILE))
    (models_dir / TNP_META).write_text(
        json.dumps(
            {"job": job_name, "space_signature": space_signature, "sources": len(sources)}, indent=1, sort_keys=True
        )
        + "\n"
    )
    return {
        "sources": len(sources),
        "meta_steps": settings.meta_steps,
        "seconds": round(time.perf_counter() - start, 1),
        "final_loss": float(np.mean([h["loss"] for h in history[-5:]])) if history else float("nan"),
    }


def train_tnp_without_source(
    history: Sequence[Any], job_name: str, held_out: str, models_dir: Path, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The TNP meta-trained on ``history`` less every study of source ``held_out`` (a
    leave-one-source-out fold of the evaluation), saved under ``models_dir``."""
    from agent.jobs import load_job

    space = load_job(job_name).space
    kept = [h for h in history if h.source != held_out and h.space_signature == space.signature()]
    return train_tnp(source_tasks(kept, space), job_name, space.signature(), models_dir, tnp_settings(params))


def tnp_trained(models_dir: Path) -> bool:
    return (models_dir / TNP_FILE).exists() and (models_dir / TNP_META).exists()


def stage_train_transfer(
    p: Mapping[str, Any],
    models: Path,
    metrics: Path,
    export: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The ``train-transfer`` DVC stage: the TNP meta-trained on the exported history."""
    from agent.errors import EmptyHistoryError
    from agent.pipeline.export import load_export
    from agent.pipeline.stages import EXPORT_DIR, history_space

    datasets = load_export(export or EXPORT_DIR)
    space = history_space(datasets)
    sources = source_tasks(datasets, space)
    if len(sources) < 2:
        raise EmptyHistoryError(f"TNP meta-training needs at least 2 source tasks, the export has {len(sources)}")
    if progress is not None:
        progress(f"meta-training the TNP on {len(sources)} source datasets")
    summary = train_tnp(
        sources,
        datasets[0].job,
        datasets[0].space_signature,
        models,
        tnp_settings(p),
        progress=None if progress is None else (lambda line: progress(f"  TNP {line}")),
    )
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
