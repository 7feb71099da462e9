"""The history's own nearest-neighbour distances, kept between starts.

A warm start asks how near the new dataset is against the history's own distances: each historical
dataset's distance to its nearest dataset of another source (:func:`agent.tuning.warmstart.nearness`).
That is every pair of datasets, which on a history of thousands takes longer than the rest of the
warm start. From :data:`CACHED_FROM` datasets on, the distances are kept in the meta-model cache
(``TUNE_AGENT_CACHE``, ``~/.cache/tune-agent``) per featurizer, store, job and space, with the
standardisation they were measured in (the history's own column means and deviations), and a start
measures only what is new:

- the same datasets (by key, with the same vectors) and a few more (at most :data:`NEW_SHARE` of
  the history, or 16): the new ones are measured against all, and the others' distances updated
  with the new ones, in the standardisation kept;
- anything else (a dataset gone, a vector changed, many new ones): measured whole again, in a fresh
  standardisation, from a fixed sample of :data:`agent.meta.neighbours.OWN_SAMPLE` datasets beyond that many.

The new dataset's own distance is then measured in that standardisation too (the history's alone:
with thousands of datasets, one more row moves the column statistics by less than a thousandth).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CACHED_FROM = 500  # histories at least this large keep their own distances between starts
NEW_SHARE = 0.05  # new datasets measured into the kept distances, at most (a share of the history)


def _folder() -> Path:
    from agent.knowledge.meta_cache import default_root

    return default_root() / "nearness"


def _path(scope: str) -> Path:
    return _folder() / f"{hashlib.sha256(scope.encode()).hexdigest()[:24]}.npz"


def history_distances(
    query: np.ndarray, vectors: np.ndarray, keys: Sequence[str], sources: Sequence[str], standardise: bool, scope: str
) -> tuple[float, np.ndarray]:
    """(the query's nearest distance to the history, the history's own nearest other-source
    distances, finite ones only), kept in the cache under ``scope`` and brought up to date."""
    V = np.asarray(vectors, dtype=float)
    path = _path(scope)
    held = _load(path)
    reused = _reuse(held, V, keys) if held is not None else None
    if reused is None:
        mean, std = _statistics(V, standardise)
        Z = _scaled(V, mean, std)
        own = _measured_whole(Z, sources)
    else:
        mean, std, own, new = reused
        Z = _scaled(V, mean, std)
        if new.size:
            own = _with_new(Z, sources, own, new)
    if reused is None or reused[3].size:
        _save(path, {"keys": np.asarray(list(keys), dtype=str), "V": V, "mean": mean, "std": std, "own": own})
    zq = _scaled(np.asarray(query, dtype=float)[None], mean, std)[0]
    to_query = np.sqrt(((Z - zq) ** 2).sum(axis=1))
    return float(to_query.min()), own[np.isfinite(own)]


def _statistics(V: np.ndarray, standardise: bool) -> tuple[np.ndarray, np.ndarray]:
    if not standardise:
        return np.zeros(V.shape[1]), np.ones(V.shape[1])
    from agent.meta.handcrafted import standardise_columns

    _, mean, std = standardise_columns(V)
    return mean, std


def _scaled(V: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return np.nan_to_num((V - mean) / std, nan=0.0)


def _measured_whole(Z: np.ndarray, sources: Sequence[str]) -> np.ndarray:
    """Every row's own distance (inf: not measured, or no other source), a fixed sample beyond OWN_SAMPLE."""
    from agent.meta.neighbours import own_nearest_rows, own_rows

    rows = own_rows(len(Z))
    own = np.full(len(Z), np.inf)
    own[rows] = own_nearest_rows(Z, sources, rows)
    return own


def _with_new(Z: np.ndarray, sources: Sequence[str], own: np.ndarray, new: np.ndarray, block: int = 256) -> np.ndarray:
    """``own`` with the ``new`` rows measured against all and the measured others' distances to them taken in."""
    from agent.meta.neighbours import own_nearest_rows

    out = own.copy()
    out[new] = own_nearest_rows(Z, sources, new)
    src = np.unique(np.asarray(sources, dtype=object), return_inverse=True)[1]
    sq = (Z**2).sum(1)
    nearest_new = np.full(len(Z), np.inf)
    for start in range(0, len(new), block):  # every row against the new ones, a block of them at a time
        cols = new[start : start + block]
        D2 = np.clip(sq[:, None] + sq[None, cols] - 2.0 * (Z @ Z[cols].T), 0.0, None)
        D2[src[:, None] == src[None, cols]] = np.inf
        nearest_new = np.minimum(nearest_new, np.sqrt(D2.min(axis=1)))
    measured = np.isfinite(own)
    out[measured] = np.minimum(own[measured], nearest_new[measured])
    return out


def _reuse(held: dict[str, Any], V: np.ndarray, keys: Sequence[str]) -> tuple[Any, Any, np.ndarray, np.ndarray] | None:
    """(mean, std, own distances aligned to ``keys``, the new rows) when the kept distances can be
    brought up to date; None when they must be measured whole again."""
    where = {k: i for i, k in enumerate(keys)}
    old = [where.get(str(k)) for k in held["keys"]]
    if any(i is None for i in old) or held["V"].shape[1:] != V.shape[1:]:
        return None
    rows = np.asarray(old, dtype=int)
    if not np.allclose(V[rows], held["V"], equal_nan=True, rtol=0, atol=1e-12):
        return None
    new = np.setdiff1d(np.arange(len(V)), rows)
    if new.size > max(16, NEW_SHARE * len(V)):
        return None
    own = np.full(len(V), np.inf)
    own[rows] = held["own"]
    return held["mean"], held["std"], own, new


def _load(path: Path) -> dict[str, Any] | None:
    try:
        with np.load(path, allow_pickle=False) as f:
            return {name: f[name] for name in ("keys", "V", "mean", "std", "own")}
    except (OSError, ValueError, KeyError):
        return None


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import io

    from agent.knowledge.study_cache import write_cache_file

    buffer = io.BytesIO()
    np.savez(buffer, keys=arrays["keys"], V=arrays["V"], mean=arrays["mean"], std=arrays["std"], own=arrays["own"])
    write_cache_file(path, buffer.getvalue())
