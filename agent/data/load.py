"""The single entry point turning a dataset spec string into a :class:`Dataset`.

A spec is a user file when it names an existing path, contains a path separator,
or its name (before any ``?``) ends in a file suffix; otherwise it is a built-in
name with an optional variant query.
"""

from __future__ import annotations

import os
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


def load_dataset(spec: str, label: str | None = None) -> Dataset:
    """Load a built-in dataset, a derived variant or a user file.

    ``label`` names the label column of a .csv/.parquet file and is an error for
    anything else.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DatasetError("empty dataset spec; give a built-in name "
                           f"({', '.join(BUILTIN_DATASETS)}) or a file path")
    spec = spec.strip()
    if spec.startswith("file:"):
        spec = spec[len("file:"):]
        spec, _, label_part = spec.partition("#label=")
        if label is None and label_part:
            label = label_part
        from agent.data.files import load_file

        return load_file(spec, label)
    if _is_file_spec(spec):
        from agent.data.files import load_file

        return load_file(spec, label)
    if label is not None:
        raise DatasetError(f"a label column only applies to .csv/.parquet files, not built-in {spec!r}")
    from agent.data.variants import load_variant

    return load_variant(spec)
