"""What a warm start reads of the history's datasets to place them: samples downloaded only where
neither stored nor indexed meta-features place a dataset (:func:`attach_samples`), and stored
hand-crafted meta-features of an older version recomputed and stored once (:func:`refresh_metafeatures`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agent.knowledge.history import HistoricalDataset


def attach_samples(kb: Any, featurizer: Any, history: list[HistoricalDataset]) -> None:
    """Downloads samples only for datasets whose meta-features are neither stored (by this version
    of them) nor indexed."""
    from dataclasses import replace

    from agent.meta.handcrafted import is_current

    for i, h in enumerate(history):
        indexed = h.key in getattr(featurizer, "index", {})
        stored = featurizer.method == "handcrafted" and is_current(h.metafeatures)
        if not indexed and not stored:
            history[i] = replace(h, sample=kb.load_dataset_sample(h.study_ids[0]))
    history[:] = [
        h
        for h in history
        if h.sample is not None
        or h.key in getattr(featurizer, "index", {})
        or (featurizer.method == "handcrafted" and is_current(h.metafeatures))
    ]


def refresh_metafeatures(
    kb: Any, history: list[HistoricalDataset], studies: Mapping[str, Any], progress: Callable[[str], None] | None
) -> None:
    """Stored hand-crafted meta-features of an older version are recomputed from the sample and
    stored on the study run, so the next study reads them (an upgraded store pays this once)."""
    from dataclasses import replace

    from agent.meta.handcrafted import handcrafted_metafeatures, is_current
    from agent.tuning.ticker import Ticker

    stale = [i for i, h in enumerate(history) if h.sample is not None and not is_current(h.metafeatures)]
    if not stale:
        return
    if progress is not None:
        progress(
            f"warm start: meta-features of {len(stale)} historical datasets are an older version's; "
            "recomputing and storing them (once)"
        )
    ticker = Ticker(progress, "meta-features recomputed", len(stale))
    for n, i in enumerate(stale):
        h = history[i]
        assert h.sample is not None  # stale holds sampled datasets only
        features = handcrafted_metafeatures(h.sample[0], h.sample[1], h.summary)
        record = studies.get(h.study_ids[0])
        if record is not None:
            try:
                kb.set_study_tags(record, {"metafeatures": features})
            except Exception:
                pass
        history[i] = replace(h, metafeatures=features)
        ticker.tick(n + 1)
