"""The single entry point turning a dataset spec string into a :class:`Dataset`.

A spec is a user file when it names an existing path, contains a path separator,
or its name (before any ``?``) ends in a file suffix; otherwise it is a built-in
name with an optional variant query.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agent.data.builtin import BUILTIN_DATASETS
from agent.data.dataset import Dataset
from agent.errors import DatasetError


def _is_file_spec(spec: str) -> bool:
    base = spec.partition("?")[0]
    if base in BUILTIN_DATASETS:
        return False
    if os.path.exists(spec) or "/" in spec or os.sep in spec:
        return True
    return Path(base).suffix != "" or spec.startswith("~")


def load_dataset(spec: str, label: str | None = None, drop: Sequence[str] = ()) -> Dataset:
    """Load a built-in dataset, a derived variant or a user file.

    ``label`` names the label column of a .csv/.parquet file or ``r:`` table and ``drop`` columns
    to leave out; both are an error for anything else. ``file:PATH#...`` and ``r:PACKAGE/ITEM#...``
    carry the same options, plus ``rows=N``, in a fragment (see :class:`TableOptions`).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DatasetError(f"empty dataset spec; give a built-in name ({', '.join(BUILTIN_DATASETS)}) or a file path")
    spec = spec.strip()
    if spec.startswith(("r:", "file:")):
        from agent.data.tabular import TableOptions

        base, options = TableOptions.parse(spec)
        options = options.merged(label, drop)
        if base.startswith("r:"):
            from agent.data.rtables import load_rtable

            return load_rtable(base, options)
        from agent.data.files import load_file

        return load_file(base[len("file:") :], options)
    if _is_file_spec(spec):
        from agent.data.files import load_file
        from agent.data.tabular import TableOptions

        return load_file(spec, TableOptions(label, tuple(drop)))
    if label is not None or drop:
        raise DatasetError(f"--label and --drop only apply to .csv/.parquet files, not built-in {spec!r}")
    from agent.data.variants import load_variant

    return load_variant(spec)
