"""One trial: a real ``Trainer.fit`` of the job on a configuration, and what it reached.

Whatever goes wrong inside a trial (an exception, a non-finite loss, the time limit) comes back as a
:class:`TrialOutcome` with its reason, never as an exception: the study loop
(:mod:`agent.execution.runner`) records it as failed and goes on. The executors
(:mod:`agent.execution.workers`, :mod:`agent.execution.ray_workers`) run trials through this module,
so it imports neither of them nor the study loop.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from agent.execution.checkpoints import (
    SERVED,
    ResumePoint,
    checkpoint_callbacks,
    describe,
    resume_point,
    save_served,
    wants_model,
)
from agent.execution.outcome import TrialOutcome, _fit_outcome, _required
from agent.execution.pruning import PruningState, pruning_callback, pruning_state
from agent.knowledge.records import TrialRecord
from agent.tuning.scratch import CHECKPOINT, trial_scratch
from agent.tuning.study import Study


def _guard_callback(time_limit: float | None) -> Any:
    import lightning.pytorch as pl

    class TrialGuard(pl.Callback):
        """Stops a trial whose loss stops being finite or whose time is up, and says why."""

        def __init__(self) -> None:
            self.reason = ""
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int) -> None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            if loss is not None and not bool(np.isfinite(float(loss))):
                self.reason = f"diverged: non-finite training loss at epoch {trainer.current_epoch}"
                trainer.should_stop = True
            elif time_limit is not None and time.perf_counter() - self.start > time_limit:
                self.reason = f"time limit of {time_limit:g} s exceeded at epoch {trainer.current_epoch}"
                trainer.should_stop = True

    return TrialGuard()


# Lightning's loggers, and the leaves its banners ("GPU available", the tips, "`Trainer.fit`
# stopped") come from: importing a Lightning package later (MLflow's model saving imports
# ``pytorch_lightning``) sets its top logger back to INFO, so the leaves are set too
LIGHTNING_LOGGERS = tuple(
    f"{top}{leaf}"
    for top in ("lightning.pytorch", "lightning.fabric", "lightning", "pytorch_lightning", "lightning_fabric")
    for leaf in ("", ".utilities.rank_zero", ".accelerators.cuda")
)


def quiet_lightning() -> None:
    """Lightning's banners and hints would drown the study's own progress lines; called before
    every trial, since a later import of a Lightning package raises its level again."""
    for name in LIGHTNING_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning\..*")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")


def run_benchmark_trial(study: Study, trial: TrialRecord, job: Any, task: Any) -> TrialOutcome:
    """Queries a benchmark job's surrogate once; a failure is the trial's outcome, never raised."""
    start = time.perf_counter()
    outputs: Any = getattr(job, "evaluate_outputs", None)
    several = study.settings.multi and callable(outputs)
    try:
        if several:  # a study of several metrics: every output, its primary the value
            metrics = outputs(dict(trial.config), task)
            value = float(metrics[study.settings.metric])
        else:
            value = float(job.evaluate(dict(trial.config), task))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        return TrialOutcome(None, f"{type(exc).__name__}: {str(exc).strip()[:400]}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not math.isfinite(value):
        return TrialOutcome(None, f"diverged: {study.settings.metric} is {value}", seconds)
    if several:
        return _fit_outcome(study.settings.metric, metrics, seconds, "", None, study.settings.required_metrics())
    return TrialOutcome(value, "", seconds, {study.settings.metric: value})


def run_trial(
    study: Study,
    trial: TrialRecord,
    job: Any,
    dataset: Any,
    split: tuple[Any, Any] | None,
    on_epoch: EpochListener | None = None,
    accelerator: str = "cpu",
) -> TrialOutcome:
    """Trains ``job`` once with ``trial.config`` in this process, logging live to the trial's run;
    never raises for a failure inside the trial. ``on_epoch(trial_number, epoch, epochs, metrics)``
    hears each finished epoch (the terminal's progress display); ``accelerator`` is Lightning's
    (``cpu`` or ``gpu``: :class:`agent.execution.resources.TrialResources`)."""
    from agent.jobs.base import BenchmarkJob

    if isinstance(job, BenchmarkJob):
        return run_benchmark_trial(study, trial, job, dataset)
    return train_config(
        job,
        dict(trial.config),
        trial.number,
        study.settings,
        dataset,
        split,
        study.kb.trial_logger(study.record, trial),
        pruning_state(study.settings, study.trials),
        on_epoch=on_epoch,
        accelerator=accelerator,
        scratch=trial_scratch(study.kb, study.record.study_id, trial.number),
    )


EpochListener = Callable[[int, int, int, Mapping[str, float]], None]


def _epoch_callback(number: int, on_epoch: EpochListener) -> Any:
    import lightning.pytorch as pl

    class EpochProgress(pl.Callback):
        def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
            if trainer.sanity_checking:
                return
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
            on_epoch(number, trainer.current_epoch + 1, int(trainer.max_epochs or 0), metrics)

    return EpochProgress()


def recording_logger() -> Any:
    """A Lightning logger that keeps what a trial logged, for a worker that cannot reach the store:
    the driver replays it into the trial's run (:func:`replay_logged`)."""
    from lightning.pytorch.loggers import Logger

    class RecordingLogger(Logger):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[tuple[str, Any, int | None]] = []

        @property
        def name(self) -> str:
            return "recording"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            items = params.items() if isinstance(params, Mapping) else vars(params).items()
            self.records.append(("params", {k: v for k, v in items if isinstance(v, (int, float, str, bool))}, None))

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            self.records.append(("metrics", {k: float(v) for k, v in metrics.items()}, step))

    return RecordingLogger()


def forwarding_logger(send: Callable[[tuple[Any, ...]], None], known: set[str]) -> Any:
    """A Lightning logger that sends what a trial logs to the study's process (the trial process,
    :mod:`agent.execution.trial_process`), which writes it to the trial's run; ``known``: the
    parameters written as the trial began."""
    from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
    from lightning.pytorch.loggers import Logger

    def lightning_params(params: Mapping[str, Any]) -> dict[str, str]:
        """As Lightning's MLflow logger writes hyperparameters: flattened, values as text cut at 250."""
        return {k: str(v)[:250] for k, v in _flatten_dict(_convert_params(dict(params))).items()}

    class ForwardingLogger(Logger):
        """What the trial logs, sent to the study's process (which writes it to the trial's run)."""

        @property
        def name(self) -> str:
            return "forwarding"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            items = dict(params if isinstance(params, Mapping) else vars(params))
            extra = {k: v for k, v in items.items() if k not in known}  # the trial's own: written as it began
            if extra:
                send(("params", lightning_params(extra)))

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            values = {k: float(v) for k, v in metrics.items() if not isinstance(v, str)}
            send(("metrics", values, step, int(time.time() * 1000)))  # stamped when logged, as in one process

        def finalize(self, status: str) -> None:
            send(("finalize", status))

    return ForwardingLogger()


def replay_logged(records: list[tuple[str, Any, int | None]], logger: Any) -> None:
    """Writes a :func:`recording_logger`'s records through ``logger`` (the trial's store logger)."""
    for kind, payload, step in records:
        if kind == "params":
            logger.log_hyperparams(payload)
        else:
            logger.log_metrics(payload, step)
    logger.finalize("success")


def train_config(
    job: Any,
    config: dict[str, Any],
    number: int,
    settings: Any,
    dataset: Any,
    split: tuple[Any, Any] | None,
    logger: Any,
    pruning: PruningState | None = None,
    on_epoch: EpochListener | None = None,
    keep: list[Any] | None = None,
    accelerator: str = "cpu",
    scratch: Path | None = None,
) -> TrialOutcome:
    """One real ``Trainer.fit`` of ``job`` on ``config`` (trial slot ``number``), logging to
    ``logger`` and stopped early when ``pruning`` says so; what goes wrong inside is the outcome,
    never raised. Runs in the study's process or in a parallel worker (:mod:`agent.execution.workers`).
    ``keep`` (a list) receives the trained ``(module, datamodule)``. ``scratch``: the trial's
    checkpoint folder (:mod:`agent.execution.checkpoints`): written after every epoch, and continued
    from when it holds a checkpoint of this configuration."""
    if getattr(job, "runs_script", False):  # a user's LightningCLI script: each trial in a process of its own
        from agent.execution.cli_trial import run_cli_trial

        return run_cli_trial(
            job, config, settings, logger, pruning, on_epoch, scratch, number, trial_seed(settings, number)
        )
    import lightning.pytorch as pl

    quiet_lightning()
    seed = trial_seed(settings, number)
    pl.seed_everything(seed, workers=False, verbose=False)
    guard = _guard_callback(settings.time_limit)
    callbacks = _callbacks(job, guard, pruning, number, on_epoch)
    point = _checkpointing(scratch, config, seed, int(settings.epochs), callbacks)
    start = time.perf_counter()
    split = split if split is not None else _own_split(job)
    try:
        module, datamodule = job.build(config, dataset, split[0], split[1], seed)
        trainer, fit_wall = _fit(
            job, config, module, datamodule, settings.epochs, accelerator, logger, callbacks, point, scratch is not None
        )
        if keep is not None:
            keep.append((module, datamodule))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        failed = TrialOutcome(None, f"{type(exc).__name__}: {message}"[:500], time.perf_counter() - start)
        failed.resumed_from, failed.note = point.epoch, point.note
        return failed
    fit_seconds = time.perf_counter() - start
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
    metrics["n_params"] = float(sum(p.numel() for p in module.parameters() if p.requires_grad))
    metrics["fit_seconds"] = fit_wall  # ALWAYS_REPORTED (agent.jobs.base)
    outcome = _fit_outcome(settings.metric, metrics, fit_seconds, guard.reason, pruning, _required(settings))
    outcome.resumed_from, outcome.note = point.epoch, point.note
    if scratch is not None and not outcome.reason and wants_model(scratch, outcome.value):
        outcome.note = _save_model(job, scratch, module, datamodule, dataset, split[1], callbacks) or outcome.note
    return outcome


def _own_split(job: Any) -> tuple[None, None]:
    """A job whose DataModule splits its own data (a user's project) is given no split."""
    assert getattr(job, "owns_data", False), "a training job needs its train/validation split"
    return None, None


def _fit(
    job: Any,
    config: dict[str, Any],
    module: Any,
    datamodule: Any,
    epochs: int,
    accelerator: str,
    logger: Any,
    callbacks: list[Any],
    point: ResumePoint,
    checkpointing: bool,
) -> tuple[Any, float]:
    """``Trainer.fit`` of ``module`` from ``point``: the trainer and the fit's wall seconds."""
    options = getattr(job, "trainer_options", None)
    trainer = _trainer(
        epochs,
        accelerator,
        logger,
        callbacks,
        checkpointing=checkpointing,
        options=options(config) if callable(options) else None,
    )
    fit_start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule, ckpt_path=point.checkpoint)
    return trainer, time.perf_counter() - fit_start


