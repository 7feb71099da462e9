"""Real tables as they come: categorical, boolean and text columns, missing values, IDs.

:func:`prepare_table` turns a pandas ``DataFrame`` and the name of its label column into numeric
features, raw labels and a one-line note of what was done. The rules, applied column by column in
file order (scikit-learn's transformers do the encoding):

* columns named in ``drop`` (``--drop COL``) are left out first; an unknown name is an error;
* rows whose label is missing are left out (and counted in the note);
* a column that is entirely missing, or holds one value everywhere (missing counts as a value), is
  dropped;
* booleans become 0/1;
* a text column whose non-missing values nearly all parse as numbers (``"?"`` or ``"n/a"`` markers
  among them) is read as numbers, the markers becoming missing values;
* numeric columns with missing (or infinite) values get the column's median and a 0/1 indicator column;
* text or categorical columns with at most :data:`ONEHOT_MAX` distinct values are one-hot encoded
  (one column for a binary one; missing is a category of its own); with more, they are ordinal
  codes in sorted order, unless nearly every row has its own value (an identifier or free text:
  :data:`ID_LIKE`), in which case they are dropped.

The label must be a class: strings, booleans, categories or integers, with at least two rows per
class on average. A continuous label (non-integral numbers) or one that gives most rows a class of
their own is refused in one line. The same file and options always give the same encoding (the
rules read nothing but the file), so a resumed study re-encodes identically; its fingerprint check
catches a file that changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.data.dataset import MIN_INSTANCES
from agent.data.inputs import MISSING
from agent.errors import DatasetError

ONEHOT_MAX = 10  # distinct values up to which a categorical column is one-hot encoded
ID_LIKE = 0.9  # a text column with distinct values on more than this share of rows is an identifier
NUMERIC_TEXT = 0.95  # share of non-missing text values that must parse as numbers to read it as numeric
MIN_ROWS_PER_CLASS = 2.0  # average rows per class below which a label is not a class column


@dataclass(frozen=True)
class TableOptions:
    """How a table is read: its label column, columns left out, and a row cap (a stratified sample
    of at most ``rows`` rows, seed 0). Written into dataset names as a ``#label=..&drop=..&rows=..``
    fragment, so a stored study reloads its table the same way."""

    label: str | None = None
    drop: tuple[str, ...] = ()
    rows: int | None = None

    def merged(self, label: str | None, drop: Sequence[str]) -> TableOptions:
        """These options with explicit ``--label``/``--drop`` values taking precedence."""
        return TableOptions(label if label is not None else self.label, tuple(drop) or self.drop, self.rows)

    def name(self, base: str) -> str:
        from urllib.parse import urlencode

        pairs = (("label", self.label), ("drop", ",".join(self.drop)), ("rows", str(self.rows) if self.rows else ""))
        options = {k: v for k, v in pairs if v}
        return base + (f"#{urlencode(options)}" if options else "")

    @staticmethod
    def parse(name: str) -> tuple[str, TableOptions]:
        """``BASE#label=..&drop=..&rows=..`` -> (BASE, options)."""
        from urllib.parse import parse_qs

        base, _, query = name.partition("#")
        found = parse_qs(query)
        unknown = set(found) - {"label", "drop", "rows"}
        if unknown:
            raise DatasetError(
                f"unknown table option(s) {', '.join(sorted(unknown))} in {name!r}; known: label, drop, rows"
            )
        rows = found.get("rows", [None])[0]
        if rows is not None and (not rows.isdigit() or int(rows) < MIN_INSTANCES):
            raise DatasetError(f"rows={rows} in {name!r} must be a whole number of at least {MIN_INSTANCES}")
        drop = tuple(c for c in found.get("drop", [""])[0].split(",") if c)
        return base, TableOptions(found.get("label", [None])[0], drop, int(rows) if rows else None)


