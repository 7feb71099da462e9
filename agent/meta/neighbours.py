"""Meta-feature vectors of datasets and the nearest-dataset search over them.

Featurisers share one interface (:class:`Featurizer`: ``vector(X, y, kind, num_classes, summary) -> `m` ``);
each is a ``--warm-start`` entry of the registry (``agent.registry.WARM_STARTS``), a function of the
models folder (:func:`handcrafted`, :func:`learned`), and another package adds its own through the
``tune_agent.warm_starts`` entry-point group. The built-ins:
:class:`HandcraftedFeaturizer` (paper 000's baseline; columns are z-scored over the candidate set
before distances, since raw sizes and accuracies live on different scales) and
:class:`LearnedFeaturizer` (the Siamese extractor of papers 000/003, whose Euclidean distances were
trained to match target distances, so they are used as they are).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

EXTRACTOR_FILE = "metafeature_extractor.pt"
INDEX_FILE = "metafeature_index.json"


class Featurizer(Protocol):
    """Meta-features of a dataset from a sample of it: ``method`` is the entry's name (it labels the
    warm trials), ``standardise`` whether columns are z-scored over the history before distances."""

    method: str
    standardise: bool

    def vector(
        self, X: np.ndarray, y: np.ndarray, kind: str, num_classes: int, summary: Mapping[str, Any] | None
    ) -> np.ndarray: ...


def handcrafted(models_dir: Path) -> HandcraftedFeaturizer:
    """``--warm-start handcrafted``: needs no model."""
    return HandcraftedFeaturizer()


def learned(models_dir: Path) -> LearnedFeaturizer | None:
    """``--warm-start learned``: the trained extractor in ``models_dir``, or None without one."""
    return LearnedFeaturizer.load(models_dir)


class HandcraftedFeaturizer:
    method = "handcrafted"
    standardise = True

    def vector(
        self, X: np.ndarray, y: np.ndarray, kind: str, num_classes: int, summary: Mapping[str, Any] | None
    ) -> np.ndarray:
        from agent.meta.handcrafted import handcrafted_metafeatures, metafeature_matrix

        return metafeature_matrix([handcrafted_metafeatures(X, y, summary)])[0]

    def from_record(self, metafeatures: Mapping[str, float]) -> np.ndarray:
        from agent.meta.handcrafted import metafeature_matrix

        return metafeature_matrix([metafeatures])[0]


class LearnedFeaturizer:
    method = "learned"
    standardise = False

    def __init__(self, extractor: Any, index: Mapping[str, list[float]] | None = None) -> None:
        self.extractor = extractor
        self.index = dict(index or {})

    @classmethod
    def load(cls, models_dir: Path) -> LearnedFeaturizer | None:
        """The trained extractor in ``models_dir``, or None when the pipeline has not built one."""
        path = Path(models_dir) / EXTRACTOR_FILE
        if not path.exists():
            return None
        from agent.meta.siamese import MetaFeatureExtractor

        index_path = Path(models_dir) / INDEX_FILE
        index = _read_json(index_path) if index_path.exists() else {}
        return cls(MetaFeatureExtractor.load(path), index)

    def vector(
        self, X: np.ndarray, y: np.ndarray, kind: str, num_classes: int, summary: Mapping[str, Any] | None
    ) -> np.ndarray:
        return np.asarray(self.extractor.embed(X, y, kind, num_classes), dtype=float)


def _read_json(path: Path) -> dict:
    import json

    from agent.errors import ExtractorError

    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a mapping of dataset keys to vectors")
        return data
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ExtractorError(
            f"cannot read the meta-feature index {path} ({type(exc).__name__}: {str(exc)[:120]}); "
            "rebuild it with `dvc repro` (or `tune-agent meta train`), or move it aside"
        ) from None


@dataclass(frozen=True)
class Neighbour:
    index: int
    distance: float


def nearest(query: np.ndarray, vectors: np.ndarray, k: int, standardise: bool) -> list[Neighbour]:
    """The ``k`` rows of ``vectors`` (`n x m`) closest to ``query`` (`m`) in Euclidean distance.

    With ``standardise`` each column is z-scored over the candidates and the query together; NaN
    entries (a landmarker that could not run) contribute nothing to the distance.
    """
    if len(vectors) == 0:
        return []
    M = np.vstack([np.asarray(vectors, dtype=float), np.asarray(query, dtype=float)[None]])
    if standardise:
        from agent.meta.handcrafted import standardise_columns

        M = standardise_columns(M)[0]
    M = np.nan_to_num(M, nan=0.0)
    d = np.sqrt(((M[:-1] - M[-1]) ** 2).sum(axis=1))
    order = np.argsort(d, kind="stable")[:k]
    return [Neighbour(int(i), float(d[i])) for i in order]


def distinct_first(order: Sequence[int], sources: Sequence[str]) -> list[int]:
    """``order`` (nearest first) rearranged: the nearest dataset of each source first, then the rest
    in their order. Five class subsets of one source are one piece of evidence, not five: the
    product's warm start and its evaluation pick neighbours in this order."""
    seen: set[str] = set()
    first: list[int] = []
    rest: list[int] = []
    for i in order:
        (rest if sources[i] in seen else first).append(int(i))
        seen.add(sources[i])
    return first + rest


