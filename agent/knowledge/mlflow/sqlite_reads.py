"""Reads of an embedded sqlite store without importing MLflow: the reading commands' fast path.

``best``, ``history`` and ``report`` of an ended study spend almost all of their time importing
MLflow (``import mlflow`` is 2.2 s here, its client and SQLAlchemy store 1.4 s more), while their
queries take milliseconds. :class:`SqliteReads` answers the few client calls the knowledge base
reads with (``get_run``, ``search_runs`` with the filters the knowledge base writes,
``search_experiments``, ``get_experiment_by_name``, ``download_artifacts`` of a local artifact)
from the store's tables with the standard library's ``sqlite3``, read-only, and hands every other
call (any write, any artifact not on this machine) to a real ``MlflowClient``, made on first need.

MLflow owns that schema, so the fast path is taken only for a store whose schema revision
(``alembic_version``) is one this module was checked against (:data:`KNOWN_REVISIONS`; a test
compares every read with MLflow's own on a real store, and another fails when the installed MLflow
makes stores of a revision not listed). Any other store is read through MLflow.
"""

from __future__ import annotations

import math
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote, urlparse

from agent.errors import StoreError

KNOWN_REVISIONS = frozenset({"dc11669786a5"})  # MLflow 3.17's schema head
_CLAUSE = re.compile(
    r"\s*(?:(?:tags\.`(?P<tag>[^`]+)`|attributes\.(?P<attr>status))\s*(?P<op>!?=)\s*"
    r"""(?:'(?P<value>[^']*)'|"(?P<dq>[^"]*)")"""
    r"|metrics\.`(?P<metric>[^`]+)`\s*>=\s*(?P<number>-?\d+))\s*(?:and\b|$)",
    re.I,
)


