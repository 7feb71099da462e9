"""The team server under load: concurrent agents logging trials into ``tune-agent server``
(MLflow over PostgreSQL), then the warm-start lookup over 10,000 historical trial runs.

A real server is started in a temporary folder (as ``tune-agent server`` runs it). ``agents``
writer threads, each with its own client, log the starter history's studies as ordinary studies
(one MLflow run per trial, through the knowledge base's ``create_study`` / ``start_trial`` /
``finish_trial``, as a study does) until ``runs`` trial runs exist: runs per second, and a count of
what the store holds against what was written (0 lost, 0 duplicated). Then the product's warm
start (load a new table, sample and describe it, meta-features, neighbour search, the neighbours'
evaluations) over that store, median of repeats, next to one raw ``search_runs`` pass over every
trial run for comparison.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from unittest import mock

import numpy as np

if TYPE_CHECKING:
    from agent.knowledge.base import KnowledgeBase


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def starter_entries(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The starter file's studies (with samples) and its search space."""
    import json

    archive = np.load(path, allow_pickle=False)
    data = json.loads(archive["header"].tobytes().decode())
    entries = []
    for i, entry in enumerate(data["studies"]):
        sample = (archive[f"X{i}"], archive[f"y{i}"]) if f"X{i}" in archive.files else None
        entries.append({**entry, "sample": sample})
    return entries, data["space"]


def _write_study(kb: Any, entry: dict[str, Any], space: list[dict[str, Any]], name: str) -> int:
    """One study as an agent leaves it: a study run, one run per trial, finished. Returns trial runs."""
    from agent.knowledge.records import TRIAL_OK

    record = kb.create_study(
        name,
        entry["settings"],
        space,
        entry["summary"],
        entry["sample"],
        f"bench server: `{entry['name']}` written as trial runs",
    )
    if entry.get("metafeatures") is not None:
        kb.set_study_tags(record, {"metafeatures": entry["metafeatures"]})
    written = 0
    for number, (config, value) in enumerate(zip(entry["configs"], entry["values"])):
        trial = kb.start_trial(record, number, config, "import:bench")
        kb.finish_trial(record, trial, value, TRIAL_OK, duration=0.0)
        written += 1
    kb.update_study(record, "finished")
    return written