def _callbacks(
    job: Any, guard: Any, pruning: PruningState | None, number: int, on_epoch: EpochListener | None
) -> list[Any]:
    """A trial's callbacks: the guard, the pruner's, the progress display's and the job's own (a
    user's project: a few input rows for a kept model's signature)."""
    callbacks = [guard] + ([pruning_callback(pruning)] if pruning is not None else [])
    if on_epoch is not None:
        callbacks.append(_epoch_callback(number, on_epoch))
    own = getattr(job, "trial_callbacks", None)
    return callbacks + (own() if callable(own) else [])


def _save_model(
    job: Any, scratch: Path, module: Any, datamodule: Any, dataset: Any, val_idx: Any, callbacks: list[Any]
) -> str:
    """Saves the trained model in the trial's scratch for the study to keep (a user's project:
    its LightningModule as it is); a by-product: one that cannot be saved comes back as one line
    (the trial keeps its value), else what the job's saving said ('' when all went well)."""
    own_save = getattr(job, "save_model", None)
    try:
        if callable(own_save):
            return str(own_save(scratch / SERVED, module, callbacks, scratch / CHECKPOINT) or "")
        save_served(scratch, module, datamodule, dataset, val_idx)
        return ""
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"model not kept ({type(exc).__name__}: {reason[:300]})"


