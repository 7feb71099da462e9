"""Content fingerprints: what a dataset *is*, whatever it is called, however its rows and columns are
ordered, and whether it is the whole table or a sample of it.

A name says little: ``r:dslabs/brca`` is scikit-learn's ``breast-cancer`` under another name, and
``r:heplots/peng`` is the penguins table kept back for the independent evaluation. Two datasets are
*the same content* when nearly every column of the smaller one has a twin in the other, a twin being
a column with the same distribution: its spread (the interquartile range, on a log scale), its median
in units of that spread, and where its 0.1, 0.25, 0.75 and 0.9 quantiles lie from the median in
those units. Robust statistics, because a sample's mean and standard deviation follow its tails: a
256-row sample of the 569-row breast-cancer table kept 73 % of its columns within a tolerance on
those, and 90 % or more on these (:data:`TOLERANCE`). They survive row order, column order,
renaming and subsampling, and they do not depend on which column was the label, so a table matches
its copy whatever label each chose.

To count as the same content, the smaller side must have at least :data:`MIN_CONTINUOUS` non-binary
columns (binary columns with a common rate match in many unrelated tables), the larger side at most
twice as many columns plus four, and at least :data:`MATCH_SHARE` of the smaller side's columns, and
of its non-binary ones, must have a twin of their own (a one-to-one matching). On the starter history
this finds exactly the copies a reader would name (``brca`` and breast-cancer, ``datasets/iris`` and
iris, Galton's families twice, Channing House twice, High School and Beyond twice) and, against the
held-out packages, five tables that are theirs under other names (``tests/data/test_content.py``).
Rank correlations between the twins were tried as a further check and dropped: columns with the same
distribution (a father's and a mother's height) swap places in the matching, and the check then
rejected true copies. :class:`ContentPrint` also carries a short
``digest`` (the class shares, the column count and the quantised column summaries, sorted), which
``start``, ``import`` and ``bootstrap`` record on the study run; equal digests mean the same
content, while near-duplicates are found by :func:`same_content`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
# log10 spread, asinh(median / spread), then (q - median) / spread at 0.1, 0.25, 0.75 and 0.9
TOLERANCE = np.array([0.12, 0.3, 0.4, 0.2, 0.2, 0.4])
MATCH_SHARE = 0.8
MIN_CONTINUOUS = 3
MAX_COLUMNS = 512  # wider data (images) keeps this many columns, the most variable ones


@dataclass(frozen=True)
class ContentPrint:
    """Per-column summaries (``columns``: one row per non-constant column, sorted), which columns
    are binary, the number of columns in all and a digest of the whole."""

    columns: np.ndarray
    binary: np.ndarray
    n_columns: int
    digest: str


def column_summaries(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(summaries, binary, n_columns)`` of ``X`` (rows x anything): one row per non-constant
    column, robust to a sample's tails: ``[log10 spread, asinh(median / spread), (q - median) /
    spread at the 0.1, 0.25, 0.75 and 0.9 quantiles]``, the spread being the interquartile range
    (the standard deviation where that is 0); NaNs are ignored."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    n_columns = X.shape[1]
    complete = bool(np.isfinite(X).all())
    with np.errstate(invalid="ignore", divide="ignore"):
        std = X.std(axis=0) if complete else np.nanstd(X, axis=0)
    keep = np.isfinite(std) & (std > 1e-12)
    if keep.sum() > MAX_COLUMNS:
        keep &= std >= np.sort(std[keep])[-MAX_COLUMNS]
    X, std = X[:, keep], std[keep]
    if not X.shape[1]:
        return np.empty((0, len(TOLERANCE))), np.empty(0, dtype=bool), n_columns
    S = np.sort(X, axis=0)  # NaNs sort last: the quantiles and the distinct values come from one sort
    finite = np.isfinite(S)
    if complete:  # read off the sorted columns (linear interpolation, as np.quantile's default)
        at = np.asarray(QUANTILES) * (len(S) - 1)
        low = np.floor(at).astype(int)
        high = np.minimum(low + 1, len(S) - 1)
        q = S[low] + (at - low)[:, None] * (S[high] - S[low])
    else:
        q = np.nanquantile(X, QUANTILES, axis=0)
    iqr = q[3] - q[1]
    spread = np.where(iqr > 1e-12, iqr, std)
    offsets = (q[[0, 1, 3, 4]] - q[2]) / spread
    summaries = np.column_stack([np.log10(spread), np.arcsinh(q[2] / spread), offsets.T])
    binary = 1 + ((np.diff(S, axis=0) != 0) & finite[1:]).sum(axis=0) <= 2  # distinct finite values per column
    order = np.lexsort(summaries.T[::-1])
    return summaries[order], binary[order], n_columns


def content_print(X: np.ndarray, y: np.ndarray | None = None) -> ContentPrint:
    """The content print of features ``X`` (and labels ``y``: their class shares enter the digest)."""
    columns, binary, n_columns = column_summaries(X)
    digest = hashlib.sha256()
    digest.update(f"{n_columns}|{len(columns)}|".encode())
    if y is not None and len(y):
        _, counts = np.unique(np.asarray(y), return_counts=True)
        digest.update(np.round(np.sort(counts / counts.sum()), 2).tobytes())
    digest.update(np.round(columns / (TOLERANCE * 4), 0).astype(np.int64).tobytes())
    return ContentPrint(columns, binary, n_columns, digest.hexdigest()[:16])


def close_columns(a: ContentPrint, b: ContentPrint) -> np.ndarray:
    """``close[i, j]``: column ``i`` of ``a`` and column ``j`` of ``b`` have the same distribution."""
    close = np.ones((len(a.columns), len(b.columns)), dtype=bool)
    for k, tol in enumerate(TOLERANCE):  # one summary at a time: no (na x nb x 6) array for wide data
        close &= np.abs(a.columns[:, k][:, None] - b.columns[:, k][None, :]) <= tol
    return close


def twins(a: ContentPrint, b: ContentPrint) -> tuple[np.ndarray, np.ndarray]:
    """Each column of ``a`` paired with at most one column of ``b`` of the same distribution, as
    many pairs as can be made (a maximum bipartite matching): ``(columns of a, columns of b)``."""
    if not len(a.columns) or not len(b.columns):
        return np.array([], dtype=int), np.array([], dtype=int)
    from scipy.optimize import linear_sum_assignment

    close = close_columns(a, b)
    rows, cols = linear_sum_assignment(-close.astype(float))
    keep = close[rows, cols]
    return rows[keep], cols[keep]


def same_content(a: ContentPrint, b: ContentPrint) -> bool:
    """Whether ``a`` and ``b`` hold the same data (one may be a sample, a reordering or a renaming
    of the other, or a copy with other columns beside it): see the module's rule."""
    if a.digest == b.digest:
        return True
    small, large = (a, b) if len(a.columns) <= len(b.columns) else (b, a)
    continuous = ~small.binary
    if continuous.sum() < MIN_CONTINUOUS or len(large.columns) > 2 * len(small.columns) + 4:
        return False
    rows, _ = twins(small, large)
    matched = np.zeros(len(small.columns), dtype=bool)
    matched[rows] = True
    return bool(
        matched.mean() >= MATCH_SHARE
        and matched[continuous].mean() >= MATCH_SHARE
        and matched[continuous].sum() >= MIN_CONTINUOUS
    )


def table_matrix(frame: Any) -> np.ndarray:
    """A raw table (pandas ``DataFrame``) as numbers the way a study would see any of its columns:
    numeric and boolean columns as they are, text and categorical ones with at most 10 values as
    0/1 columns, the rest (identifiers, free text) and R's ``rownames`` left out. Every column is
    kept, the label included: the print of a held-out table must match its copy whichever column
    the copy's study took as its label."""
    import pandas as pd

    parts = []
    for name in frame.columns:
        if str(name).lower() == "rownames":
            continue
        col = frame[name]
        if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
            parts.append(pd.to_numeric(col, errors="coerce").astype(float).to_numpy()[:, None])
        elif col.nunique(dropna=True) <= 10:
            parts.append(pd.get_dummies(col.astype(str), dtype=float).to_numpy())
    return np.hstack(parts) if parts else np.empty((len(frame), 0))
