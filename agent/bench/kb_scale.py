"""How the product keeps up as the history grows: ``tune-agent-bench kb-scale --sizes 1,10,100``.

For each size ``N`` the packaged ``mlp`` starter history is copied ``N`` times over
(:func:`agent.bench.silence.copied_starter`: each copy a dataset of its own, its data, values and
meta-features perturbed), imported into a fresh sqlite store with ``bootstrap starter`` (its
source models built and published), and then, from a folder that is not the bootstrap's, measured
in the same run: the default warm-started ``start`` against a cold one (``--warm-start none
--surrogate gp``) to its first trial and to its end, the warm one again with an empty meta-model
cache (a teammate's first start), ``neighbors``, ``history``, ``meta publish`` and ``ui`` (until it
says the MLflow UI answers); the import and fit rates ``bootstrap`` reports; the sizes of the store
and of the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent.bench.silence import copied_starter
from agent.bench.startup import bootstrap_starter, new_table, warm_run
from agent.bench.startup_summary import FIRST_FETCH
from agent.bench.timed_run import bench_env, console_script

WARM_ARM, COLD_ARM = "warm", "cold"
# From this many copies of the starter on, a copy's source GP is not fitted: it takes the fitted
# hyperparameters of its original (fitting 22,500 GPs takes an hour on two cores); its own data are
# what the GP conditions on, and the import, the source data and the publish are the product's own
SHARED_FITS_FROM = 100
PROTOCOL = (
    "per size N: the packaged mlp starter history copied N times (each copy its own dataset: name, "
    "fingerprint, sample inputs, values and meta-features perturbed), imported into a fresh sqlite store "
    "by `bootstrap starter` (source models built and published, its own folder and cache; from 100 copies "
    "on, each copy's source GP takes its original's fitted hyperparameters instead of its own fit); then per "
    "repeat, alternated, each a fresh process, piped, from another folder on a CSV new to the history "
    "(80% of wine's rows, its own seed): the default warm-started `start --trials 1 --epochs 1` and a "
    "cold one (--warm-start none --surrogate gp) sharing a cache (filled first by one untimed warm start), "
    "and the warm one with an empty cache; "
    "first trial: the line 'trial 1/'; end: the process's exit; then neighbors, history and meta "
    "publish, each a fresh process, and ui until its line that the MLflow UI answers (then Ctrl-C); "
    "medians over repeats"
)


def run_kb_scale_bench(sizes: Sequence[int], repeats: int = 3, say: Any = print) -> dict[str, Any]:
    """Every figure of the module docstring for each history size in ``sizes`` (times the starter)."""
    rows = {}
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            rows[str(size)] = _one_size(Path(tmp), size, repeats, say)
    from agent.bench.fingerprint import engine_fingerprint, environment

    return {
        "command": f"tune-agent-bench kb-scale --sizes {','.join(map(str, sizes))} --repeats {repeats}",
        "engine": engine_fingerprint("bench/kb_scale.py"),
        "environment": environment(),
        "sizes": {k: v["summary"] for k, v in rows.items()},
        "runs": {k: v["runs"] for k, v in rows.items()},
        "promises": promises({k: v["summary"] for k, v in rows.items()}),
        "protocol": PROTOCOL,
    }


def _one_size(root: Path, size: int, repeats: int, say: Any) -> dict[str, Any]:
    starter = root / f"x{size}.npz"
    made = copied_starter(starter, size)
    store = ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifact-root", str(root / "art")]
    say(f"x{size}: {made['studies']} datasets")
    shared = size >= SHARED_FITS_FROM
    if shared:
        say(f"x{size}: {shared_fits(starter, root / 'bootstrap' / 'models')} copies' GPs take their original's fit")
    boot = bootstrap_starter(
        starter, root / "bootstrap", store, {"TUNE_AGENT_CACHE": str(root / "boot-cache")}, say, timeout=6 * 3600
    )
    say(f"x{size}: bootstrap {boot['seconds']:.0f} s: {json.dumps(boot['report'].get('stages', {}))}")
    teammate = root / "teammate"
    teammate.mkdir()
    cache = {"TUNE_AGENT_CACHE": str(root / "cache")}
    runs: dict[str, list[dict[str, Any]]] = {WARM_ARM: [], COLD_ARM: [], FIRST_FETCH: []}
    # one untimed warm start first: the shared cache then holds what a teammate's second start finds
    # (the fetched version, the study listing), so every timed warm start is one with a warm cache
    warm_up = warm_run(root, teammate, WARM_ARM, 0, "mlp", store, cache, {})
    say(f"x{size} warm-up (not counted): first trial {warm_up['first_trial_s']} s")
    n = 1
    for i in range(repeats):
        for arm in (WARM_ARM, COLD_ARM, FIRST_FETCH):
            start = time.perf_counter()
            run = warm_run(root, teammate, "cold" if arm == COLD_ARM else arm, n, "mlp", store, cache, {})
            run = {k: v for k, v in run.items() if k != "tail"} | {"end_s": round(time.perf_counter() - start, 3)}
            runs[arm].append(run)
            n += 1
            say(f"x{size} {arm} {i + 1}: first trial {run['first_trial_s']} s, end {run['end_s']} s")
    reading: dict[str, list[float | None]] = {}
    for name, args in (
        ("neighbors", ["neighbors", "--dataset", str(new_table(root / "n.csv", 999)), "--job", "mlp"]),
        ("history", ["history"]),
        ("meta publish", ["meta", "publish", "--job", "mlp"]),
    ):
        reading[name] = [_wall([console_script(), *args, *store[:2]], teammate, cache) for _ in range(repeats)]
        say(f"x{size} {name}: {reading[name]} s")
    reading["ui answers"] = [_ui_answers(store, teammate, cache) for _ in range(repeats)]
    say(f"x{size} ui answers: {reading['ui answers']} s")
    summary = {
        "datasets": made["studies"],
        "fits": "each copy takes its original's fitted hyperparameters" if shared else "every source fitted",
        "bootstrap_s": round(boot["seconds"], 1),
        "import_per_s": boot["report"].get("per_second"),
        "stages_s": boot["report"].get("stages", {}),
        "first_trial_s": {arm: _median([r["first_trial_s"] for r in rs]) for arm, rs in runs.items()},
        "end_s": {arm: _median([r["end_s"] for r in rs]) for arm, rs in runs.items()},
        "reading_s": {name: _median(walls) for name, walls in reading.items()},
        "store_mb": round(_size(root / "mlflow.db") + _size(root / "art"), 1),
        "cache_mb": round(_size(root / "cache"), 1),
        "all_exit_0": all(r["exit"] == 0 for rs in runs.values() for r in rs),
    }
    first = summary["first_trial_s"]
    summary["warm_over_cold"] = _ratio(first[WARM_ARM], first[COLD_ARM])
    summary["empty_cache_over_warm"] = _ratio(first[FIRST_FETCH], first[WARM_ARM])
    return {"summary": summary, "runs": {**runs, **{k: [{"wall_s": w} for w in v] for k, v in reading.items()}}}


def promises(sizes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The targets a history of this size is held to: the warm first trial within 1.2x the cold one's, the empty-cache
    one within 2x the warm one's, neighbors under 2 s, import at 20 studies per second or more."""
    out = {}
    for size, s in sizes.items():
        out[size] = {
            "warm_within_1.2x_cold": s["warm_over_cold"] is not None and s["warm_over_cold"] <= 1.2,
            "empty_cache_within_2x_warm": s["empty_cache_over_warm"] is not None and s["empty_cache_over_warm"] <= 2.0,
            "neighbors_under_2s": s["reading_s"]["neighbors"] is not None and s["reading_s"]["neighbors"] < 2.0,
            "import_20_per_s": (s["import_per_s"] or 0) >= 20,
        }
    return out


