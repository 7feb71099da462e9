"""The in-memory :class:`Dataset` record and the one place raw arrays become one.

Every loader (built-in, derived variant, user file) hands its raw features and raw
labels to :func:`build_dataset`, which re-maps labels to ``0..k-1``, checks the
invariants the rest of the project relies on and raises :class:`DatasetError` with
a one-line message when they do not hold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from agent.errors import DatasetError

KINDS: tuple[str, ...] = ("image", "sequence", "tabular")
MIN_INSTANCES = 10
_FEATURE_NDIM = {"image": 3, "sequence": 2, "tabular": 1}


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled classification dataset; arrays are read-only once built.

    ``X`` is float32: ``n x C x H x W`` in [0, 1] for images, ``n x C x L`` for
    sequences, ``n x F`` raw (not standardised) for tables. ``y`` is int64 in
    ``0..num_classes-1`` and ``class_names[i]`` is the original label of class ``i``.
    """

    name: str
    source: str
    kind: str
    X: np.ndarray
    y: np.ndarray
    class_names: tuple[str, ...]
    preparation: str = ""  # one line: how a table's columns became features (empty: nothing to say)
    # how raw rows become rows of X (agent.data.inputs.RawInputs; None: the model takes X as it is)
    inputs: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DatasetError(f"unknown dataset kind {self.kind!r}; valid kinds: {', '.join(KINDS)}")
        X = np.ascontiguousarray(self.X, dtype=np.float32)
        y = np.ascontiguousarray(self.y, dtype=np.int64)
        if X.ndim != 1 + _FEATURE_NDIM[self.kind]:
            raise DatasetError(f"{self.kind} dataset {self.name} has X of shape {X.shape}")
        if y.ndim != 1 or len(y) != len(X):
            raise DatasetError(f"dataset {self.name}: X has {len(X)} rows but y has shape {y.shape}")
        k = len(self.class_names)
        if len(y) and (y.min() < 0 or y.max() >= k):
            raise DatasetError(f"dataset {self.name}: labels must lie in 0..{k - 1}")
        X, y = X.view(), y.view()  # read-only views; the caller's arrays keep their flags
        X.setflags(write=False)
        y.setflags(write=False)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "class_names", tuple(str(c) for c in self.class_names))

    @property
    def n(self) -> int:
        """Number of instances."""
        return int(self.X.shape[0])

    @property
    def num_classes(self) -> int:
        """Number of classes (labels are ``0..num_classes-1``)."""
        return len(self.class_names)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one instance, ``X.shape[1:]``."""
        return tuple(int(d) for d in self.X.shape[1:])

    @cached_property
    def fingerprint(self) -> str:
        """Stable content hash (16 hex chars) over kind, shapes, dtypes and bytes."""
        h = hashlib.sha256()
        for arr in (self.X, self.y):
            h.update(f"{self.kind}|{arr.shape}|{arr.dtype.str}|".encode())
        h.update(self.X.data.cast("B"))
        h.update(self.y.data.cast("B"))
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, kind={self.kind!r}, n={self.n}, "
            f"feature_shape={self.feature_shape}, num_classes={self.num_classes})"
        )


def _label_name(value: object) -> str:
    """The display form of one original label (integral floats lose their ``.0``)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def encode_labels(labels: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Map raw labels to ``0..k-1`` in sorted original order; return codes and uniques."""
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise DatasetError(f"{where}: labels must be one-dimensional, got shape {labels.shape}")
    if labels.dtype.kind == "O":
        if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in labels):
            raise DatasetError(f"{where}: some labels are missing")
        labels = labels.astype(str)
    elif labels.dtype.kind == "f" and not np.isfinite(labels).all():
        raise DatasetError(f"{where}: some labels are missing or not finite")
    elif labels.dtype.kind not in "iubfUS":
        raise DatasetError(f"{where}: unsupported label type {labels.dtype}")
    uniques, codes = np.unique(labels, return_inverse=True)
    return codes.astype(np.int64).ravel(), uniques


def build_dataset(
    name: str,
    source: str,
    kind: str,
    X: np.ndarray,
    labels: np.ndarray,
    class_names: tuple[str, ...] | None = None,
    preparation: str = "",
    inputs: Any = None,
) -> Dataset:
    """Validate raw arrays and build a :class:`Dataset`.

    ``labels`` are original labels of any sortable type; when ``class_names`` is given
    the labels must already be codes ``0..len(class_names)-1`` and unused classes are
    dropped (codes re-mapped, names kept in order).
    """
    X = np.asarray(X)
    labels = np.asarray(labels)
    if len(X) == 0:
        raise DatasetError(f"dataset {name} is empty")
    if len(labels) != len(X):
        raise DatasetError(f"dataset {name}: X has {len(X)} rows but y has {len(labels)}")
    if X.dtype.kind not in "biuf":
        raise DatasetError(f"dataset {name}: features must be numeric, got dtype {X.dtype}")
    if not np.isfinite(X).all():
        raise DatasetError(f"dataset {name}: features contain missing or non-finite values")
    y, uniques = encode_labels(labels, f"dataset {name}")
    if class_names is None:
        names = tuple(_label_name(u) for u in uniques)
    else:
        names = tuple(class_names[int(c)] for c in uniques)
    if len(X) < MIN_INSTANCES:
        raise DatasetError(f"dataset {name} has only {len(X)} instances; at least {MIN_INSTANCES} are needed")
    if len(names) < 2:
        raise DatasetError(f"dataset {name} has a single class ({names[0]}); at least 2 are needed")
    return Dataset(
        name=name, source=source, kind=kind, X=X, y=y, class_names=names, preparation=preparation, inputs=inputs
    )
