"""`tune-agent-bench silence`: the longest silence of each command a person waits on.

Each command runs as a fresh process with its output to a pipe (what a log sees), and every line
it prints (a ``\\n`` or a ``\\r`` ends one) is timed from the moment it was launched. A command's
figure is its longest gap: between launch and the first line, between two lines, or between the
last line and its exit. The commands are ``start`` (a one-trial warm-started study to its end, the
end's refit and publish included), ``resume`` (a study interrupted after its first trial),
``neighbors``, ``meta publish``, ``server`` (up to the line that it serves, and from Ctrl-C to its
exit) and ``ui`` (up to the line that it answers, then Ctrl-C), on an embedded sqlite store that
holds the starter history (``copies`` times over: each copy of a study a dataset of its own, with
its sample, values and meta-features perturbed) and, with ``team``, through a team server
(``tune-agent server``: MLflow over PostgreSQL) that holds the same history.
"""

from __future__ import annotations

import hashlib
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.bench.server import _free_port
from agent.bench.timed_run import bench_env, console_script

PROTOCOL = (
    "Each command a fresh process (TUNE_AGENT_DAEMON=0), output piped; a line ends at \\n or \\r; "
    "gap = longest of launch->first line, line->line, last line->exit (server and ui: up to the line "
    "that they serve, then from Ctrl-C to exit). Tables new to the history (startup bench's CSVs); "
    "start: --trials 1 --epochs 1 warm-started by default, to its end; resume: a --trials 2 study "
    "interrupted (SIGINT) after trial 1; neighbors: --dataset TABLE --job mlp; meta publish: from the "
    "bootstrap's folder after the studies ended."
)
PROMISE = 2.0  # seconds: the longest silence a command may keep


def copied_starter(path: Path, copies: int, seed: int = 0) -> dict[str, Any]:
    """The packaged ``mlp`` starter history ``copies`` times over in the starter file ``path``: copy
    ``c`` of a study is a dataset of its own (name and fingerprint suffixed ``~c``, its sample's
    inputs, its values and its meta-features perturbed), so the history grows in datasets."""
    from agent.knowledge.starter import read_starter, write_starter

    header, entries = read_starter("mlp")
    rng = np.random.default_rng(seed)
    out = list(entries)
    for c in range(1, copies):
        for entry in entries:
            out.append(_copy(entry, c, rng))
    return write_starter(path, header["job"], header["space"], out)


def _copy(entry: dict[str, Any], c: int, rng: np.random.Generator) -> dict[str, Any]:
    name = f"{entry['settings']['dataset_name']}~{c}"
    print_ = hashlib.sha256(f"{entry['settings']['fingerprint']}~{c}".encode()).hexdigest()[:16]
    settings = {**entry["settings"], "dataset": name, "dataset_name": name, "fingerprint": print_}
    summary = {**entry["summary"], "name": name, "source": name, "fingerprint": print_}
    values = np.asarray([np.nan if v is None else v for v in entry["values"]], float)
    spread = float(np.nanstd(values)) if np.isfinite(values).any() else 0.0
    values = values + rng.normal(0.0, 0.05 * spread + 1e-9, values.shape)
    metafeatures = entry.get("metafeatures")
    if isinstance(metafeatures, dict):
        metafeatures = {  # values perturbed; their version (what reads them as current) kept
            k: (float(v) * (1.0 + rng.normal(0.0, 0.05)) if isinstance(v, (int, float)) and k != "version" else v)
            for k, v in metafeatures.items()
        }
    sample = entry.get("sample")
    if sample is not None:
        X = np.asarray(sample[0], np.float32)
        sample = (X + rng.normal(0.0, 0.05, X.shape).astype(np.float32) * (float(X.std()) or 1.0), sample[1])
    return {
        **entry,
        "name": f"{entry['name']}~{c}",
        "settings": settings,
        "summary": summary,
        "metafeatures": metafeatures,
        "values": [None if not np.isfinite(v) else float(v) for v in values],
        "sample": sample,
    }


