"""Source models as a file: what the history's GPs learned, kept so that no study refits them.

A transfer surrogate needs one GP per historical dataset (a *source*), the negative-transfer guard's
verdict on it and a greedy portfolio over all of them. All three depend on the history alone, so
they are computed once — by ``tune-agent meta source-models`` (the ``source-models`` DVC stage),
``bootstrap --starter``, or the end of the study that adds a source — and every later study loads
them: rebuilding a GP from stored hyperparameters takes ~2 ms, fitting it ~0.1-0.4 s (6 s on a
busy machine).

The file, ``models_dir/source_models.jsonl``, holds three kinds of record, one JSON line each,
appended and never rewritten (two processes appending whole lines do not corrupt each other; a
line cut short by a crash is skipped):

- ``fit``: a source GP's fitted hyperparameters and whether it passed the signal check, keyed by
  the source's content digest (:attr:`SourceTask.digest`), the kernel and :data:`FIT_REVISION`.
  Content-keyed, so it is right for any store that holds the same data.
- ``source``: a source's training data (cube points, normal scores) keyed by its dataset key and
  the *stamp* of the studies it was read from (ids, states, best values: see
  :func:`agent.tuning.source_models.study_stamp`), so a study reads no trial of an unchanged
  source from the tracking store.
- ``portfolio``: the greedy portfolio's cube points for one set of sources (their digests), one
  kernel and one size.

Bump :data:`FIT_REVISION` when :func:`agent.surrogates.source_gp.fit_source_gps` changes what it fits:
older fit records are then ignored (and refitted once).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent.surrogates.contract import FIT_REVISION, SourceTask, portfolio_id  # noqa: F401 - re-exported

FILE = "source_models.jsonl"
FORMAT = 1


def _array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype="<f8")
    return {"shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}


def _unarray(entry: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(entry["b64"]), dtype="<f8").reshape(entry["shape"]).copy()


class SourceModelStore:
    """The records of ``models_dir/source_models.jsonl``, read once (lazily) and appended to.

    A store that cannot be written (a read-only ``models/``) still serves what it holds; the study
    simply keeps what it fitted in memory. ``published`` gives, on first read, more files of the
    same records to read before ``models_dir``'s own: the tracking store's published chunks, fetched
    into the user's cache (:mod:`agent.tuning.published`). What this process appends is kept in
    :attr:`added`, so that it can be published in turn.
    """

    def __init__(self, models_dir: Path | str, published: Sequence[Path] | Callable[[], Sequence[Path]] = ()) -> None:
        self.path = Path(models_dir) / FILE
        self._published = published
        self._fits: dict[tuple[str, str], dict[str, Any]] | None = None
        self._sources: dict[tuple[str, str], dict[str, Any]] = {}
        self._portfolios: dict[str, np.ndarray] = {}
        self.write_error: str | None = None
        self.added: list[dict[str, Any]] = []
        self._in_store: set[tuple[str, ...]] = set()

    # -- reading ---------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._fits is not None:
            return
        self._fits = {}
        published = self._published() if callable(self._published) else self._published
        for path in [*published, self.path]:
            for line in _lines(Path(path)):
                try:
                    record = json.loads(line)
                    self._take(record)
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash, or from another format
                if path != self.path:
                    self._in_store.add(_key(record))

    def unpublished(self) -> list[dict[str, Any]]:
        """The records held that no published file holds (``models_dir``'s own and those added)."""
        return [r for r in self.records() if _key(r) not in self._in_store]

    def records(self) -> list[dict[str, Any]]:
        """Every record held (published, local and added), one per key: what a new published
        version of the source models carries."""
        self._load()
        assert self._fits is not None
        out: list[dict[str, Any]] = [{"format": FORMAT, **r} for r in self._fits.values()]
        out += [{"format": FORMAT, **r} for r in self._sources.values()]
        out += [
            {"format": FORMAT, "type": "portfolio", "id": pid, "points": _array(p)}
            for pid, p in self._portfolios.items()
        ]
        return out

    def _take(self, record: dict[str, Any]) -> None:
        assert self._fits is not None
        if record.get("format") != FORMAT:
            return
        kind = record["type"]
        if kind == "fit" and record.get("revision") == FIT_REVISION:
            self._fits[(record["digest"], record["kernel"])] = record
        elif kind == "source":
            self._sources[(record["key"], record["stamp"])] = record
        elif kind == "portfolio":
            self._portfolios[record["id"]] = _unarray(record["points"])

    def fit(self, digest: str, kernel: str) -> dict[str, Any] | None:
        """``{"state": ..., "informative": bool, "r2": float}`` of the source with this content, or None."""
        self._load()
        assert self._fits is not None
        return self._fits.get((digest, kernel))

    def source(self, key: str, stamp: str) -> SourceTask | None:
        """The source ``key`` as read from the studies ``stamp`` names, or None when not stored."""
        self._load()
        record = self._sources.get((key, stamp))
        if record is None:
            return None
        dims = record.get("dims")
        return SourceTask(
            record["key"],
            record["name"],
            _unarray(record["U"]),
            _unarray(record["y"]),
            None if dims is None else tuple(dims),
        )

    def portfolio(self, pid: str) -> np.ndarray | None:
        self._load()
        return self._portfolios.get(pid)

    def __len__(self) -> int:
        self._load()
        assert self._fits is not None
        return len(self._fits)

    # -- writing ---------------------------------------------------------------------------------
    def add_fit(self, digest: str, kernel: str, state: dict[str, Any], informative: bool, r2: float) -> None:
        self._append(
            [
                {
                    "type": "fit",
                    "digest": digest,
                    "kernel": kernel,
                    "revision": FIT_REVISION,
                    "informative": bool(informative),
                    "r2": float(r2),
                    "state": state,
                }
            ]
        )

    def add_source(self, task: SourceTask, stamp: str) -> None:
        self._append(
            [
                {
                    "type": "source",
                    "key": task.key,
                    "name": task.name,
                    "stamp": stamp,
                    "U": _array(task.U),
                    "y": _array(task.y),
                    "dims": None if task.dims is None else list(task.dims),
                }
            ]
        )

    def add_portfolio(self, pid: str, points: np.ndarray) -> None:
        self._append([{"type": "portfolio", "id": pid, "points": _array(points)}])

    def _append(self, records: Iterable[dict[str, Any]]) -> None:
        self._load()
        records = [{"format": FORMAT, **r} for r in records]
        for r in records:
            self._take(r)
        self.added += records
        if self.write_error is not None:
            return
        blob = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, blob)  # one write of whole lines: concurrent appenders do not interleave
            finally:
                os.close(fd)
        except OSError as exc:
            self.write_error = f"{self.path}: {exc.strerror or exc}"


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines() if path.is_file() else []
    except (OSError, UnicodeDecodeError):
        return []


def _key(record: dict[str, Any]) -> tuple[str, ...]:
    kind = record.get("type", "")
    if kind == "fit":
        return (kind, str(record.get("digest")), str(record.get("kernel")), str(record.get("revision")))
    if kind == "source":
        return (kind, str(record.get("key")), str(record.get("stamp")))
    return (kind, str(record.get("id")))