def _trainer(
    epochs: int,
    accelerator: str,
    logger: Any,
    callbacks: list[Any],
    checkpointing: bool,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """A trial's ``Trainer``: quiet, no sanity steps, metrics logged every step; ``options`` (a
    user's project's ``--trainer`` and ``trainer.*`` values) set what else they name."""
    import lightning.pytorch as pl

    kwargs: dict[str, Any] = {
        "accelerator": accelerator,
        "devices": 1,
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
    }
    kwargs.update(options or {})
    return pl.Trainer(
        **kwargs,
        max_epochs=epochs,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=checkpointing,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _checkpointing(scratch: Path | None, config: dict[str, Any], seed: int, epochs: int, callbacks: list[Any]) -> Any:
    """Where the fit starts (:class:`ResumePoint`); with a ``scratch`` folder, the callbacks that
    checkpoint it there join ``callbacks``."""
    if scratch is None:
        return ResumePoint()
    point = resume_point(scratch, config, seed, epochs)
    describe(scratch, config, seed)
    callbacks += checkpoint_callbacks(scratch)
    if wants_model(scratch, None, asked=True):
        from agent.knowledge import warm_model_saving

        warm_model_saving()  # MLflow's first save costs seconds: begun while this trial trains
    return point


def trial_seed(settings: Any, number: int) -> int:
    """The seed of trial slot ``number``: its initialisation, shuffling and dropout."""
    return int(settings.seed) * 1009 + number
