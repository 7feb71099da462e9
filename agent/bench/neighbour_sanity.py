"""Do the hand-crafted meta-features place datasets sensibly? (``tune-agent-bench neighbours --sanity``)

Over a starter history (every dataset a query once, against all the others, as a study's warm start
sees the history), with the product's hand-crafted meta-features recomputed from the stored samples:

- ``image_to_image``: of the image datasets, the share whose nearest dataset of another source is an
  image dataset too (the history has images of other sources to find);
- ``family_in_5``: of the datasets derived from a built-in source (its class subsets and fractions),
  the share with another member of their family among their 5 nearest;
- ``far_tables``: the tables the warm start would call "far from everything" (nearer to nothing than
  the history's largest nearest-other-source distance; :class:`agent.tuning.warmstart.Nearness`);
- ``units_stable``: the share of tables whose 5 nearest and whose "far" verdict stay the same when
  every column is put in other units (multiplied by 10^u, u uniform in [-3, 3]): a table in dollars
  is the same table in thousands of dollars.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BUILTIN_FAMILIES = ("digits", "mnist-5k", "mnist1d", "breast-cancer", "wine", "iris")
# Tables from outside the history (held-out packages: read as queries only), and the source of the
# history that is their family, if any: the Wisconsin biopsy study is another breast-cancer table,
# ISLR's Default is a 3-column credit table with its income in dollars.
OUTSIDE = (
    ("MASS", "biopsy", "breast-cancer"),
    ("ISLR", "Default", None),
    ("AER", "CreditCard", None),
    ("MASS", "Pima.tr", None),
)


def neighbour_sanity(starter: Path, progress: Callable[[str], None] = print, seed: int = 0) -> dict[str, Any]:
    from agent.knowledge.starter import read_starter
    from agent.meta.handcrafted import HANDCRAFTED_VERSION, handcrafted_metafeatures, metafeature_matrix
    from agent.tuning.ticker import Ticker
    from agent.tuning.warmstart import FAR_FACTOR

    start = time.perf_counter()
    _, entries = read_starter(Path(starter))
    entries = [e for e in entries if e["sample"] is not None]
    rows = []
    progress(f"meta-features of {len(entries)} datasets")
    ticker = Ticker(progress, "datasets", len(entries))
    for i, e in enumerate(entries):
        X, y = e["sample"]
        rows.append(handcrafted_metafeatures(X, y, e["summary"]))
        ticker.tick(i + 1)
    V = metafeature_matrix(rows)
    kinds = np.array([e["summary"]["kind"] for e in entries])
    sources = np.array([str(e["summary"]["source"]) for e in entries])
    D = _distances(V)
    other = sources[:, None] != sources[None, :]
    own_nearest = np.where(other, D, np.inf).min(axis=1)
    largest = float(own_nearest[np.isfinite(own_nearest)].max())

    images = np.flatnonzero(kinds == "image")
    image_hits = [kinds[np.argmin(np.where(other[i], D[i], np.inf))] == "image" for i in images]
    family = np.flatnonzero(np.isin(sources, BUILTIN_FAMILIES))
    family_hits = []
    for member in family:
        order = [j for j in np.argsort(D[member], kind="stable") if j != member][:5]
        family_hits.append(bool((sources[order] == sources[member]).any()))
    tables = np.flatnonzero(kinds == "tabular")
    far = [entries[i]["name"] for i in tables if own_nearest[i] > FAR_FACTOR * largest]

    rng = np.random.default_rng(seed)
    stable = []
    progress(f"units: {len(tables)} tables put in other units")
    ticker = Ticker(progress, "tables", len(tables))
    for n, t in enumerate(tables):
        ticker.tick(n)
        X, y = entries[t]["sample"]
        scaled = np.asarray(X, dtype=float) * 10.0 ** rng.uniform(-3, 3, size=X.shape[1:])
        W = np.vstack([V, metafeature_matrix([handcrafted_metafeatures(scaled, y, entries[t]["summary"])])])
        Dw = _distances(W)[:, : len(V)]
        Dw[-1, t] = np.inf  # the rescaled copy does not count its original as a neighbour
        before, after = set(np.argsort(Dw[t], kind="stable")[:5]), set(np.argsort(Dw[-1], kind="stable")[:5])
        far_before = np.where(other[t], Dw[t], np.inf).min() > FAR_FACTOR * largest
        far_after = np.where(other[t], Dw[-1], np.inf).min() > FAR_FACTOR * largest
        stable.append(before == after and far_before == far_after)
    outside = [_outside(package, item, family, V, sources, other_largest=largest) for package, item, family in OUTSIDE]
    return {
        "outside": outside,
        "protocol": f"{len(entries)} datasets of {starter}, each against all the others; hand-crafted meta-features "
        f"(version {HANDCRAFTED_VERSION}) recomputed from the stored samples, z-scored over the history",
        "image_to_image": _rate(image_hits),
        "family_in_5": _rate(family_hits),
        "far_tables": {"count": len(far), "of": len(tables), "names": far[:20]},
        "units_stable": _rate(stable),
        "seconds": round(time.perf_counter() - start, 1),
    }


def _outside(
    package: str, item: str, family: str | None, V: np.ndarray, sources: np.ndarray, other_largest: float
) -> dict[str, Any]:
    """A table from outside the history as a study would query it: the rank of its family's
    nearest member (when it has one in the history) and whether it is called far from everything."""
    from agent.data import describe_dataset, sample_dataset
    from agent.data.dataset import build_dataset
    from agent.data.rtables import choose_label, read_rdataset
    from agent.data.tabular import prepare_table
    from agent.errors import DatasetError
    from agent.meta.handcrafted import handcrafted_metafeatures, metafeature_matrix
    from agent.tuning.warmstart import FAR_FACTOR

    frame = read_rdataset(package, item)
    label = choose_label(frame)
    if label is None:
        raise DatasetError(f"{package}/{item} has no class column")
    X, y, _ = prepare_table(frame, label, [c for c in ("rownames",) if c in frame.columns], f"{package}/{item}")
    data = build_dataset(f"{package}/{item}", f"r:{package}", "tabular", X, y)
    sample = sample_dataset(data, 256, seed=0)
    row = metafeature_matrix([handcrafted_metafeatures(*sample, describe_dataset(data))])
    d = _distances(np.vstack([V, row]))[-1, : len(V)]
    order = np.argsort(d, kind="stable")
    out: dict[str, Any] = {
        "table": f"{package}/{item}",
        "label": label,
        "nearest": [str(sources[j]) for j in order[:5]],
        "far": bool(d.min() > FAR_FACTOR * other_largest),
    }
    if family is not None:
        out["family_rank"] = int(np.flatnonzero(sources[order] == family)[0]) + 1
    return out


def _distances(V: np.ndarray) -> np.ndarray:
    from agent.meta.neighbours import pairwise_distances

    D = pairwise_distances(V, standardise=True)
    np.fill_diagonal(D, np.inf)
    return D


def _rate(hits: list[bool]) -> dict[str, Any]:
    return {"rate": round(float(np.mean(hits)), 3) if hits else None, "hits": int(sum(hits)), "of": len(hits)}
