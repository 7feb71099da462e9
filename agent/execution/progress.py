"""Progress of a study for a person: trial i/N, best so far, the current configuration.

On a terminal the lines are styled by rich; otherwise (CI, pipes, log files) they are plain
text, one line per event, so logs stay greppable.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from agent.knowledge.records import COUNTED_STATES, TRIAL_OK, TRIAL_PRUNED, TrialRecord


def _fmt(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items())


class ProgressReporter:
    """Prints study events; ``stream`` defaults to stdout. On a terminal, a live display stays
    under the lines: trials done of the budget, elapsed time and the estimate of what is left, the
    best so far, and the running trial's epoch with its latest metric."""

    def __init__(
        self,
        stream: TextIO | None = None,
        rich: bool | None = None,
        whole_process: bool = False,
        launched_by: int | None = None,
    ) -> None:
        self.stream = stream or sys.stdout
        self.whole_process = whole_process  # the command's own process: its closing line counts from launch
        self.launched_by = launched_by  # a command the warm process forked: the client's pid, launched first
        self.rich = self.stream.isatty() if rich is None else rich
        self._console = None
        self._progress: Any = None
        if self.rich:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)
        self.total = 0
        self.metric = ""
        self._beat: Any = None  # a log's heartbeat (a terminal has the live display), begun with the study

    def line(self, text: str, style: str | None = None) -> None:
        if self._console is not None:
            self._console.print(text, style=style, markup=False)
        elif self._beat is not None:
            self._beat(text)
        else:
            self._print(text)

    def _print(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (ValueError, OSError):  # the stream was closed under a study that ended without a word
            pass

    def phase(self, what: str, patient: bool = False, key: str | None = None) -> None:
        """Names what the study does next; in a log (no live display), a line says it is still at
        it after 1.5 s without one (:mod:`agent.tuning.heartbeat`)."""
        if self.rich:
            return
        if self._beat is None:
            from agent.tuning.heartbeat import Heartbeat

            self._beat = Heartbeat(self._print).__enter__()
        self._beat.phase(what, patient, key)

    def close(self) -> None:
        """The study's last word said: the heartbeat stops."""
        if self._beat is not None:
            self._beat.__exit__(None, None, None)
            self._beat = None

    def _live(self, done: int) -> None:
        """Starts the terminal's live display (a rich Progress printing the lines above itself)."""
        import atexit

        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("trials"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[best]}"),
            console=self._console,
            transient=True,
        )
        self._study_task = self._progress.add_task("study", total=self.total, completed=done, best="")
        self._trial_task = self._progress.add_task("trial", total=None, visible=False, best="")
        self._progress.start()
        atexit.register(self._stop)

    def _stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def epoch_done(self, number: int, epoch: int, epochs: int, metrics: Mapping[str, float]) -> None:
        """The running trial finished an epoch (on a terminal: its progress line; in a log: the
        heartbeat's name for what runs)."""
        value = metrics.get(self.metric)
        shown = f"{self.metric}={value:.4g}" if value is not None else ""
        doing = "finishing: its model kept, its run closed" if epoch >= epochs else "training"
        said = f"trial {number + 1} {doing} (epoch {epoch}/{epochs} done{' ' + shown if shown else ''})"
        self.phase(said, True, f"t{number}")
        if self._progress is None:
            return
        self._progress.update(
            self._trial_task,
            visible=True,
            total=epochs,
            completed=epoch,
            best=f"trial {number + 1}: epoch {epoch}/{epochs} {shown}",
        )

    def begin(self, study: Any, trials: list[TrialRecord]) -> None:
        self.total = study.settings.trials
        self.metric = study.settings.metric
        done = sum(t.state in COUNTED_STATES for t in trials)
        what = "resuming" if done else "starting"
        self.line(
            f"{what} study {study.name}: job {study.record.job} on {study.record.dataset}, "
            f"{done}/{self.total} trials done, {study.settings.mode} {self.metric}",
            style="bold",
        )
        if self.rich:
            self._live(done)
        self.phase("proposing the first trial" if not done else "proposing the next trial")

    def trial_started(self, trial: TrialRecord) -> None:
        from agent.samplers.origins import explain_origin, origin_kind

        self.line(f"trial {trial.number + 1}/{self.total} [{trial.origin}] {_fmt(trial.config)}", style="cyan")
        explained = self.__dict__.setdefault("_explained", set())
        kind = origin_kind(trial.origin)
        if trial.origin and kind not in explained:  # the first of its kind: what the tag means, once
            explained.add(kind)
            self.line(f"  [{trial.origin}]: {explain_origin(trial.origin)}", style="dim")
        self.phase(f"trial {trial.number + 1} starting: its data, model and Trainer", True, f"t{trial.number}")

    def trial_finished(self, trial: TrialRecord, best: TrialRecord | None, trials: list[TrialRecord]) -> None:
        done = sum(t.state in COUNTED_STATES for t in trials)
        if self._progress is not None:
            shown = f"best {self.metric}={best.value:.5g} (trial {best.number + 1})" if best else ""
            self._progress.update(self._study_task, completed=done, best=shown)
            self._progress.update(self._trial_task, visible=False)
        if trial.state == TRIAL_OK:
            result = f"{self.metric}={trial.value:.5g}"
        elif trial.state == TRIAL_PRUNED:
            result = trial.reason
        else:
            result = f"{trial.state}: {trial.reason}"
        best_txt = f"best {self.metric}={best.value:.5g} (trial {best.number + 1})" if best else "no success yet"
        style = {TRIAL_OK: "green", TRIAL_PRUNED: "yellow"}.get(trial.state, "red")
        self.line(
            f"  trial {trial.number + 1} done ({done}/{self.total}): {result} in {trial.duration or 0:.1f} s; "
            f"{best_txt}",
            style=style,
        )
        self.phase("recording it and proposing the next trial" if done < self.total else "ending the study")

    def end(self, study: Any, best: TrialRecord | None, timing: Any) -> None:
        self._stop()
        self.phase("writing the study's report")
        if best is None:
            self.line(f"study {study.name} finished with no successful trial", style="red")
            return
        self.line(
            f"study {study.name} finished: best {self.metric}={best.value:.5g} at trial {best.number + 1}: "
            f"{_fmt(best.config)}",
            style="bold green",
        )
        if getattr(study.settings, "multi", False):
            self.line(_front_line(study), style="bold green")
        if timing.wall_seconds > 0 and timing.workers > 1:
            self.line(
                f"wall {timing.wall_seconds:.1f} s, Trainer.fit {timing.fit_seconds:.1f} s summed over "
                f"{timing.workers} workers ({100 * timing.utilisation:.0f}% of their time)"
            )
        elif timing.wall_seconds > 0:
            age = process_seconds(self.launched_by) if self.whole_process else None
            if age is not None and age > timing.wall_seconds:  # the overhead of the whole command, start-up included
                wait = getattr(timing, "first_wait_seconds", 0.0)  # the trial process still importing Lightning
                self.line(
                    f"process {age:.1f} s since launch ({age - timing.wall_seconds + wait:.1f} s before the first "
                    f"trial trained: imports, data, warm start, surrogate), trials {timing.wall_seconds - wait:.1f} s, "
                    f"Trainer.fit {timing.fit_seconds:.1f} s: "
                    f"agent overhead {100 * (1 - timing.fit_seconds / age):.1f}%"
                )
            else:
                self.line(
                    f"wall {timing.wall_seconds:.1f} s, Trainer.fit {timing.fit_seconds:.1f} s, "
                    f"agent overhead {100 * timing.overhead:.1f}%"
                )


