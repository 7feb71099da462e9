"""The ``evaluate`` stage's resumable state under ``data/evaluate/``: the key of its settings and
exported history (:func:`settings_key`), the journal of replayed targets (:func:`read_journal`)
and arrays computed once per key (:func:`cached`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REVISION = 2  # of the protocol: bump when what a journal line means changes


def cached(path: Path, make: Callable[[], Any]) -> Any:
    """``make()``'s arrays, kept in ``path`` (.npz) so a resumed stage does not recompute them."""
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    out = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **out)
    tmp.replace(path)
    return out


def settings_key(p: Mapping[str, Any], mf: Mapping[str, Any], keys: Sequence[str], configs: Sequence[str]) -> str:
    blob = json.dumps(
        {
            "revision": REVISION,
            "evaluate": dict(p),
            "meta_features": dict(mf),
            "datasets": list(keys),
            "configs": list(configs),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def read_journal(path: Path, key: str) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that target is replayed again
            if entry.get("key") == key:
                done[entry["target"]] = entry
    return done
