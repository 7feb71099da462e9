"""One trial of a user's LightningCLI script: its own process, read as it runs.

:func:`run_cli_trial` writes what the trial's :class:`~agent.execution.cli_reporter.TrialReporter`
needs into the trial's folder, starts the user's script with the trial's configuration as CLI
overrides (:meth:`agent.project.cli_job.CliProjectJob.command`), forwards each epoch's metrics to
the trial's run and the progress display as they arrive, and turns the end into a
:class:`~agent.execution.trial.TrialOutcome`: a script that dies is a failed trial with the last
line of its stderr, a trial past ``--time-limit`` is stopped and failed, and a study stopped
meanwhile (Ctrl-C, SIGTERM) takes the script down with it. A killed trial's folder keeps its
checkpoint, and its re-run continues from it (``--ckpt_path``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.execution.checkpoints import describe, resume_point
from agent.execution.outcome import TrialOutcome, _fit_outcome, _required
from agent.execution.pruning import PruningState

# the files the reporting callback (agent.execution.cli_reporter, in the script's process) reads and writes
SETTINGS = "reporter.json"
METRICS = "metrics.jsonl"

POLL_SECONDS = 0.2


def run_cli_trial(
    job: Any,
    config: dict[str, Any],
    settings: Any,
    logger: Any,
    pruning: PruningState | None,
    on_epoch: Any,
    scratch: Path | None,
    number: int,
    seed: int,
) -> TrialOutcome:
    """Runs the trial (see the module docstring); never raises for a failure inside it."""
    from agent.project.cli_job import last_line, script_env

    own_folder = scratch is None
    folder = Path(tempfile.mkdtemp(prefix="tune-agent-trial-")) if scratch is None else scratch
    folder.mkdir(parents=True, exist_ok=True)
    epochs = int(settings.epochs)
    point = resume_point(folder, config, seed, epochs)
    describe(folder, config, seed)
    (folder / METRICS).unlink(missing_ok=True)
    curves = {str(k): v for k, v in (pruning.peers if pruning is not None else {}).items()}
    reporter = {
        "metric": settings.metric,
        "sign": settings.sign,
        "pruner": getattr(settings, "pruner", "none"),
        "epochs": epochs,
        "curves": curves,
    }
    (folder / SETTINGS).write_text(json.dumps(reporter))
    argv = job.command(config, epochs, seed, folder, point.checkpoint)
    start = time.perf_counter()
    stderr_path = folder / "stderr.txt"
    try:
        process = _launch(argv, job.workdir(), script_env(), folder)
        end, code, stopped = _follow(process, folder / METRICS, logger, on_epoch, number, epochs, settings.time_limit)
        seconds = time.perf_counter() - start
        if stopped or end is None:
            tail = stderr_path.read_text(errors="replace")[-20000:] if stderr_path.is_file() else ""
            reason = stopped or f"the script failed: {last_line(tail, code)}"[:500]
            failed = TrialOutcome(None, reason, seconds)
            failed.resumed_from, failed.note = point.epoch, point.note
            return failed
        metrics = {k: float(v) for k, v in end["metrics"].items()}
        metrics["n_params"], metrics["fit_seconds"] = float(end["n_params"]), float(end["fit_seconds"])
        if pruning is not None:
            pruning.curve.update({int(k): float(v) for k, v in end.get("curve", {}).items()})
            pruning.reason = pruning.reason or _pruned(folder / METRICS)
        _finalize(logger)
        outcome = _fit_outcome(settings.metric, metrics, seconds, "", pruning, _required(settings))
        outcome.resumed_from, outcome.note = point.epoch, str(end.get("note") or point.note)
        return outcome
    finally:
        if own_folder:
            shutil.rmtree(folder, ignore_errors=True)


class _Forked:
    """A trial forked by the :class:`~agent.execution.script_server.ScriptServer`, with the
    ``poll``/``terminate``/``kill``/``wait`` of a ``Popen``: its exit code comes as a file."""

    def __init__(self, pid: int, folder: Path) -> None:
        self.pid, self.folder = pid, folder
        self.returncode: int | None = None

    def poll(self) -> int | None:
        from agent.execution.script_server import EXIT

        if self.returncode is None:
            try:
                self.returncode = int((self.folder / EXIT).read_text())
            except (OSError, ValueError):
                return None
        return self.returncode

    def _signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(POLL_SECONDS)
        return int(self.returncode or 0)


_SERVER: list[Any] = []  # this process's script server, started by the first trial (or early, by start)


def script_server() -> Any:
    """This process's :class:`~agent.execution.script_server.ScriptServer` (started on first use),
    or None where trials start a fresh Python (``TUNE_AGENT_SCRIPT_SERVER=0``, no ``fork``)."""
    if os.environ.get("TUNE_AGENT_SCRIPT_SERVER", "1").strip() == "0" or not hasattr(os, "fork"):
        return None
    if not _SERVER:
        import atexit

        from agent.execution.script_server import ScriptServer

        _SERVER.append(ScriptServer())
        atexit.register(_SERVER[0].close)
    return _SERVER[0]


def _launch(argv: list[str], cwd: str, env: dict[str, str], folder: Path) -> Any:
    """The trial's process: forked by the script server when it can, else a fresh Python."""
    from agent.execution.script_server import EXIT

    (folder / EXIT).unlink(missing_ok=True)
    server = script_server()
    if server is not None and server.usable():
        return _Forked(server.run(argv, cwd, env, folder), folder)
    with open(folder / "stdout.txt", "wb") as out, open(folder / "stderr.txt", "wb") as err:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True)