def line_gaps(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float = 1800,
    ready: bytes | None = None,
    interrupt_on: bytes | None = None,
) -> dict[str, Any]:
    """Runs ``args`` and times its lines. ``ready``: once a line holds it, the command is sent
    Ctrl-C (SIGINT) and the time from then to its exit counts as one more gap; ``interrupt_on``:
    the same, for a study stopped to be resumed."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    trigger = ready or interrupt_on
    marks, text = read_lines(proc, start, trigger, timeout)
    marks.insert(0, (0.0, "(launched)"))
    if trigger is not None and trigger in text:
        proc.send_signal(signal.SIGINT)
        marks.append((time.perf_counter() - start, "(Ctrl-C sent)"))
        more, tail = read_lines(proc, start, None, timeout)
        marks, text = marks + more, text + tail
    if proc.poll() is None and trigger is None:
        proc.kill()
    proc.wait(timeout=120)
    marks.append((time.perf_counter() - start, f"(exit {proc.returncode})"))
    return summarise(marks, text, proc.returncode)


def read_lines(
    proc: subprocess.Popen[bytes], start: float, marker: bytes | None, timeout: float
) -> tuple[list[tuple[float, str]], bytes]:
    """``proc``'s lines, each with its seconds since ``start``, until a line holds ``marker`` (None:
    until its output ends) or ``timeout``; and the output read."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    marks: list[tuple[float, str]] = []
    pending, text = b"", b""
    while time.perf_counter() - start < timeout:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        now = time.perf_counter() - start
        text += chunk
        pending += chunk
        *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
        marks += [(now, line.decode(errors="replace").strip()[:160]) for line in lines if line.strip()]
        if marker is not None and marker in text:
            break
    return marks, text


def summarise(marks: list[tuple[float, str]], text: bytes, code: int | None) -> dict[str, Any]:
    """The longest gap between consecutive marks, the line it followed, and the run's shape."""
    gaps = [(b[0] - a[0], a[1]) for a, b in zip(marks, marks[1:])]
    longest = max(gaps, key=lambda g: g[0])
    said = [m for m in marks if not m[1].startswith("(")]
    return {
        "longest_gap_s": round(longest[0], 2),
        "after": longest[1],
        "first_line_s": round(said[0][0], 2) if said else None,
        "wall_s": round(marks[-1][0], 2),
        "lines": len(said),
        "over_1s": [[round(g, 2), after] for g, after in sorted(gaps, reverse=True)[:5] if g > 1.0],
        "exit": code,
        "tail": text.decode(errors="replace")[-400:],
    }


def run_silence_bench(copies: int = 1, team: bool = True, say: Any = print) -> dict[str, Any]:
    """The longest silence of each command on a sqlite store of ``copies`` x the starter history
    and, with ``team``, through a team server holding the same; see the module's text."""
    results: dict[str, dict[str, Any]] = {}
    setup: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        starter = root / "history.npz"
        made = copied_starter(starter, copies)
        say(f"history: {made['studies']} source studies, {made['evaluations']} evaluations ({copies} x the starter)")
        store = ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifact-root", str(root / "art")]
        _commands("sqlite", root / "sqlite", starter, store, results, setup, say)
        if team:
            _through_server(root, starter, results, setup, say)
    from agent.bench.fingerprint import engine_fingerprint, environment

    worst = max(results.values(), key=lambda r: r["longest_gap_s"])
    flags = (f" --copies {copies}" if copies != 1 else "") + ("" if team else " --no-team")
    return {
        "command": f"tune-agent-bench silence{flags}",
        "engine": engine_fingerprint("bench/silence.py"),
        "environment": environment(),
        "protocol": PROTOCOL,
        "sources": made["studies"],
        "copies": copies,
        "setup_seconds": setup,
        "summary": {k: r["longest_gap_s"] for k, r in results.items()},
        "commands": {k: {f: v for f, v in r.items() if f != "tail"} for k, r in results.items()},
        "longest_gap_s": worst["longest_gap_s"],
        "within_promise": all(r["longest_gap_s"] <= PROMISE for r in results.values()),
        "promise_s": PROMISE,
    }


