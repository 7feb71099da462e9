"""Transfer surrogates in a study: which one (`--surrogate gp|rgpe|tnp|auto`) and its sources.

Sources are the historical datasets run with the same job and search space; each contributes its
evaluations as cube points and normal-score values (maximised), so tasks with different objective
scales are comparable. ``auto`` picks by the amount of history: no usable history → ``gp``; a TNP
meta-trained for this space in ``models/`` on at least ``TNP_MIN_SOURCES`` tasks, with at least as
many source tasks in the history now (or ``TNP_MIN_POINTS`` points, too many for RGPE to answer
quickly) → ``tnp``; otherwise ``rgpe`` (it needs no meta-training, so it is the choice while the
history is too small for a neural process to generalise from). Both leave out sources without a
predictable response surface.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

SURROGATES = ("gp", "rgpe", "tnp", "auto")
TNP_FILE = "tnp.pt"
TNP_META = "tnp.json"  # {"job": ..., "space_signature": ...}: the history the TNP was meta-trained on
MIN_SOURCE_POINTS = 5
# On lcbench (`metrics/lcbench.json`) a TNP meta-trained on 27 source tasks beats RGPE at every
# reported trial count (regret@5 .029 vs .061) and answers faster (0.33 vs 0.42 s at 3300 points);
# paper 004 meta-trains on tens of tasks, and a network meta-trained on a handful would overfit them.
TNP_MIN_SOURCES = 20
# RGPE's suggestion cost grows with the history (one GP per source, every point kernelised); the
# TNP's does not (it attends to the top-m similar sources): past this, a TNP is used however few
# tasks hold the points.
TNP_MIN_POINTS = 20000


@dataclass(frozen=True)
class SurrogateChoice:
    name: str
    sources: int
    message: str


def source_tasks(history: Sequence[Any], space: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """(cube points, normal-score maximised values) of each historical dataset with enough points."""
    from agent.tuning.bo import normal_scores
    from agent.tuning.warmstart import surface_data

    out = []
    for h in history:
        U, y = surface_data(h, space)
        if len(y) >= MIN_SOURCE_POINTS:
            out.append((U, normal_scores(y)))
    return out


def tnp_meta(models_dir: Path, space_signature: str) -> dict[str, Any] | None:
    """What the TNP in ``models_dir`` was meta-trained on (``job``, ``sources``), or None when
    there is none for this search space."""
    import json

    meta = Path(models_dir) / TNP_META
    if not (Path(models_dir) / TNP_FILE).exists() or not meta.exists():
        return None
    info = json.loads(meta.read_text())
    return info if info.get("space_signature") == space_signature else None


def choose_surrogate(requested: str, sources: Sequence[Any], models_dir: Path, space_signature: str) -> SurrogateChoice:
    points = sum(len(y) for _, y in sources)
    meta = tnp_meta(models_dir, space_signature)
    has_tnp = meta is not None
    enough = has_tnp and (points >= TNP_MIN_POINTS or (
        len(sources) >= TNP_MIN_SOURCES and int(meta.get("sources", 0)) >= TNP_MIN_SOURCES))
    if requested == "gp" or (requested == "auto" and not sources):
        why = "" if requested == "gp" else " (no history for this job and space)"
        return SurrogateChoice("gp", 0, f"surrogate: gp{why}")
    if not sources:
        return SurrogateChoice("gp", 0, f"surrogate: {requested} needs history for this job and space; using gp")
    if requested == "tnp" and not has_tnp:
        return SurrogateChoice("rgpe", len(sources), f"surrogate: no TNP meta-trained for this space in {models_dir} (run `dvc repro`); using rgpe over {len(sources)} source tasks")
    if requested == "tnp" or (requested == "auto" and enough):
        return SurrogateChoice("tnp", len(sources), f"surrogate: tnp over {len(sources)} source tasks ({points} points)")
    why = (f"; the TNP waits for {TNP_MIN_SOURCES} source tasks, in the history and in its meta-training"
           if requested == "auto" and has_tnp else "")
    return SurrogateChoice("rgpe", len(sources), f"surrogate: rgpe over {len(sources)} source tasks ({points} points){why}")


def model_builder(choice: SurrogateChoice, sources: Sequence[tuple[np.ndarray, np.ndarray]], models_dir: Path,
                  seed: int = 0) -> tuple[Callable | None, SurrogateChoice]:
    """``(train_X, train_Y, warm_state) -> Model`` for the chosen transfer surrogate (None for gp),
    and the choice as it stands after the sources were checked.

    RGPE and TNP both leave out sources whose own response surface is unpredictable
    (:func:`agent.surrogates.rgpe.informative`, the negative-transfer guard); when none is left the
    study runs ``gp`` and the message says why.
    """
    if choice.name not in ("rgpe", "tnp"):
        return None, choice
    from agent.surrogates.rgpe import build_rgpe, fit_source_gps, informative

    fitted = fit_source_gps(sources)
    keep = informative(fitted)
    if not any(keep):
        return None, SurrogateChoice("gp", 0, f"surrogate: gp (none of the {len(sources)} source tasks has a predictable response surface)")
    dropped = len(fitted) - sum(keep)
    if dropped:
        choice = SurrogateChoice(choice.name, sum(keep), f"{choice.message}; {dropped} without a predictable response surface left out")
    if choice.name == "rgpe":
        models = [m for m, k in zip(fitted, keep) if k]
        return (lambda X, Y, state: build_rgpe(models, X, Y, seed=seed, warm_state=state)), choice
    from agent.surrogates.tnp import TNP, SourceBank, build_tnp_model

    tnp = TNP.load(str(Path(models_dir) / TNP_FILE))
    bank = SourceBank([s for s, k in zip(sources, keep) if k])
    return (lambda X, Y, state: build_tnp_model(tnp, bank, X, Y, seed=seed)), choice
