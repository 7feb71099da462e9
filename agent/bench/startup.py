"""What a person waits for: seconds from pressing Enter on ``tune-agent start`` to its first
output and to its first trial, on a pseudo-terminal (as a person sees it) and through a pipe (as a
log sees it). Each run is a fresh process on a fresh embedded store; medians over ``repeats``."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _timed_run(args: list[str], cwd: Path, tty: bool, marker: bytes, timeout: float = 300) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    env.update(COLUMNS="120", TERM=env.get("TERM", "xterm"))
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
        os.close(follower)
        read_fd = leader
    else:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        read_fd = proc.stdout.fileno()  # type: ignore[union-attr]
    start = time.perf_counter()
    first = marked = None
    seen = b""
    while time.perf_counter() - start < timeout:
        ready, _, _ = select.select([read_fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:  # the pty closes when the process ends
                chunk = b""
            if not chunk:
                break
            now = time.perf_counter() - start
            if first is None and chunk.strip():
                first = now
            seen += chunk
            if marked is None and marker in seen:
                marked = now
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    if tty:
        os.close(read_fd)
    text = seen.decode(errors="replace")
    return {"first_output_s": first, "first_trial_s": marked, "exit": proc.returncode,
            "progress_display": "\x1b[" in text and "ETA" in text, "tail": text[-300:]}


def run_startup_bench(repeats: int = 5, dataset: str = "iris", job: str = "mlp") -> dict[str, Any]:
    exe = str(Path(sys.executable).with_name("tune-agent"))
    rows: dict[str, list[dict[str, Any]]] = {"terminal": [], "pipe": []}
    others: dict[str, list[float | None]] = {}
    for i in range(repeats):
        for mode in ("terminal", "pipe"):
            with tempfile.TemporaryDirectory() as tmp:
                args = [exe, "start", "--dataset", dataset, "--job", job, "--trials", "2", "--epochs", "2", "--warm-start",
                        "none", "--study-name", f"startup-{i}", "--tracking-uri", f"sqlite:///{Path(tmp) / 'mlflow.db'}",
                        "--artifact-root", str(Path(tmp) / "art")]
                rows[mode].append(_timed_run(args, Path(tmp), mode == "terminal", b"trial 1/"))
                if mode == "terminal":  # other commands on the store the study left
                    store = ["--tracking-uri", f"sqlite:///{Path(tmp) / 'mlflow.db'}"]
                    for command in (["history", *store], ["best", f"startup-{i}", *store]):
                        run = _timed_run([exe, *command], Path(tmp), True, b"\n")
                        others.setdefault(command[0], []).append(run["first_output_s"])
    summary = {}
    for mode, runs in rows.items():
        firsts = sorted(r["first_output_s"] for r in runs if r["first_output_s"] is not None)
        trials = sorted(r["first_trial_s"] for r in runs if r["first_trial_s"] is not None)
        summary[mode] = {"median_first_output_s": round(firsts[len(firsts) // 2], 3) if firsts else None,
                         "median_first_trial_s": round(trials[len(trials) // 2], 3) if trials else None,
                         "progress_display": all(r["progress_display"] for r in runs),
                         "all_exit_0": all(r["exit"] == 0 for r in runs)}
    for command, firsts in others.items():
        done = sorted(f for f in firsts if f is not None)
        summary[f"terminal: {command}"] = {"median_first_output_s": round(done[len(done) // 2], 3) if done else None}
    return {"command": f"tune-agent start --dataset {dataset} --job {job} --trials 2 --epochs 2 --warm-start none",
            "repeats": repeats, "summary": summary,
            "runs": {m: [{k: v for k, v in r.items() if k != "tail"} for r in runs] for m, runs in rows.items()},
            "protocol": "fresh process and fresh embedded store per run; first output: the first non-blank bytes "
                        "on the terminal (a pseudo-terminal) or the pipe; first trial: the line 'trial 1/'"}
