"""User dataset files: ``.npz`` arrays, ``.csv``/``.parquet`` tables, image folders.

Conventions owned here:

* ``.npz`` holds arrays ``X`` and ``y``. 2-D ``X`` is tabular, 3-D ``n x H x W`` an
  image ``1 x H x W``, 4-D an image in NCHW (NHWC with 1 or 3 channels is
  transposed). Image values outside [0, 1] are divided by 255 when they lie in
  [0, 255], otherwise min-max scaled.
* Tables take their label from ``label`` (default: a column named ``label`` or
  ``target``, any case); ``drop`` names columns to leave out (IDs). Text, categorical and
  boolean columns and missing values are encoded by :mod:`agent.data.tabular`, whose one-line
  note becomes the dataset's ``preparation``. Labels may be strings, booleans or integers.
* Image folders follow the ImageFolder layout, see :mod:`agent.data.image_folder`.

Dataset names are ``file:<absolute path>`` plus ``#label=<col>&drop=<a,b>`` (URL-encoded) for the
options given.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from agent.data.dataset import Dataset, build_dataset
from agent.data.tabular import TableOptions
from agent.errors import DatasetError

TABLE_SUFFIXES: tuple[str, ...] = (".csv", ".parquet", ".pq")
FILE_SUFFIXES: tuple[str, ...] = (".npz",) + TABLE_SUFFIXES
_DEFAULT_LABELS = ("label", "target")


def file_name(path: Path, options: TableOptions = TableOptions()) -> str:
    """The dataset name of a user file."""
    return options.name(f"file:{path}")


def load_file(spec: str, options: TableOptions = TableOptions()) -> Dataset:
    """Load a user dataset from a file or image folder path (``options`` apply to tables)."""
    path = Path(spec).expanduser().resolve()
    if not path.exists():
        raise DatasetError(f"dataset file not found: {path}")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix == ".npz":
        if options != TableOptions():
            raise DatasetError(f"--label and --drop only apply to .csv/.parquet files and r: tables, not {path}")
        if path.is_dir():
            from agent.data.image_folder import load_image_folder

            return load_image_folder(path, file_name(path))
        return _load_npz(path)
    if suffix in TABLE_SUFFIXES:
        return _load_table(path, options)
    raise DatasetError(
        f"unsupported dataset file type {suffix or '(none)'!r}: {path}; "
        f"expected {', '.join(FILE_SUFFIXES)} or an image folder"
    )


def _load_npz(path: Path) -> Dataset:
    name = file_name(path)
    if path.stat().st_size == 0:
        raise DatasetError(f"dataset file is empty: {path}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in ("X", "y") if k not in archive.files]
            if missing:
                raise DatasetError(
                    f"{path} lacks array(s) {', '.join(missing)}; "
                    f"an .npz dataset needs X and y (has: {', '.join(archive.files) or 'none'})"
                )
            X, y = archive["X"], archive["y"]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DatasetError(f"cannot read dataset file {path}: {_one_line(exc)}") from exc
    if len(X) != len(y):
        raise DatasetError(f"dataset {name}: X has {len(X)} rows but y has {len(y)}")
    kind, X = _shape_npz_features(X, name)
    return build_dataset(name, "file", kind, X, y)


def _shape_npz_features(X: np.ndarray, name: str) -> tuple[str, np.ndarray]:
    if X.dtype.kind not in "biuf":
        raise DatasetError(f"dataset {name}: X must be numeric, got dtype {X.dtype}")
    if X.ndim == 2:
        return "tabular", X.astype(np.float32)
    if X.ndim == 3:
        X = X[:, None, :, :]
    elif X.ndim == 4:
        if X.shape[-1] in (1, 3) and X.shape[1] not in (1, 3):
            X = X.transpose(0, 3, 1, 2)
    else:
        raise DatasetError(f"dataset {name}: X must be 2-, 3- or 4-dimensional, got shape {X.shape}")
    return "image", _unit_scale(X.astype(np.float32))


def _unit_scale(X: np.ndarray) -> np.ndarray:
    if X.size == 0 or not np.isfinite(X).all():
        return X  # build_dataset reports these
    lo, hi = float(X.min()), float(X.max())
    if lo >= 0.0 and hi <= 1.0:
        return X
    if lo >= 0.0 and hi <= 255.0:
        return X / 255.0
    return (X - lo) / (hi - lo)


def _read_table(path: Path):  # -> pandas.DataFrame
    import pandas as pd

    if path.stat().st_size == 0:
        raise DatasetError(f"dataset file is empty: {path}")
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
        return pd.read_parquet(path)
    except pd.errors.EmptyDataError as exc:
        raise DatasetError(f"dataset file is empty: {path}") from exc
    except Exception as exc:  # pandas/pyarrow raise many types for corrupt files
        raise DatasetError(f"cannot read dataset file {path}: {_one_line(exc)}") from exc


def _pick_label(columns: list[str], label: str | None, path: Path) -> str:
    if label is not None:
        if label not in columns:
            raise DatasetError(f"{path} has no column {label!r}; columns: {_short_list(columns)}")
        return label
    for wanted in _DEFAULT_LABELS:
        for col in columns:
            if col.strip().lower() == wanted:
                return col
    raise DatasetError(f"{path} has no label column; pass --label (columns: {_short_list(columns)})")


def _load_table(path: Path, options: TableOptions) -> Dataset:
    from agent.data.tabular import prepare_table

    df = _read_table(path)
    name = file_name(path, options)
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise DatasetError(f"dataset file is empty: {path}")
    df.columns = [str(c) for c in df.columns]
    target = _pick_label(list(df.columns), options.label, path)
    inputs: list = []
    X, labels, note = prepare_table(df, target, options.drop, where=str(path), rows=options.rows, inputs=inputs)
    return build_dataset(name, "file", "tabular", X, labels, preparation=note, inputs=inputs[0])


def _short_list(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