def revision(path: Path) -> str | None:
    """The store's schema revision, or None when it has none or cannot be read."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30) as db:
            row = db.execute("select version_num from alembic_version").fetchone()
        return row[0] if row else None
    except sqlite3.Error:
        return None


def parse_filter(text: str) -> list[tuple[str, str, str, str]]:
    """``[(kind, key, op, value)]`` for a conjunction of ``tags.`k` = 'v'``, ``attributes.status
    (!)= 'v'`` and ``metrics.`k` >= integer`` clauses; ValueError for anything else (the caller
    then asks MLflow)."""
    clauses, at = [], 0
    while at < len(text):
        m = _CLAUSE.match(text, at)
        if not m or m.end() == at:
            raise ValueError(f"filter not read here: {text!r}")
        if m["metric"] is not None:
            clauses.append(("metric", m["metric"], ">=", m["number"]))
        else:
            value = m["value"] if m["value"] is not None else m["dq"]
            clauses.append(("tag" if m["tag"] is not None else "status", m["tag"] or "status", m["op"], value))
        at = m.end()
    return clauses


class _Page(list):
    token = None


class SqliteReads:
    """A read-only stand-in for ``MlflowClient`` on the sqlite file ``path``; ``fallback()`` makes
    the real client for everything else."""

    def __init__(self, path: Path, fallback: Callable[[], Any]) -> None:
        self._path = path
        self._fallback = fallback
        self._client: Any = None
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, check_same_thread=False)

    def __getattr__(self, name: str) -> Any:  # writes and anything not read here: MLflow's own client
        if name.startswith("_"):
            raise AttributeError(name)
        if self._client is None:
            self._client = self._fallback()
        return getattr(self._client, name)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"tracking store {self._path} cannot be read ({exc})") from None

    # -- experiments ---------------------------------------------------------------------------
    def _experiments(self, where: str, args: tuple) -> list[Any]:
        rows = self._rows(
            "select experiment_id, name, artifact_location, lifecycle_stage, creation_time, "
            f"last_update_time from experiments where workspace = 'default' and {where} "
            "order by experiment_id",
            args,
        )
        tags: dict[str, dict[str, str]] = {}
        if rows:
            marks = ",".join("?" * len(rows))
            for eid, key, value in self._rows(
                f"select experiment_id, key, value from experiment_tags where experiment_id in ({marks})",
                tuple(r[0] for r in rows),
            ):
                tags.setdefault(str(eid), {})[key] = value
        return [
            SimpleNamespace(
                experiment_id=str(r[0]),
                name=r[1],
                artifact_location=r[2],
                lifecycle_stage=r[3],
                creation_time=r[4],
                last_update_time=r[5],
                tags=tags.get(str(r[0]), {}),
            )
            for r in rows
        ]

    def search_experiments(self, max_results: int = 1000, **kwargs: Any) -> list[Any]:
        if kwargs:
            return self.__getattr__("search_experiments")(max_results=max_results, **kwargs)
        found = self._experiments("lifecycle_stage = 'active'", ())
        # MLflow orders by last update, then id; the knowledge base reads this as a set
        return found[:max_results]

    def get_experiment_by_name(self, name: str) -> Any:
        found = self._experiments("name = ?", (name,))
        return found[0] if found else None

    # -- runs ----------------------------------------------------------------------------------
    def _runs(self, ids: list[str]) -> list[Any]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._rows(
            "select run_uuid, name, status, start_time, end_time, lifecycle_stage, artifact_uri, "
            f"experiment_id, user_id from runs where run_uuid in ({marks})",
            tuple(ids),
        )
        data: dict[str, SimpleNamespace] = {r[0]: SimpleNamespace(tags={}, params={}, metrics={}) for r in rows}
        for table, field in (("tags", "tags"), ("params", "params")):
            for rid, key, value in self._rows(
                f"select run_uuid, key, value from {table} where run_uuid in ({marks})", tuple(ids)
            ):
                getattr(data[rid], field)[key] = value
        for rid, key, value, nan in self._rows(
            f"select run_uuid, key, value, is_nan from latest_metrics where run_uuid in ({marks})", tuple(ids)
        ):
            data[rid].metrics[key] = math.nan if nan else float(value)
        order = {rid: i for i, rid in enumerate(ids)}
        runs = [
            SimpleNamespace(
                info=SimpleNamespace(
                    run_id=r[0],
                    run_uuid=r[0],
                    run_name=r[1],
                    status=r[2],
                    start_time=r[3],
                    end_time=r[4],
                    lifecycle_stage=r[5],
                    artifact_uri=r[6],
                    experiment_id=str(r[7]),
                    user_id=r[8],
                ),
                data=data[r[0]],
            )
            for r in rows
        ]
        return sorted(runs, key=lambda run: order[run.info.run_id])

    def get_run(self, run_id: str) -> Any:
        found = self._runs([run_id])
        if not found:
            raise StoreError(f"run {run_id!r} not found in {self._path}")
        return found[0]

    def search_runs(
        self,
        experiment_ids: list[str],
        filter_string: str = "",
        max_results: int = 1000,
        order_by: list[str] | None = None,
        page_token: Any = None,
        **kwargs: Any,
    ) -> Any:
        try:
            clauses = parse_filter(filter_string)
        except ValueError:
            clauses = None
        if clauses is None or kwargs or page_token is not None or order_by not in (None, ["attributes.start_time ASC"]):
            return self.__getattr__("search_runs")(
                experiment_ids,
                filter_string,
                max_results=max_results,
                order_by=order_by,
                page_token=page_token,
                **kwargs,
            )
        ids = self._matching(experiment_ids, clauses, "r.start_time asc, r.run_uuid asc" if order_by else None)
        page = _Page()
        for start in range(0, len(ids), 500):  # sqlite's bound-parameter limit
            page.extend(self._runs(ids[start : start + 500]))
        return page

    def _matching(
        self, experiment_ids: list[str], clauses: list[tuple[str, str, str, str]], order: str | None
    ) -> list[str]:
        """The ids of the active runs of ``experiment_ids`` that every clause holds for, in ``order``
        (MLflow's default, newest first, when None)."""
        if not experiment_ids:
            return []
        where = ["r.lifecycle_stage = 'active'", f"r.experiment_id in ({','.join('?' * len(experiment_ids))})"]
        args: list[int | str] = [int(e) for e in experiment_ids]
        for kind, key, op, value in clauses:
            if kind == "tag":
                where.append(
                    f"{'' if op == '=' else 'not '}exists (select 1 from tags t where t.run_uuid = r.run_uuid "
                    "and t.key = ? and t.value = ?)"
                )
                args += [key, value]
            elif kind == "metric":  # the latest value, as MLflow compares it
                where.append(
                    "exists (select 1 from latest_metrics m where m.run_uuid = r.run_uuid "
                    "and m.key = ? and m.is_nan = 0 and m.value >= ?)"
                )
                args += [key, int(value)]
            else:
                where.append(f"r.status {op} ?")
                args.append(value)
        order = order or "r.start_time desc, r.run_uuid asc"
        return [
            r[0]
            for r in self._rows(
                f"select r.run_uuid from runs r where {' and '.join(where)} order by {order}", tuple(args)
            )
        ]

    def changed_times(self, experiment_ids: list[str], filter_string: str, metric: str) -> dict[str, float]:
        """The latest value of ``metric`` of each run the filter finds, without reading the runs:
        what a reader compares with what it holds before reading any run again."""
        ids = self._matching(experiment_ids, parse_filter(filter_string), None)
        out: dict[str, float] = {}
        for start in range(0, len(ids), 500):  # sqlite's bound-parameter limit
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            out.update(
                self._rows(
                    "select run_uuid, value from latest_metrics where key = ? and is_nan = 0 "
                    f"and run_uuid in ({marks})",
                    (metric, *chunk),
                )
            )
        return out

    def runs(self, ids: list[str]) -> list[Any]:
        """The active runs ``ids`` (any missing or deleted left out), read in batches."""
        out: list[Any] = []
        for start in range(0, len(ids), 500):
            out += [r for r in self._runs(ids[start : start + 500]) if r.info.lifecycle_stage == "active"]
        return out

    # -- artifacts -----------------------------------------------------------------------------
    def download_artifacts(self, run_id: str, path: str, dst_path: str | None = None) -> str:
        uri = self.get_run(run_id).info.artifact_uri or ""
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file") or dst_path is None:
            return self.__getattr__("download_artifacts")(run_id, path, dst_path)
        source = Path(unquote(parsed.path) if parsed.scheme else uri) / path
        if not source.is_file():
            raise StoreError(f"run {run_id} has no artifact {path}")
        target = Path(dst_path) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return str(target)