def _follow(
    process: Any, metrics_path: Path, logger: Any, on_epoch: Any, number: int, epochs: int, time_limit: float | None
) -> tuple[dict[str, Any] | None, int | None, str]:
    """Reads ``metrics.jsonl`` while the script runs: ``(its end record or None, exit code, why it
    was stopped or '')``. A KeyboardInterrupt or SystemExit here stops the script first."""
    seen, end, start = 0, None, time.perf_counter()
    try:
        while True:
            code = process.poll()
            seen, found = _read_new(metrics_path, seen, logger, on_epoch, number, epochs)
            end = found or end
            if code is not None:
                seen, found = _read_new(metrics_path, seen, logger, on_epoch, number, epochs)
                return found or end, code, ""
            if time_limit is not None and time.perf_counter() - start > time_limit:
                _stop(process)
                return None, process.returncode, f"time limit of {time_limit:g} s exceeded"
            time.sleep(POLL_SECONDS)
    except BaseException:
        _stop(process)
        raise


def _read_new(
    path: Path, seen: int, logger: Any, on_epoch: Any, number: int, epochs: int
) -> tuple[int, dict[str, Any] | None]:
    """The complete lines of ``path`` past the ``seen`` bytes: epochs logged, the end returned."""
    try:
        with open(path, "rb") as f:
            f.seek(seen)
            data = f.read()
    except FileNotFoundError:
        return seen, None
    end = None
    complete = data[: data.rfind(b"\n") + 1]
    for line in complete.splitlines():
        record = json.loads(line)
        if "end" in record:
            end = record["end"]
            continue
        metrics = {k: float(v) for k, v in record["metrics"].items()}
        if logger is not None and logger is not False:
            logger.log_metrics(metrics, step=int(record["epoch"]) - 1)
        if on_epoch is not None:
            on_epoch(number, int(record["epoch"]), epochs, metrics)
    return seen + len(complete), end


def _pruned(path: Path) -> str:
    for line in path.read_text().splitlines():
        reason = json.loads(line).get("pruned")
        if reason:
            return str(reason)
    return ""


def _stop(process: Any) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a fork whose server is gone: no exit code will come
                pass


def _finalize(logger: Any) -> None:
    finalize = getattr(logger, "finalize", None)
    if callable(finalize):
        finalize("success")
