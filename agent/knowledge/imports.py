"""Writing many imported studies at once: ``bootstrap starter``, ``tune-agent import``.

:func:`import_many` writes :class:`Imported` studies through a store's
:meth:`~agent.knowledge.base.KnowledgeBase.import_evaluations` inside its
:meth:`~agent.knowledge.base.KnowledgeBase.many_imports` (MLflow: the listing version of the
studies' experiments changes once per batch, not once per study) and says how far it is at most
every :data:`SAY_EVERY` seconds: ``imported 250/2250 studies (24 per second, about 80 s left)``.
A store writes ``import_threads`` studies at once (sqlite: 2, one preparing while the other commits;
a server: 4). Interrupted, it leaves whole studies only; run again, the callers skip the studies the
store holds.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

SAY_EVERY = 1.5  # seconds between two progress lines


@dataclass(frozen=True)
class Imported:
    """One study of evaluations made elsewhere, as :meth:`KnowledgeBase.import_evaluations` takes it."""

    name: str
    settings: Mapping[str, Any]
    space: list[dict[str, Any]]
    configs: Sequence[Mapping[str, Any]]
    values: Sequence[float | None]
    description: str
    summary: Mapping[str, Any] | None = None
    sample: tuple[Any, Any] | None = None
    tags: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ImportCount:
    studies: int
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        """Studies per second."""
        return self.studies / self.seconds if self.seconds > 0 else float("inf")


def import_many(
    kb: Any, studies: Iterable[Imported], total: int | None = None, progress: Callable[[str], None] | None = None
) -> ImportCount:
    """Writes ``studies`` into ``kb`` (``total``: how many there are, for the progress line),
    ``kb.import_threads`` at a time. When one fails (or the import is interrupted) no more start,
    the ones writing end whole, and the failure is raised."""
    start = last = time.perf_counter()
    done = rows = 0
    threads = max(int(getattr(kb, "import_threads", 1)), 1)

    def write(s: Imported) -> int:
        kb.import_evaluations(
            s.name,
            s.settings,
            s.space,
            list(s.configs),
            list(s.values),
            s.description,
            s.summary,
            s.sample,
            tags=s.tags,
        )
        return len(s.configs)

    with kb.many_imports(), ThreadPoolExecutor(threads, thread_name_prefix="import") as pool:
        pending: set[Future[int]] = set()
        todo = iter(studies)
        while True:
            for s in itertools.islice(todo, 2 * threads - len(pending)):
                pending.add(pool.submit(write, s))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                rows += future.result()  # a failure: the with-block waits for the rest, then it is raised
                done += 1
            now = time.perf_counter()
            if progress is not None and now - last >= SAY_EVERY:
                progress(progress_line(done, total, now - start))
                last = now
    return ImportCount(done, rows, time.perf_counter() - start)


def progress_line(done: int, total: int | None, seconds: float) -> str:
    rate = done / seconds if seconds > 0 else 0.0
    head = f"imported {done}/{total} studies" if total else f"imported {done} studies"
    left = f", about {math.ceil((total - done) / rate)} s left" if total and rate > 0 else ""
    return f"{head} ({rate:.0f} per second{left})"


def best_imported(settings: Mapping[str, Any], configs: Sequence[Any], values: Sequence[Any]) -> tuple[Any, Any]:
    """The best finite value of imported evaluations by ``settings["mode"]`` and its configuration."""
    finite = [(float(v), c) for c, v in zip(configs, values) if v is not None and math.isfinite(float(v))]
    sign = -1.0 if settings.get("mode") == "max" else 1.0
    return min(finite, key=lambda pair: sign * pair[0]) if finite else (None, None)