def run_server_bench(
    starter: Path,
    agents: int = 4,
    runs: int = 10_000,
    dataset: str = "wine",
    job: str = "mlp",
    models_dir: Path = Path("models"),
    repeats: int = 3,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    from agent.knowledge import open_knowledge_base
    from agent.ops.team_server import wait_until_up

    entries, space = starter_entries(starter)
    per_study = max(len(e["configs"]) for e in entries)
    n_studies = min(len(entries), -(-runs // per_study))
    chosen = entries[:n_studies]
    data = Path(tempfile.mkdtemp(prefix="tune-agent-bench-server-", dir="/tmp"))
    data.chmod(0o755)  # PostgreSQL's own user must reach it when we are root
    proc, url = _start_server(data)
    try:
        if not wait_until_up(url, 240, proc):
            raise RuntimeError(f"tune-agent server did not come up (logs in {data / 'logs'})")
        say(f"server up at {url}; {agents} writers log {n_studies} studies x ~{per_study} trials as runs")
        open_knowledge_base(url).open()
        start = time.perf_counter()
        counts, errors = _log_studies(url, chosen, space, agents, say)
        seconds = time.perf_counter() - start
        written = sum(counts)
        kb = open_knowledge_base(url)
        logging_ = {
            "writers": agents,
            "studies": n_studies,
            "trial_runs_written": written,
            "seconds": round(seconds, 1),
            "runs_per_second": round(written / seconds, 1),
            **_stored_counts(kb, sum(len(e["configs"]) for e in chosen)),
            "errors": errors[:5],
        }
        say(f"logged {written} trial runs in {seconds:.1f} s: {written / seconds:.1f} runs/s with {agents} writers")
        return {
            "server": "tune-agent server (mlflow server, PostgreSQL backend, proxied artifacts)",
            "logging": logging_,
            "lookup": _lookup(kb, dataset, job, models_dir, repeats, say),
            "protocol": "writers are threads, one MLflow client each, logging the starter history's studies "
            "with one run per trial as a study does; the lookup is the product's warm start "
            "(bench neighbours --tracking-uri) over that store, median of repeats, without the "
            "study cache (TUNE_AGENT_STUDY_CACHE=0) and then with it",
        }
    finally:
        _stop_server(proc, data)


def _start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``tune-agent server`` on free ports with its data in ``data``, and its URL."""
    port, pg_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "server",
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--pg-port",
            str(pg_port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}"


def _stop_server(proc: subprocess.Popen[bytes], data: Path) -> None:
    """Stop the server (SIGTERM, then kill) and remove its data unless TUNE_AGENT_KEEP_BENCH_SERVER=1."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
    import shutil

    if os.environ.get("TUNE_AGENT_KEEP_BENCH_SERVER") != "1":
        shutil.rmtree(data, ignore_errors=True)


def _log_studies(
    url: str, chosen: list[dict[str, Any]], space: list[dict[str, Any]], agents: int, say: Callable[[str], None]
) -> tuple[list[int], list[str]]:
    """``agents`` writer threads, one client each, log the ``chosen`` studies as trial runs; the
    trial runs each writer logged and the errors met."""
    from agent.knowledge import open_knowledge_base

    queue = list(enumerate(chosen))
    lock = threading.Lock()
    counts = [0] * agents
    errors: list[str] = []
    done = {"studies": 0}

    def writer(w: int) -> None:
        kb = open_knowledge_base(url)
        while True:
            with lock:
                if not queue:
                    return
                i, entry = queue.pop(0)
            try:
                counts[w] += _write_study(kb, entry, space, f"bench-{i:04d}")
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            with lock:
                done["studies"] += 1
                if done["studies"] % 20 == 0:
                    say(f"  {done['studies']}/{len(chosen)} studies, {sum(counts)} trial runs")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts, errors


def _stored_counts(kb: KnowledgeBase, expected: int) -> dict[str, Any]:
    """What the store holds of the benchmark's studies against the ``expected`` trial runs."""
    from agent.knowledge.records import TRIAL_OK

    studies = [s for s in kb.list_studies() if s.name.startswith("bench-")]
    stored = [(s.study_id, t) for s in studies for t in kb.trials(s)]
    keys = [(sid, t.number) for sid, t in stored]
    return {
        "stored_trial_runs": len(stored),
        "expected": expected,
        "lost": expected - len(set(keys)),
        "duplicated": len(keys) - len(set(keys)),
        "not_ok": sum(t.state != TRIAL_OK for _, t in stored),
    }


def _lookup(
    kb: KnowledgeBase, dataset: str, job: str, models_dir: Path, repeats: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """The product's warm start over the store, without the study cache and with it, next to one raw
    search over every trial run."""
    from agent.bench.neighbours import measure_warm_start

    raw_start = time.perf_counter()
    # the MLflow backend's raw search, which the knowledge-base interface does not offer
    everything = list(cast(Any, kb)._search("tags.`tune_agent.kind` = 'trial'"))
    raw = time.perf_counter() - raw_start
    # The same lookup without the study cache first (every study run searched), then with it (its
    # first call fills the cache, the median is over later calls)
    with mock.patch.dict(os.environ, {"TUNE_AGENT_STUDY_CACHE": "0"}):
        uncached = measure_warm_start(kb, dataset, job, models_dir, repeats=repeats)
    with mock.patch.dict(os.environ, {"TUNE_AGENT_STUDY_CACHE": "1"}):
        lookup = measure_warm_start(kb, dataset, job, models_dir, repeats=repeats)
    lookup["without_study_cache"] = {"first_call": uncached["first_call"], "median": uncached["median"]}
    say(
        f"warm-start lookup over {len(everything)} trial runs: {lookup['median']['warm_start_s']} s median "
        "with the "
        f"study cache, {uncached['median']['warm_start_s']} s without (raw search_runs over all of them: "
        f"{raw:.2f} s)"
    )
    return {"history_trial_runs": len(everything), "raw_search_runs_s": round(raw, 2), **lookup}
