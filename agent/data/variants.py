"""Derived variants of built-in datasets: ``NAME?classes=0-4,7&rows=1000&size=10&fraction=0.3&seed=1``.

A variant keeps a subset of the original classes, a stratified sample of ``rows`` instances
(always the same one: seed 0), images resized to ``size`` x ``size`` (bilinear) and/or a
stratified, seeded fraction of what is left, so many related datasets come from few real
sources (paper 003 subsamples each image dataset at ten fractions). This module owns parsing
the query, its canonical name (keys in the order classes, rows, size, fraction, seed; defaults
omitted; ``seed`` dropped when there is no fraction, since it changes nothing then) and applying
it to a source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.data.builtin import BUILTIN_DATASETS, load_source
from agent.data.dataset import Dataset, build_dataset
from agent.errors import DatasetError

VARIANT_KEYS: tuple[str, ...] = ("classes", "rows", "size", "fraction", "seed")


@dataclass(frozen=True)
class VariantSpec:
    """A parsed built-in spec; ``classes`` None means all classes."""

    source: str
    classes: tuple[int, ...] | None = None
    rows: int | None = None
    size: int | None = None
    fraction: float = 1.0
    seed: int = 0

    @property
    def name(self) -> str:
        """The canonical name of this variant."""
        parts = []
        if self.classes is not None:
            parts.append(f"classes={format_classes(self.classes)}")
        if self.rows is not None:
            parts.append(f"rows={self.rows}")
        if self.size is not None:
            parts.append(f"size={self.size}")
        if self.fraction != 1.0:
            parts.append(f"fraction={self.fraction!r}")
            if self.seed != 0:
                parts.append(f"seed={self.seed}")
        return self.source + ("?" + "&".join(parts) if parts else "")


def format_classes(classes: tuple[int, ...]) -> str:
    """Compress sorted class labels into ranges, e.g. (0,1,2,3,4,7) -> "0-4,7"."""
    runs: list[list[int]] = []
    for c in classes:
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _parse_classes(value: str, spec: str) -> tuple[int, ...]:
    bad = DatasetError(f"bad classes {value!r} in dataset spec {spec!r}; expected e.g. classes=0-4,7")
    chosen: set[int] = set()
    for part in value.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.strip().isdigit() or (sep and not hi.strip().isdigit()):
            raise bad
        a, b = int(lo), int(hi) if sep else int(lo)
        if a > b:
            raise bad
        chosen.update(range(a, b + 1))
    return tuple(sorted(chosen))


def _parse_fraction(value: str, spec: str) -> float:
    try:
        f = float(value)
    except ValueError:
        f = float("nan")
    if not 0.0 < f <= 1.0:
        raise DatasetError(f"bad fraction {value!r} in dataset spec {spec!r}; expected 0 < fraction <= 1")
    return f


def _positive(key: str, example: str) -> Callable[[str, str], int]:
    def parse(value: str, spec: str) -> int:
        if not value.strip().isdigit() or int(value) < 1:
            raise DatasetError(
                f"bad {key} {value!r} in dataset spec {spec!r}; expected a positive integer, e.g. {example}"
            )
        return int(value)

    return parse


def _parse_seed(value: str, spec: str) -> int:
    if not value.strip().isdigit():
        raise DatasetError(f"bad seed {value!r} in dataset spec {spec!r}; expected a non-negative integer")
    return int(value)


def parse_spec(spec: str) -> VariantSpec:
    """Parse ``NAME[?key=value&...]`` into a :class:`VariantSpec` or raise DatasetError."""
    base, _, query = spec.strip().partition("?")
    if base not in BUILTIN_DATASETS:
        raise DatasetError(
            f"unknown dataset {base!r}; built-in datasets: {', '.join(BUILTIN_DATASETS)}"
            " (or give a path to a .npz, .csv, .parquet file or an image folder)"
        )
    options: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key not in VARIANT_KEYS or not eq:
            raise DatasetError(
                f"bad option {item!r} in dataset spec {spec!r}; "
                f"valid options: {', '.join(k + '=...' for k in VARIANT_KEYS)}"
            )
        if key in options:
            raise DatasetError(f"option {key!r} given twice in dataset spec {spec!r}")
        options[key] = value.strip()
    parsers: dict[str, Callable[[str, str], Any]] = {
        "classes": _parse_classes,
        "rows": _positive("rows", "rows=1000"),
        "size": _positive("size", "size=10"),
        "fraction": _parse_fraction,
        "seed": _parse_seed,
    }
    parsed: dict[str, Any] = {k: parsers[k](v, spec) for k, v in options.items()}
    return VariantSpec(source=base, **parsed)


def stratified_fraction(y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices keeping ``round(fraction * n_c)`` (at least 1) of each class."""
    rng = np.random.default_rng(seed)
    keep = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = max(1, int(round(fraction * len(idx))))
        keep.append(rng.permutation(idx)[:k])
    return np.sort(np.concatenate(keep))


def _area_matrix(n: int, size: int) -> np.ndarray:
    """``size x n`` weights: row i averages the source pixels under target pixel i, by overlap."""
    edges = np.linspace(0.0, n, size + 1)
    lo, hi = edges[:-1, None], edges[1:, None]
    pixel = np.arange(n)[None]
    overlap = np.clip(np.minimum(hi, pixel + 1) - np.maximum(lo, pixel), 0.0, None)
    return overlap / overlap.sum(axis=1, keepdims=True)


def resized(X: np.ndarray, size: int, kind: str, spec: str) -> np.ndarray:
    """Images ``n x C x H x W`` resized to ``size`` x ``size`` by area averaging (each new pixel is
    the overlap-weighted mean of the old ones under it; values stay in range)."""
    if kind != "image":
        raise DatasetError(f"size= resizes images; dataset spec {spec!r} is {kind} data")
    _, _, height, width = X.shape
    rows, cols = _area_matrix(height, size), _area_matrix(width, size)
    return np.einsum("ih,nchw,jw->ncij", rows, np.asarray(X, dtype=np.float64), cols)


def load_variant(spec: str) -> Dataset:
    """Load a built-in dataset or one of its derived variants."""
    parsed = parse_spec(spec)
    raw = load_source(parsed.source)
    X, y = raw.X, raw.y
    if parsed.classes is not None:
        present = np.unique(y)
        missing = sorted(set(parsed.classes) - set(present.tolist()))
        if missing:
            raise DatasetError(
                f"dataset {parsed.source} has no class {format_classes(tuple(missing))}; "
                f"its classes are {format_classes(tuple(present.tolist()))}"
            )
        mask = np.isin(y, parsed.classes)
        X, y = X[mask], y[mask]
    if parsed.rows is not None and parsed.rows < len(y):
        idx = stratified_fraction(y, parsed.rows / len(y), 0)
        X, y = X[idx], y[idx]
    if parsed.size is not None:
        X = resized(X, parsed.size, raw.kind, spec)
    if parsed.fraction < 1.0:
        idx = stratified_fraction(y, parsed.fraction, parsed.seed)
        X, y = X[idx], y[idx]
    from agent.data.inputs import numeric_inputs

    return build_dataset(
        parsed.name,
        parsed.source,
        raw.kind,
        X,
        y,
        class_names=raw.class_names,
        inputs=numeric_inputs(raw.columns, X, raw.scale, named=raw.kind == "tabular"),
    )
