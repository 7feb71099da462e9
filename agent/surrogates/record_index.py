"""Where each record of a source-model file starts, so a study parses only the records it asks for.

A file of source-model records (:mod:`agent.surrogates.source_store`: a published chunk, or
``models/source_models.jsonl``) holds every source of a history; a study attends to at most a few
hundred. The index maps each record's key to its line's offset and length. It is built by reading
the file once and kept beside it (``<file>.index.<python>.marshal``, in :mod:`marshal`'s format, which reads
the index of tens of thousands of records several times faster than JSON); a file that grew since (appended lines)
has only its new lines indexed, and one that changed otherwise (another first block, or shorter) is
indexed again. Where the index cannot be written (a read-only folder) it is built in memory.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUFFIX = f".index.{sys.implementation.cache_tag}.marshal"  # marshal's format is this interpreter's
FORMAT = 2
HEAD = 4096  # bytes whose digest tells the same file grown from another file

Entry = tuple[tuple[str, ...], int, int]  # (record key, offset, length)


def index_of(path: Path, key: Callable[[dict[str, Any]], tuple[str, ...]]) -> list[Entry]:
    """The (key, offset, length) of every whole, readable line of ``path``, in file order."""
    try:
        size = path.stat().st_size
    except OSError:
        return []
    side = path.with_name(path.name + SUFFIX)
    head = _head(path)
    stored = _read(side)
    entries: list[Entry] = []
    start = 0
    if stored is not None and stored["head"] == head and stored["size"] <= size:
        entries = stored["entries"]
        start = int(stored["size"])
    if start == size and stored is not None:
        return entries
    end = start
    with open(path, "rb") as f:
        f.seek(start)
        for line in f:
            if not line.endswith(b"\n"):
                break  # a line still being written (or cut short by a crash): indexed once it is whole
            try:
                entries.append((key(json.loads(line)), end, len(line)))
            except (ValueError, KeyError, TypeError, AttributeError):
                pass  # a line of another format
            end += len(line)
    _write(side, {"format": FORMAT, "head": head, "size": end, "entries": entries})
    return entries


def read_record(path: Path, offset: int, length: int) -> dict[str, Any] | None:
    """The record at ``offset`` (None when the file no longer holds it whole)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            line = f.read(length)
        record = json.loads(line)
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read(HEAD)).hexdigest()[:16]
    except OSError:
        return ""


def _read(side: Path) -> dict[str, Any] | None:
    try:
        data = marshal.loads(side.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    ok = isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), list)
    return data if ok else None


def _write(side: Path, data: dict[str, Any]) -> None:
    """Whole or not at all: written aside, then renamed over (two writers leave one whole index)."""
    tmp = side.with_name(f"{side.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(marshal.dumps(data))
        os.replace(tmp, side)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