def _commands(
    label: str,
    root: Path,
    starter: Path,
    store: list[str],
    results: dict[str, dict[str, Any]],
    setup: dict[str, float],
    say: Any,
) -> None:
    """The history imported and its source models built (``bootstrap starter``, timed as
    setup), then each study command through ``store``, timed."""
    from agent.bench.startup import new_table

    exe = console_script()
    builder, teammate = root / "builder", root / "teammate"
    builder.mkdir(parents=True)
    teammate.mkdir()
    env = bench_env({"TUNE_AGENT_CACHE": str(root / "cache")})
    say(f"{label}: importing the history and building its source models (bootstrap starter)")
    built = line_gaps([exe, "bootstrap", "starter", str(starter), *store], builder, env, timeout=7200)
    setup[f"{label}: bootstrap starter"] = built["wall_s"]
    if built["exit"] != 0:
        raise RuntimeError(f"{label}: bootstrap starter failed: {built['tail'][-300:]}")
    tables = [new_table(root / f"table-{i}.csv", seed=100 + i) for i in range(3)]
    common = ["--job", "mlp", "--epochs", "1", *store]
    plan: list[tuple[str, list[str], dict[str, Any]]] = [
        ("start", [exe, "start", "--dataset", str(tables[0]), "--trials", "1", "--study-name", "one", *common], {}),
        (
            "(interrupted start)",
            [exe, "start", "--dataset", str(tables[1]), "--trials", "2", "--study-name", "two", *common],
            {"interrupt_on": b"trial 1 done"},
        ),
        ("resume", [exe, "resume", "two", *store], {}),
        ("neighbors", [exe, "neighbors", "--dataset", str(tables[2]), "--job", "mlp", *store[:2]], {}),
    ]
    for name, args, extra in plan:
        run = line_gaps(args, teammate, env, **extra)
        _keep(label, name, run, results, say)
    run = line_gaps([exe, "meta", "publish", "--job", "mlp", *store[:2]], builder, env)
    _keep(label, "meta publish", run, results, say)
    if label == "sqlite":
        port = _free_port()
        run = line_gaps([exe, "ui", "--port", str(port), *store], teammate, env, timeout=600, ready=b"answers on")
        _keep(label, "ui", run, results, say)


def _keep(label: str, name: str, run: dict[str, Any], results: dict[str, dict[str, Any]], say: Any) -> None:
    say(f"{label}: {name}: longest silence {run['longest_gap_s']:.2f} s after {run['after']!r} (exit {run['exit']})")
    if run["exit"] not in (0, 130):
        say(f"  its output ended: {run['tail'][-300:]}")
    if name.startswith("("):
        return
    results[f"{label}: {name}"] = run


def _through_server(
    root: Path, starter: Path, results: dict[str, dict[str, Any]], setup: dict[str, float], say: Any
) -> None:
    """A team server started (its start and its stop timed as ``server``) and the commands through it."""
    exe = console_script()
    data, port, pg_port = root / "team", _free_port(), _free_port()
    root.chmod(0o755)  # PostgreSQL's own user must reach its cluster's folder when the benchmark runs as root
    start = time.perf_counter()
    args = [exe, "server", "--data-dir", str(data), "--port", str(port), "--pg-port", str(pg_port)]
    proc = subprocess.Popen(args, cwd=root, env=bench_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        marks, text = read_lines(proc, start, b"agents:", timeout=600)
        marks.insert(0, (0.0, "(launched)"))
        if b"agents:" not in text:
            raise RuntimeError(f"the server did not say it serves: {text.decode(errors='replace')[-300:]}")
        served = time.perf_counter()
        url = ["--tracking-uri", f"http://127.0.0.1:{port}"]
        _commands("team server", root / "through", starter, url, results, setup, say)
    finally:
        proc.send_signal(signal.SIGINT)
    stop = time.perf_counter()
    more, tail = read_lines(proc, stop, None, timeout=120)
    proc.wait(timeout=60)
    shift = served - start  # the commands' own time between is not the server's silence
    marks += [(shift, "(Ctrl-C sent)")] + [(shift + t, line) for t, line in more]
    marks.append((shift + time.perf_counter() - stop, f"(exit {proc.returncode})"))
    _keep("team server", "server", summarise(marks, text + tail, proc.returncode), results, say)