def pairwise_distances(vectors: np.ndarray, standardise: bool) -> np.ndarray:
    """Euclidean distances between all rows (`n x n`), columns z-scored first if asked."""
    M = np.asarray(vectors, dtype=float)
    if standardise:
        from agent.meta.handcrafted import standardise_columns

        M = standardise_columns(M)[0]
    M = np.nan_to_num(M, nan=0.0)
    # |a-b|^2 = |a|^2 + |b|^2 - 2 a.b: an `n x n` product, not the `n x n x d` differences (1.6 GB
    # and 5 s for 2,250 datasets); rounding below 0 clipped, each row's distance to itself 0
    sq = (M**2).sum(1)
    D2 = np.clip(sq[:, None] + sq[None, :] - 2.0 * (M @ M.T), 0.0, None)
    np.fill_diagonal(D2, 0.0)
    return np.sqrt(D2)


OWN_SAMPLE = 4096  # datasets whose own nearest distances are measured, at most (a fixed sample beyond)


def own_rows(n: int) -> np.ndarray:
    """The rows whose own nearest distances are measured: all ``n``, or a fixed sample of :data:`OWN_SAMPLE`."""
    if n <= OWN_SAMPLE:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, OWN_SAMPLE, replace=False))


def own_nearest(M: np.ndarray, sources: Sequence[str], block: int = 512) -> np.ndarray:
    """Each row's distance to its nearest row of another source (rows of ``M``, already scaled; rows
    whose source has no other are left out), for the rows :func:`own_rows` picks."""
    own = own_nearest_rows(M, sources, own_rows(len(M)), block=block)
    return own[np.isfinite(own)]


def own_nearest_rows(M: np.ndarray, sources: Sequence[str], rows: np.ndarray, block: int = 512) -> np.ndarray:
    """The distance of each of ``rows`` to its nearest row of ``M`` from another source (inf where
    there is none), ``block`` rows at a time so that memory stays linear in ``M``'s rows."""
    M = np.asarray(M, dtype=float)
    src = np.unique(np.asarray(sources, dtype=object), return_inverse=True)[1]
    sq = (M**2).sum(1)
    out = [np.empty(0)]
    for start in range(0, len(rows), block):
        r = rows[start : start + block]
        D2 = np.clip(sq[r, None] + sq[None, :] - 2.0 * (M[r] @ M.T), 0.0, None)
        D2[src[r, None] == src[None, :]] = np.inf  # the same source (and the row itself)
        out.append(np.sqrt(D2.min(axis=1)))
    return np.concatenate(out)


def vectors_for(featurizer: Any, datasets: Sequence[Any]) -> np.ndarray:
    """Meta-feature vectors of historical datasets (their stored samples and summaries)."""
    from agent.meta.handcrafted import is_current, metafeature_matrix

    if not datasets:
        return np.empty((0, 0))
    index = getattr(featurizer, "index", {})
    stored = featurizer.method == "handcrafted"
    rows: list[np.ndarray | None] = []
    records = []  # stored hand-crafted meta-features, stacked at once (thousands of datasets)
    for h in datasets:
        cached = index.get(h.key)
        if cached is not None:
            rows.append(np.asarray(cached, dtype=float))
        elif stored and is_current(h.metafeatures):
            rows.append(None)
            records.append(h.metafeatures)
        else:
            X, y = h.sample
            rows.append(featurizer.vector(X, y, h.kind, h.num_classes, h.summary))
    if len(records) == len(rows):
        return metafeature_matrix(records)
    stacked = iter(metafeature_matrix(records)) if records else iter(())
    return np.vstack([next(stacked) if r is None else r for r in rows])
