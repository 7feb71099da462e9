"""A user's LightningCLI script as a job (``tune-agent start --cli main.py --config base.yaml``).

Each trial runs the user's own script (``fit``, their ``--config`` files) in a process of its own
with the trial's configuration as the CLI's overrides (``--model.lr=0.01``,
``--data.batch_size=64``), and tune-agent's reporting callback added through the CLI's own
``--trainer.callbacks+=`` (:mod:`agent.execution.cli_trial` runs it and reads what it reports). The
first time, one run of the script up to its first batch (:mod:`agent.project.probe`) tells which
classes the CLI builds (the job's name is the LightningModule's dotted class name, as for
``--model``, so both styles share a history), checks the space against their arguments, and
samples the training loader for the warm start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from agent.errors import JobError
from agent.project.signature import OWNED_TRAINER_ARGS, check_names
from agent.project.space_file import parse_space
from agent.project.spec import ProjectSpec

PROBE_CALLBACK = "agent.project.probe.ProjectProbe"
PROBE = "probe.json"  # what the probe found, in its folder
SAMPLE = "sample.npz"  # the training loader's sample, beside it
REPORTER_CALLBACK = "agent.execution.cli_reporter.TrialReporter"
PROBE_SECONDS = 600.0


class CliProjectJob:
    """The job of a LightningCLI script (see the module docstring); pickled as its spec."""

    owns_data = True
    runs_script = True  # trials run the script in a process of their own (agent.execution.cli_trial)
    metric = "val_loss"
    mode = "min"

    def __init__(self, spec: ProjectSpec, say: Callable[[str], None] = lambda _: None) -> None:
        self.say = say
        if not Path(spec.script).is_file():
            raise JobError(f"--cli {spec.script}: no such file")
        for config in spec.configs:
            if not Path(config).is_file():
                raise JobError(f"--config {config}: no such file")
        parsed = parse_space(spec.space, "space file", ("model", "data", "trainer"))
        self.space, self.fixed = parsed.space, dict(parsed.fixed)
        self._probe: dict[str, Any] | None = None
        self._sample: tuple[np.ndarray, np.ndarray] | None = None
        if not spec.model:  # the first time: run the script once to learn its classes
            self._probe, self._sample = self.probe(spec)
            report = self._probe
            keys = [*parsed.space.names, *parsed.fixed]
            for target in ("model", "data", "trainer"):
                found = report.get(target)
                if found is None:
                    if any(k.startswith(target + ".") for k in keys):
                        raise JobError(
                            f"space file: the CLI of {spec.script} builds no {target}, but the space sets {target}.*"
                        )
                    continue
                check_names(keys, target, found["names"], found["var"], found["path"], "space file")
            check_names(
                [f"trainer.{k}" for k in spec.trainer],
                "trainer",
                report["trainer"]["names"],
                False,
                "Trainer",
                "--trainer",
            )
            data = report.get("data") or {}
            spec = replace(spec, model=report["model"]["path"], data=data.get("path", ""))
        self.spec = spec
        self.name = spec.model
        self.short_name = spec.model.rsplit(".", 1)[-1].lower()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.spec.text(),))

    def __repr__(self) -> str:
        return f"CliProjectJob({self.spec.script}, model={self.name})"

    def spec_text(self) -> str:
        """The stored job setting: the spec with what the probe found."""
        return self.spec.text()

    def check_dataset(self, dataset: Any) -> None:
        return None

    def build(self, *args: Any) -> Any:
        raise JobError("a LightningCLI job runs its script for each trial; it builds nothing in this process")

    # -- the command of a trial ------------------------------------------------------------------------
    def command(
        self, config: Mapping[str, Any], epochs: int, seed: int, folder: Path, resume: Path | None
    ) -> list[str]:
        """The script's command line for one trial (its configuration as the CLI's overrides)."""
        values = {**self.fixed, **dict(config)}
        argv = [sys.executable, self.spec.script, "fit"]
        argv += [f"--config={c}" for c in self.spec.configs]
        argv += [f"--trainer.{k}={_text(v)}" for k, v in self.spec.trainer.items()]
        argv += [f"--{k}={_text(v)}" for k, v in values.items()]
        argv += [
            f"--trainer.max_epochs={int(epochs)}",
            f"--trainer.default_root_dir={folder / 'run'}",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            f"--trainer.callbacks+={REPORTER_CALLBACK}",
            f"--trainer.callbacks.folder={folder}",
            f"--seed_everything={int(seed)}",
        ]
        if resume is not None:
            argv.append(f"--ckpt_path={resume}")
        return argv

    def workdir(self) -> str:
        return self.spec.path or str(Path(self.spec.script).resolve().parent)

    # -- what the warm start measures --------------------------------------------------------------
    def dataset_source(self) -> str:
        return (self.spec.data or self.spec.model).rsplit(".", 1)[-1]

    def dataset_name(self) -> str:
        return self.spec.dataset_name or self.dataset_source()

    def dataset(self, name: str = "", say: Callable[[str], None] = lambda _: None) -> Any:
        from agent.project.sample import LoaderSample, as_dataset

        if self._sample is None:
            self._probe, self._sample = self.probe(self.spec)
        probe = self._probe or {}
        if probe.get("sample_error"):
            raise JobError(f"sampling the training loader of {self.spec.script} failed: {probe['sample_error']}")
        if self._sample is None:
            raise JobError(f"the training loader of {self.spec.script} gave no sample")
        X, y = self._sample
        return as_dataset(LoaderSample(X, y, str(probe.get("note", ""))), name or self.dataset_name(), say)

    def serving_note(self) -> str:
        return str((self._probe or {}).get("forward", ""))

    def probe(self, spec: ProjectSpec) -> tuple[dict[str, Any], tuple[np.ndarray, np.ndarray] | None]:
        """Runs the script once up to its first batch (:mod:`agent.project.probe`)."""
        self.say(f"probing {Path(spec.script).name}: running it up to its first batch (its classes, a data sample)")
        folder = Path(tempfile.mkdtemp(prefix="tune-agent-probe-"))
        try:
            argv = [sys.executable, spec.script, "fit", *[f"--config={c}" for c in spec.configs]]
            argv += [f"--{k}={_text(v)}" for k, v in parse_space(spec.space).fixed.items()]
            argv += [
                "--trainer.max_epochs=1",
                f"--trainer.default_root_dir={folder / 'run'}",
                "--trainer.enable_progress_bar=false",
                f"--trainer.callbacks+={PROBE_CALLBACK}",
                f"--trainer.callbacks.folder={folder}",
            ]
            done = subprocess.run(
                argv,
                cwd=spec.path or str(Path(spec.script).resolve().parent),
                env=script_env(),
                capture_output=True,
                text=True,
                timeout=PROBE_SECONDS,
            )
            if not (folder / PROBE).is_file():
                raise JobError(f"--cli {spec.script}: the script failed ({last_line(done.stderr, done.returncode)})")
            report = json.loads((folder / PROBE).read_text())
            sample = None
            if (folder / SAMPLE).is_file():
                with np.load(folder / SAMPLE) as arrays:
                    sample = (arrays["X"], arrays["y"])
            return report, sample
        except subprocess.TimeoutExpired:
            raise JobError(
                f"--cli {spec.script}: the script did not reach its first batch in {PROBE_SECONDS:.0f} s"
            ) from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def script_env() -> dict[str, str]:
    """The environment of a run of the user's script: this one, with the folder tune-agent is
    imported from on the path (its callbacks load there) and Python's output unbuffered."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the package `agent`
    env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH", ""), root) if p])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def last_line(stderr: str, code: int | None) -> str:
    """The last line of a failed run's stderr that says something (its exception, usually)."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("warnings.warn", "  "))]
    text = (useful or lines or [f"exit code {code}"])[-1]
    return text[:400] + (f"; exit code {code}" if code not in (None, 0) else "")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _rebuild(text: str) -> CliProjectJob:
    return CliProjectJob(ProjectSpec.parse(text))


__all__ = ["OWNED_TRAINER_ARGS", "CliProjectJob"]
