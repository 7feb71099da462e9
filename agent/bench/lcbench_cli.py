"""`tune-agent bench lcbench`: all methods on the YAHPO lcbench protocol, history via MLflow.

The source histories are imported once into an MLflow store with the same code as
``tune-agent import`` and read back through :func:`agent.knowledge.history.load_history`; the
read-back must equal what the benchmark's workers regenerate (they rebuild it from the seed in
each process), and the import and read times are reported.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from agent.bench.lcbench import BenchConfig, apply_control, make_histories, run_benchmark, summarise, write_report
from agent.bench.methods import METHODS
from agent.bench.transfer_methods import ObsNeighbourGpSearch, RgpeSearch, TnpSearch, fold_of, pretrain_tnp_folds
from agent.bench.yahpo import YahpoScenario

ALL_METHODS = {**METHODS, "rgpe": RgpeSearch, "tnp": TnpSearch, "obs_neighbour_gp": ObsNeighbourGpSearch}
DEFAULT_FOLDER = Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks" / "yahpo" / "lcbench"


def history_through_store(scenario: YahpoScenario, histories: dict[str, tuple[np.ndarray, np.ndarray]], tracking_uri: str | None) -> dict[str, float]:
    """Imports the histories as studies and reads them back; returns timings and checks equality."""
    import pandas as pd

    from agent.knowledge.history import load_history
    from agent.knowledge.importer import import_table
    from agent.knowledge.mlflow_store import MlflowKnowledgeBase

    rows = [{"task": t, **scenario.space.decode(u), "value": float(v)} for t, (U, y) in histories.items() for u, v in zip(U, y)]
    with tempfile.TemporaryDirectory() as tmp:
        uri = tracking_uri or f"sqlite:///{Path(tmp) / 'lcbench.db'}"
        kb = MlflowKnowledgeBase(uri, str(Path(tmp) / "art"))
        summary = import_table(kb, pd.DataFrame(rows), scenario.space, "lcbench", "val_accuracy", "max", prefix="bench")
        start = time.perf_counter()
        back = {h.name: h for h in load_history(kb, job="lcbench", with_samples=False)}
        read_seconds = time.perf_counter() - start
    for t, (U, y) in histories.items():
        got = sorted(e.value for e in back[t].evaluations)
        if not np.allclose(got, np.sort(y)):
            raise RuntimeError(f"history of task {t} did not survive the store round trip")
    return {"import_seconds": summary["seconds"], "read_seconds": round(read_seconds, 2), "rows": summary["rows"]}


def run_lcbench(methods: Sequence[str], quick: bool, seeds: int, tasks: int | None, workers: int, control: str,
                out: Path, folder: Path = DEFAULT_FOLDER, tracking_uri: str | None = None,
                progress: Callable[[str], None] | None = None, fresh: bool = False) -> dict[str, Any]:
    """Runs the benchmark and writes ``out/metrics/lcbench[_control].json`` and the plots.

    Finished runs are journalled in ``out/data/bench-runs/lcbench[_control].jsonl`` and reused by
    the next call with the same protocol (so ``--quick`` results count towards the full run and an
    interrupted run resumes); ``fresh`` deletes the journal first (do that after changing code).
    """
    scenario = YahpoScenario.load(folder)
    config = BenchConfig(tasks=scenario.instances[:tasks] if tasks else None, seeds=seeds, workers=workers,
                         quick=quick, control=control)
    histories = make_histories(scenario, config.history_size, config.history_seed, config.target)
    store = history_through_store(scenario, histories, tracking_uri)
    if "tnp" in methods:
        targets = config.resolve(scenario.instances).tasks or []
        trained_on = apply_control(histories, control, config.history_seed)  # what the targets will see
        pretrain_tnp_folds([trained_on[t] for t in scenario.instances],
                           folds=[fold_of(scenario.instances.index(t)) for t in targets])
    suffix = "" if control == "none" else f"_{control}"
    journal = out / "data" / "bench-runs" / f"lcbench{suffix}.jsonl"
    if fresh and journal.exists():
        journal.unlink()
    result = run_benchmark(scenario, {m: ALL_METHODS[m] for m in methods}, config, progress=progress, journal=journal)
    metrics = out / "metrics" / f"lcbench{suffix}.json"
    write_report(result, metrics, out / "plots" if control == "none" else out / "plots" / control)
    report = {**summarise(result), "history_store": store, "quick": quick, "control": control,
              "protocol": "YAHPO Gym lcbench, leave-one-task-out, 100 random history configs per source task, "
                          "val_accuracy at epoch 52, budget 30, regret normalised by 5000 random configs"}
    metrics.write_text(json.dumps(report, indent=2) + "\n")
    return report