@dataclass
class TablePlan:
    """What :func:`prepare_table` did, column by column."""

    numeric: list[str] = field(default_factory=list)
    imputed: list[str] = field(default_factory=list)
    onehot: list[str] = field(default_factory=list)
    ordinal: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # column -> why
    rows_without_label: int = 0
    sampled_from: int = 0  # rows before a ``rows=`` cap drew its stratified sample (0: no sample)

    def note(self, n_rows: int, n_columns: int, n_features: int) -> str:
        """One line saying what was done."""
        parts = [f"table: {n_rows} rows, {n_columns} feature columns -> {n_features} features"]
        if self.onehot:
            parts.append(f"one-hot {_names(self.onehot)}")
        if self.ordinal:
            parts.append(f"ordinal {_names(self.ordinal)}")
        if self.imputed:
            parts.append(f"median-imputed with indicators {_names(self.imputed)}")
        if self.dropped:
            by_reason: dict[str, list[str]] = {}
            for col, why in self.dropped.items():
                by_reason.setdefault(why, []).append(col)
            parts.append("dropped " + "; ".join(f"{_names(cols)} ({why})" for why, cols in by_reason.items()))
        if self.rows_without_label:
            parts.append(f"{self.rows_without_label} rows without a label left out")
        if self.sampled_from:
            parts.append(f"a stratified sample of {n_rows} of {self.sampled_from} rows")
        return "; ".join(parts)


