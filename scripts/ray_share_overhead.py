"""Per-trial overhead of trials that reserve a GPU share on Ray, measured without a GPU.

Ray is told of one GPU that the trials leave alone (each reserves ``1/workers`` of it and trains on
the CPU), so the figure is what the orchestration costs a GPU-share trial on this machine: the
driver's hand-off, the worker's start when a trial gets a fresh one, the job's and data's transfer,
the result's way back. Run it with ``PYTHONPATH`` pointing at the code to measure (before/after in
the same session: ``PYTHONPATH=/tmp/before python scripts/ray_share_overhead.py``).

    python scripts/ray_share_overhead.py --trials 12 --workers 2 --epochs 2 --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    import agent
    from agent.bench.parallel import _overhead_fields, _Timed
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.resources import ExecutionSettings, TrialResources
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor
    from agent.tuning.service import prepare_study

    class ShareOnCpu(TrialResources):
        @property
        def accelerator(self) -> str:  # reserve the share, train on the CPU
            return "cpu"

    with tempfile.TemporaryDirectory() as tmp:
        req = StudyRequest(dataset=args.dataset, job="mlp", trials=args.trials, epochs=args.epochs, seed=0,
                           study_name="share", warm_start="none", tracking_uri=f"sqlite:///{tmp}/mlflow.db",
                           artifact_root=f"{tmp}/art")
        start = time.perf_counter()
        ray.init(num_cpus=args.workers, num_gpus=1, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        try:
            study, job, data, split = prepare_study(req, echo=lambda _: None)
            executor = _Timed(make_executor(study, job, data, split, ExecutionSettings(
                workers=args.workers, resources=ShareOnCpu(1, 1.0 / args.workers))))
            timing = run_study(study, job, data, split, SilentReporter(), trace_plot=False, executor=executor)
            wall = time.perf_counter() - start
        finally:
            ray.shutdown()
    pids = getattr(executor.inner, "pids", None)
    report = {"code": str(Path(agent.__file__).parents[1]), "trials": args.trials, "workers": args.workers,
              "epochs": args.epochs, "dataset": args.dataset, "wall_seconds": round(wall, 2),
              "fit_seconds": round(timing.fit_seconds, 2),
              "first_result_seconds": round(timing.first_result_seconds or 0.0, 2),
              **_overhead_fields(executor.overheads),
              "worker_processes": len(set(pids)) if pids is not None else None}
    print(json.dumps(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
