"""The dataset a warm start measures for a user's DataModule: a bounded sample of its training loader.

Batches are drawn from ``train_dataloader()`` until about :data:`SAMPLE_ROWS` rows are held, never
more: the DataModule's data is never whole in tune-agent's memory. Each row's input is flattened;
its label is the batch's label tensor (class codes, or a regression target cut into quantile bins
for the meta-features). A batch is a tensor pair ``(x, y)``, a longer tuple or list, or a dict:
:func:`pick_tensors` says which tensors it used when there was a choice. The random generators are
seeded first, so the same DataModule gives the same sample (and content print) again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.errors import DatasetError

SAMPLE_ROWS = 2000
REGRESSION_BINS = 5
INPUT_KEYS = ("x", "input", "inputs", "image", "images", "features", "feature", "data", "X")
LABEL_KEYS = ("y", "label", "labels", "target", "targets", "Y", "class", "classes")


@dataclass(frozen=True)
class StoredSample:
    """A resumed project study's dataset: its name and content print as stored (its trials train on
    the DataModule; the sample itself served the warm start, when the study began)."""

    name: str
    fingerprint: str


@dataclass(frozen=True)
class LoaderSample:
    """``X`` (``n x ...`` as the loader gave it), ``y`` (``n``) and one line on what was used."""

    X: np.ndarray
    y: np.ndarray
    note: str = ""


def pick_tensors(batch: Any) -> tuple[Any, Any, str]:
    """``(inputs, labels or None, note)`` of one batch; ``note`` names the tensors used when the
    batch held more than an ``(x, y)`` pair, else ''."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch, None, "the loader yields one tensor: the sample has no labels"
    if isinstance(batch, Mapping):
        tensors = {str(k): v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        x_key = next((k for k in INPUT_KEYS if k in tensors), None)
        y_key = next((k for k in LABEL_KEYS if k in tensors), None)
        if x_key is None:
            floats = [k for k, v in tensors.items() if v.is_floating_point() and k != y_key]
            x_key = floats[0] if floats else next((k for k in tensors if k != y_key), None)
        if x_key is None:
            raise DatasetError(
                f"the DataModule's batches are dicts without a tensor to sample (keys: {', '.join(map(str, batch))})"
            )
        note = f"the loader yields dicts ({', '.join(tensors)}): the sample uses {x_key!r} as inputs" + (
            f" and {y_key!r} as labels" if y_key else " and has no labels"
        )
        return tensors[x_key], tensors.get(y_key) if y_key else None, note
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        items = [v for v in batch if isinstance(v, torch.Tensor)]
        if not items:
            raise DatasetError("the DataModule's batches hold no tensor to sample")
        if len(items) == 1:
            return items[0], None, "the loader yields one tensor: the sample has no labels"
        note = (
            ""
            if len(batch) == 2
            else f"the loader yields {len(batch)} items: the sample uses the first as inputs and the second as labels"
        )
        return items[0], items[1], note
    raise DatasetError(f"the DataModule's batches are {type(batch).__name__}, not tensors, tuples or dicts")


def sample_loader(loader: Any, rows: int = SAMPLE_ROWS) -> LoaderSample:
    """Up to ``rows`` rows of ``loader`` (a few batches: it stops as soon as it has enough)."""
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    held, note, labelled = 0, "", True
    for batch in loader:
        x, y, note = pick_tensors(batch)
        x_np = x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
        if x_np.ndim == 1:
            x_np = x_np[:, None]
        take = min(len(x_np), rows - held)
        xs.append(np.asarray(x_np[:take]))
        if y is None:
            labelled = False
        else:
            ys.append(np.asarray(y.detach().cpu().numpy()[:take]).reshape(take, -1)[:, 0])
        held += take
        if held >= rows:
            break
    if not xs:
        raise DatasetError("the DataModule's training loader yields no batch")
    X = np.concatenate(xs)
    y = np.concatenate(ys) if labelled and ys else np.zeros(len(X))
    return LoaderSample(X, y, note)


def as_dataset(sample: LoaderSample, name: str, say: Callable[[str], None] = lambda _: None) -> Any:
    """The sample as a :class:`~agent.data.dataset.Dataset` (kind ``tabular``: rows flattened)."""
    from agent.data.dataset import build_dataset

    X = np.asarray(sample.X, dtype=np.float32).reshape(len(sample.X), -1)
    if not np.isfinite(X).all():
        X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
    labels, how = _labels(sample.y, X)
    if sample.note:
        say(f"data sample: {sample.note}")
    if how:
        say(f"data sample: {how}")
    return build_dataset(name, "datamodule", "tabular", X, labels)


def _labels(y: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, str]:
    """Class codes as they are; a continuous target (or none: each row's mean) cut into quantile bins."""
    y = np.asarray(y)
    distinct = len(np.unique(y))
    integral = y.dtype.kind in "iub" or (y.dtype.kind == "f" and bool(np.all(y == np.round(y))))
    if integral and 2 <= distinct <= max(2, len(y) // 2):
        return y.astype(np.int64), ""
    if y.dtype.kind in "iuf" and distinct >= 2:
        basis, what = y.astype(np.float64), "a continuous target"
    else:
        basis, what = X.mean(axis=1).astype(np.float64), "no labels: each row's mean"
    edges = np.quantile(basis, np.linspace(0, 1, REGRESSION_BINS + 1)[1:-1])
    codes = np.searchsorted(edges, basis, side="right")
    if len(np.unique(codes)) < 2:
        codes = np.arange(len(basis)) % 2
    return codes.astype(np.int64), f"{what} cut into {REGRESSION_BINS} quantile bins as classes for the meta-features"
