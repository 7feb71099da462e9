"""A dataset's raw inputs: what a row looked like before it became a row of ``X``.

A model trained on a :class:`~agent.data.dataset.Dataset` reads ``X`` (encoded tables, images in
[0, 1], ...); a person serving it has rows as the data came: a table's columns with their text
categories and gaps, or a flat vector of pixel values. :class:`RawInputs` turns the second into the
first the way loading did, so the registered model (``tune-agent best --register``) takes raw rows:

- a table read by :func:`agent.data.tabular.prepare_table` (CSV, Parquet, R tables): its feature
  columns by name, encoded by the fitted :class:`TableEncoding` (medians, indicators, one-hot and
  ordinal codes learnt from the whole table);
- a built-in numeric table (iris, wine, breast-cancer): scikit-learn's feature columns as they are;
- built-in images and sequences (digits, mnist-5k, mnist1d): the flat values in the package's own
  scale (digits 0-16, MNIST 0-255), reshaped and divided as loading does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.errors import DatasetError

EXAMPLE_ROWS = 5
MISSING = "(missing)"  # a text column's gap, a category of its own (agent.data.tabular)


@dataclass(frozen=True)
class TableEncoding:
    """The column decisions and the fitted encoder :func:`~agent.data.tabular.prepare_table` used."""

    numeric: tuple[str, ...]
    categorical: tuple[str, ...]  # one-hot and ordinal columns, read as text
    encoder: Any  # the fitted scikit-learn ColumnTransformer

    def transform(self, frame: Any) -> np.ndarray:
        import pandas as pd

        columns: dict[str, Any] = {}
        for col in self.numeric:
            s = pd.to_numeric(frame[col], errors="coerce").astype(float)
            columns[col] = s.replace([np.inf, -np.inf], np.nan)
        for col in self.categorical:
            s = frame[col]
            columns[col] = s.astype("string").astype(object).where(s.notna(), MISSING)
        table = pd.DataFrame(columns)[list(self.encoder.feature_names_in_)]
        return np.asarray(self.encoder.transform(table), dtype=np.float32)


@dataclass(frozen=True)
class RawInputs:
    """How raw rows (a DataFrame with :attr:`columns`, or an array of that many values per row)
    become rows of the dataset's ``X`` (feature shape :attr:`shape`): a table's encoding, or
    ``values / scale`` reshaped. :attr:`example` holds a few raw rows as loading saw them."""

    columns: tuple[str, ...]
    shape: tuple[int, ...]
    scale: float = 1.0
    encoding: TableEncoding | None = None
    example: Any = None  # a pandas DataFrame of up to EXAMPLE_ROWS raw rows

    def to_features(self, rows: Any) -> np.ndarray:
        """``X`` rows (float32, ``n x shape``) for raw ``rows``; one line when they do not fit."""
        import pandas as pd

        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(np.asarray(rows).reshape(len(rows), -1))
        if not isinstance(rows, pd.DataFrame):
            if frame.shape[1] != len(self.columns):
                raise DatasetError(f"expected {len(self.columns)} values per row, got {frame.shape[1]}")
            frame.columns = list(self.columns)
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            raise DatasetError(
                f"missing input column(s) {', '.join(map(repr, missing[:5]))}; the model takes "
                f"{len(self.columns)} columns: {', '.join(self.columns[:8])}{', ...' if len(self.columns) > 8 else ''}"
            )
        if self.encoding is not None:
            return self.encoding.transform(frame)
        values = frame[list(self.columns)].to_numpy(dtype=np.float64) / self.scale
        return values.astype(np.float32).reshape(len(frame), *self.shape)


def numeric_inputs(columns: Sequence[str], X: np.ndarray, scale: float = 1.0, named: bool = True) -> RawInputs:
    """Raw inputs of a dataset whose ``X`` is its raw values divided by ``scale`` (built-ins). The
    example is a DataFrame of named columns (``named``: tables), else an ``n x values`` array, so
    the model's signature takes what such data usually is (``load_digits().data``)."""
    import pandas as pd

    flat = (np.asarray(X[:EXAMPLE_ROWS], dtype=np.float64) * scale).reshape(min(len(X), EXAMPLE_ROWS), -1)
    if scale != 1.0:
        flat = np.round(flat, 6)
    return RawInputs(
        tuple(columns),
        tuple(int(d) for d in X.shape[1:]),
        float(scale),
        None,
        pd.DataFrame(flat, columns=list(columns)) if named else flat,
    )


def pixel_columns(n: int, prefix: str = "pixel") -> tuple[str, ...]:
    return tuple(f"{prefix}_{i}" for i in range(n))
