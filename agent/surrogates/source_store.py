"""Source models as a file: what the history's GPs learned, kept so that no study refits them.

A transfer surrogate needs one GP per historical dataset (a *source*), the negative-transfer guard's
verdict on it and a greedy portfolio over all of them. All three depend on the history alone, so
they are computed once — by ``tune-agent meta source-models`` (the ``source-models`` DVC stage),
``bootstrap starter``, or the end of the study that adds a source — and every later study loads
them: rebuilding a GP from stored hyperparameters takes ~8 ms, fitting it ~0.1-0.4 s (6 s on a
busy machine).

The file, ``models_dir/source_models.jsonl``, holds three kinds of record, one JSON line each,
appended and never rewritten (two processes appending whole lines do not corrupt each other; a
line cut short by a crash is skipped):

- ``fit``: a source GP's fitted hyperparameters and whether it passed the signal check, keyed by
  the source's content digest (:attr:`SourceTask.digest`), the kernel and :data:`FIT_REVISION`.
  Content-keyed, so it is right for any store that holds the same data. A plain-kernel fit also
  keeps its constrained hyperparameters (``stack``), from which a study scores its portfolio in
  numpy (:mod:`agent.surrogates.stored_means`).
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

from agent.surrogates.record_index import index_of, read_record
from agent.surrogates.source_fits import FIT_REVISION, SourceTask, portfolio_id  # noqa: F401 - re-exported

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
        self._at: dict[tuple[str, ...], tuple[Path, int, int]] = {}  # records not yet parsed, by key
        self.parsed = 0  # records parsed from files: what a study read
        self.write_error: str | None = None
        self.added: list[dict[str, Any]] = []
        self._in_store: set[tuple[str, ...]] = set()

    # -- reading ---------------------------------------------------------------------------------
    def _load(self) -> None:
        """Indexes the files (:mod:`agent.surrogates.record_index`): where each record is, none parsed."""
        if self._fits is not None:
            return
        self._fits = {}
        published = self._published() if callable(self._published) else self._published
        for path in [*(Path(p) for p in published), self.path]:
            for key, offset, length in index_of(path, _key):
                self._at[key] = (path, offset, length)  # a later line of a key replaces an earlier one
                if path != self.path:
                    self._in_store.add(key)

    def _ensure(self, key: tuple[str, ...]) -> None:
        """Parses the record ``key`` if a file holds it and it is not parsed yet."""
        self._load()
        where = self._at.pop(key, None)
        if where is None:
            return
        record = read_record(*where)
        if record is not None:
            self.parsed += 1
            try:
                self._take(record)
            except (KeyError, TypeError, ValueError):
                pass  # a record of another format

    def unpublished(self) -> list[dict[str, Any]]:
        """The records held that no published file holds (``models_dir``'s own and those added)."""
        return [r for r in self.records() if _key(r) not in self._in_store]

    def records(self) -> list[dict[str, Any]]:
        """Every record held (published, local and added), one per key: what a new published
        version of the source models carries."""
        self._load()
        for key in list(self._at):
            self._ensure(key)
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
        self._at.pop(_key(record), None)  # what a file holds of this key is older
        if kind == "fit" and record.get("revision") == FIT_REVISION:
            self._fits[(record["digest"], record["kernel"])] = record
        elif kind == "source":
            self._sources[(record["key"], record["stamp"])] = record
        elif kind == "portfolio":
            self._portfolios[record["id"]] = _unarray(record["points"])

    def fit(self, digest: str, kernel: str) -> dict[str, Any] | None:
        """``{"state": ..., "informative": bool, "r2": float}`` of the source with this content, or None."""
        self._ensure(("fit", digest, kernel, str(FIT_REVISION)))
        assert self._fits is not None
        return self._fits.get((digest, kernel))

    def source(self, key: str, stamp: str) -> SourceTask | None:
        """The source ``key`` as read from the studies ``stamp`` names, or None when not stored."""
        self._ensure(("source", key, stamp))
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

    def has_source(self, key: str, stamp: str) -> bool:
        """Whether the source ``key`` of the studies ``stamp`` names is stored (nothing parsed)."""
        self._load()
        return ("source", key, stamp) in self._at or (key, stamp) in self._sources

    def portfolio(self, pid: str) -> np.ndarray | None:
        self._ensure(("portfolio", pid))
        return self._portfolios.get(pid)

    def __len__(self) -> int:
        """The source GP fits held (of this fit revision)."""
        self._load()
        assert self._fits is not None
        unparsed = {k for k in self._at if k[0] == "fit" and k[3] == str(FIT_REVISION)}
        return len(self._fits) + len(unparsed)

    # -- writing ---------------------------------------------------------------------------------
    def add_fit(
        self,
        digest: str,
        kernel: str,
        state: dict[str, Any],
        informative: bool,
        r2: float,
        stack: dict[str, Any] | None = None,
    ) -> None:
        """Keeps a source GP's fit: its raw hyperparameters (``state``), its signal check and, for a
        plain kernel, its constrained hyperparameters (``stack``: what a study's portfolio scores it
        with, without torch)."""
        record = {
            "type": "fit",
            "digest": digest,
            "kernel": kernel,
            "revision": FIT_REVISION,
            "informative": bool(informative),
            "r2": float(r2),
            "state": state,
        }
        self._append([record if stack is None else {**record, "stack": stack}])

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


def _key(record: dict[str, Any]) -> tuple[str, ...]:
    kind = record.get("type", "")
    if kind == "fit":
        return (kind, str(record.get("digest")), str(record.get("kernel")), str(record.get("revision")))
    if kind == "source":
        return (kind, str(record.get("key")), str(record.get("stamp")))
    return (kind, str(record.get("id")))