def _front_line(study: Any) -> str:
    """The Pareto front of a study of several metrics or with constraints, in one line."""
    from agent.samplers.pareto import front_summary

    front = front_summary(study.trials(), study.settings)
    points = "; ".join(
        f"trial {p['trial']}: " + ", ".join(f"{k}={v:.5g}" for k, v in p["values"].items()) for p in front["pareto"]
    )
    return (
        f"Pareto front ({len(front['pareto'])} feasible trial(s) no other beats on every metric): {points}; "
        f"hypervolume {front['hypervolume']:.4g} (tune-agent best {study.name} prints it as JSON)"
    )


def process_seconds(pid: int | None = None) -> float | None:
    """Seconds since this process (or process ``pid``: for a command the warm process forked, its
    client) was launched, from Linux's /proc; None where that is unknown."""
    import os

    try:
        fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, counted after the command name
        return float(Path("/proc/uptime").read_text().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


class SilentReporter:
    """A reporter that says nothing: studies run inside benchmarks and evaluations."""

    def line(self, text: str, style: str | None = None) -> None: ...
    def begin(self, study: Any, trials: list[TrialRecord]) -> None: ...
    def trial_started(self, trial: TrialRecord) -> None: ...
    def trial_finished(self, trial: TrialRecord, best: Any, trials: list[TrialRecord]) -> None: ...
    def end(self, study: Any, best: Any, timing: Any) -> None: ...