def shared_fits(starter: Path, models_dir: Path) -> int:
    """The cheaper fit path: every copy's source GP (keyed by its data as a study will read them)
    stored in ``models_dir`` with its original's fitted hyperparameters and signal check, so
    ``bootstrap`` fits none. Returns how many copies got one."""
    from agent.jobs import load_job
    from agent.knowledge.starter import read_starter
    from agent.tuning.shared_fits import store_shared_fits

    header, entries = read_starter(starter)
    return store_shared_fits(entries, load_job(header["job"]).space, models_dir, lambda e: e["name"].split("~")[0])


def _wall(args: list[str], cwd: Path, cache: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=1800, env=bench_env(cache))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[1:3])} failed: {done.stderr.strip()[-300:]}")
    return round(time.perf_counter() - start, 3)


def _ui_answers(store: list[str], cwd: Path, cache: dict[str, str]) -> float | None:
    """Seconds from launching ``tune-agent ui`` to its line that the MLflow UI answers (None when it
    does not within 10 minutes); then Ctrl-C stops it."""
    import signal
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.perf_counter()
    args = [console_script(), "ui", "--port", str(port), *store]
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=bench_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its MLflow UI and workers with it: a group to stop whole
        preexec_fn=_ctrl_c_default,
    )
    answered = None
    try:
        for line in proc.stdout or ():
            if "answers on" in line:
                answered = round(time.perf_counter() - start, 3)
                break
            if time.perf_counter() - start > 600:
                break
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C to the command alone: it stops its MLflow UI
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return answered


def _ctrl_c_default() -> None:
    """In the ``ui`` child: Ctrl-C as a terminal gives it, even when this benchmark runs in the
    background of a shell (which starts it with SIGINT ignored, and the child would inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _median(values: Sequence[float | None]) -> float | None:
    done = sorted(v for v in values if v is not None)
    return round(done[len(done) // 2], 3) if done else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _size(path: Path) -> float:
    """Megabytes under ``path``."""
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


def plot(report: dict[str, Any], path: Path) -> None:
    """Each figure against the history's size (datasets), log-scaled, one panel per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = report["sizes"]
    x = [s["datasets"] for s in sizes.values()]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for arm in (WARM_ARM, COLD_ARM, FIRST_FETCH):
        axes[0].plot(x, [s["first_trial_s"][arm] for s in sizes.values()], "o-", label=f"first trial, {arm}")
    for name in ("neighbors", "history", "meta publish", "ui answers"):
        axes[1].plot(x, [s["reading_s"].get(name) for s in sizes.values()], "o-", label=name)
    axes[2].plot(x, [s["import_per_s"] for s in sizes.values()], "o-", label="import, studies per second")
    axes[0].set_ylabel("seconds")
    axes[1].set_ylabel("seconds")
    axes[2].set_ylabel("studies per second")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("datasets in the history")
        ax.legend(fontsize=8)
    fig.suptitle("tune-agent-bench kb-scale")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