def _names(cols: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(cols[:limit])
    return shown + (f" (+{len(cols) - limit} more)" if len(cols) > limit else "")


def check_label(labels: Any, column: str, where: str) -> None:
    """Refuse a label column that is not a class (one line, :class:`DatasetError`)."""
    import pandas as pd

    s = pd.Series(labels)
    n = len(s)
    if pd.api.types.is_float_dtype(s.dtype):
        frac = s[(s % 1) != 0]
        if len(frac):
            raise DatasetError(
                f"{where}: label {column!r} is continuous (e.g. {frac.iloc[0]:g}); "
                "tune-agent tunes classifiers: pass --label with a class column"
            )
    k = s.nunique()
    if n and k > 1 and n / k < MIN_ROWS_PER_CLASS:
        raise DatasetError(
            f"{where}: label {column!r} has {k} distinct values over {n} rows, nearly one row "
            "per class: it is not a class column (continuous or an identifier?); pass --label"
        )


def prepare_table(
    df: Any,
    target: str,
    drop: Sequence[str] = (),
    where: str = "table",
    why_dropped: Mapping[str, str] | None = None,
    rows: int | None = None,
    inputs: list[Any] | None = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Features (float32 ``n x F``), raw labels and a one-line note; see the module docstring.

    ``why_dropped`` says why a column of ``drop`` is left out (default: ``--drop``); ``rows`` caps
    the table at a stratified sample of that many rows (seed 0); ``inputs`` (a list) gets the
    :class:`~agent.data.inputs.RawInputs` that encodes raw rows of the used columns as here."""
    import pandas as pd

    plan = TablePlan()
    _check_drop(df, target, drop, where, why_dropped, plan)
    df = _rows_with_label(df, target, where, plan)
    labels = df[target]
    check_label(labels, target, where)
    if rows is not None and len(df) > rows:
        df = _stratified_rows(df, labels, rows, plan)
        labels = df[target]

    features = df.drop(columns=[target, *drop])
    if features.shape[1] == 0:
        raise DatasetError(f"{where} has no feature columns besides the label {target!r}")
    columns = _feature_columns(features, plan)
    if not columns:
        raise DatasetError(f"{where}: no usable feature column is left ({plan.note(len(df), features.shape[1], 0)})")
    table = pd.DataFrame(columns)
    encoder = _encoder(plan)
    X = np.asarray(encoder.fit_transform(table), dtype=np.float32)
    if inputs is not None:
        inputs.append(_raw_inputs(features, list(table.columns), plan, encoder, X.shape[1]))
    return X, labels.to_numpy(), plan.note(len(df), features.shape[1], X.shape[1])


def _check_drop(
    df: Any, target: str, drop: Sequence[str], where: str, why_dropped: Mapping[str, str] | None, plan: TablePlan
) -> None:
    """Refuse a ``--drop`` that names no column or the label; note why each dropped column is left out."""
    unknown = [c for c in drop if c not in df.columns]
    if unknown:
        raise DatasetError(
            f"{where}: --drop names no column {', '.join(map(repr, unknown))}; "
            f"columns: {_names(list(map(str, df.columns)), 12)}"
        )
    if target in drop:
        raise DatasetError(f"{where}: --drop {target!r} is the label column")
    for col in drop:
        plan.dropped[col] = (why_dropped or {}).get(col, "--drop")


def _rows_with_label(df: Any, target: str, where: str, plan: TablePlan) -> Any:
    """The rows whose label is present (their count noted), refused when too few are left."""
    has_label = df[target].notna()
    plan.rows_without_label = int((~has_label).sum())
    df = df.loc[has_label].reset_index(drop=True)
    if df.empty:
        raise DatasetError(f"{where}: every row's label {target!r} is missing")
    if len(df) < MIN_INSTANCES:
        raise DatasetError(f"dataset {where} has only {len(df)} instances; at least {MIN_INSTANCES} are needed")
    return df


def _stratified_rows(df: Any, labels: Any, rows: int, plan: TablePlan) -> Any:
    """A stratified sample of ``rows`` rows (seed 0; a plain one when a class is too small)."""
    from sklearn.model_selection import train_test_split

    plan.sampled_from = len(df)
    codes = labels.astype("string").to_numpy()
    try:
        keep, _ = train_test_split(np.arange(len(df)), train_size=rows, stratify=codes, random_state=0)
    except ValueError:  # a class too small to stratify: a plain random sample
        keep, _ = train_test_split(np.arange(len(df)), train_size=rows, random_state=0)
    return df.iloc[np.sort(keep)].reset_index(drop=True)


def _feature_columns(features: Any, plan: TablePlan) -> dict[str, Any]:
    """The usable feature columns, each as it is encoded (``plan`` says how, or why one is dropped)."""
    columns: dict[str, Any] = {}
    for col in features.columns:
        s = _feature_column(col, features[col], plan)
        if s is not None:
            columns[col] = s
    return columns


def _feature_column(col: str, s: Any, plan: TablePlan) -> Any:
    """One column ready to encode, noted in ``plan``; None when it is dropped (and why is noted)."""
    import pandas as pd

    if s.isna().all():
        plan.dropped[col] = "all missing"
        return None
    if s.nunique(dropna=False) <= 1:
        plan.dropped[col] = "constant"
        return None
    if pd.api.types.is_bool_dtype(s.dtype):
        s = s.astype(float)
    elif not pd.api.types.is_numeric_dtype(s.dtype):
        parsed = pd.to_numeric(s, errors="coerce")
        present = s.notna()
        if present.any() and parsed[present].notna().mean() >= NUMERIC_TEXT:
            s = parsed
            if s.nunique(dropna=False) <= 1:
                plan.dropped[col] = "constant"
                return None
    if pd.api.types.is_numeric_dtype(s.dtype):
        s = s.astype(float).replace([np.inf, -np.inf], np.nan)  # R's Inf is a gap, like NA
        if s.isna().all() or s.nunique(dropna=False) <= 1:
            plan.dropped[col] = "all missing" if s.isna().all() else "constant"
            return None
        plan.numeric.append(col)
        if s.isna().any():
            plan.imputed.append(col)
        return s
    s = s.astype("string").astype(object).where(s.notna(), MISSING)
    distinct = s.nunique()
    if distinct <= ONEHOT_MAX:
        plan.onehot.append(col)
    elif distinct > ID_LIKE * len(s):
        plan.dropped[col] = "identifier or free text"
        return None
    else:
        plan.ordinal.append(col)
    return s


def _encoder(plan: TablePlan) -> Any:
    """The (unfitted) column transformer for ``plan``'s numeric, one-hot and ordinal columns."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    steps: list[tuple[str, Any, list[str]]] = []
    if plan.numeric:
        steps.append(("numeric", SimpleImputer(strategy="median", add_indicator=True), plan.numeric))
    if plan.onehot:
        steps.append(
            (
                "onehot",
                OneHotEncoder(drop="if_binary", sparse_output=False, handle_unknown="ignore", dtype=np.float32),
                plan.onehot,
            )
        )
    if plan.ordinal:
        steps.append(("ordinal", OrdinalEncoder(dtype=np.float32), plan.ordinal))
    return ColumnTransformer(steps, sparse_threshold=0.0)


def _raw_inputs(features: Any, used: list[str], plan: TablePlan, encoder: Any, width: int) -> Any:
    """The :class:`~agent.data.inputs.RawInputs` that encodes raw rows of the ``used`` columns."""
    import pandas as pd

    from agent.data.inputs import EXAMPLE_ROWS, RawInputs, TableEncoding

    example = features[used].head(EXAMPLE_ROWS).copy()
    for col in plan.numeric:  # typed as numbers in the model's signature (ints pass as floats)
        example[col] = pd.to_numeric(example[col], errors="coerce").astype(float)
    categorical = [c for c in used if c not in plan.numeric]
    for col in categorical:
        example[col] = example[col].astype("string").astype(object).where(example[col].notna(), None)
    return RawInputs(
        tuple(used), (width,), 1.0, TableEncoding(tuple(plan.numeric), tuple(categorical), encoder), example
    )
