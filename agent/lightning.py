"""tune-agent inside your own Lightning training script.

    from agent.lightning import TuneAgentCallback, create_study

    study = create_study("my-study", dataset="wine", job="agent.jobs.examples:logistic", trials=8)  # agent.api
    while study.remaining() > 0:
        with study.trial() as trial:                       # asks; closes the trial when the block ends
            model = MyModule(**trial.config)               # your LightningModule, your data
            trainer = pl.Trainer(max_epochs=10, callbacks=[TuneAgentCallback(trial)], logger=trial.logger())
            trainer.fit(model, train_loader, val_loader)   # the callback reports the metric and prunes

The study is an ordinary tune-agent study: warm-started from the history when ``dataset`` is like
a historical one, logged to MLflow trial by trial, resumable by name (:func:`open_study`), shown
by ``tune-agent history`` / ``best`` and the MLflow UI. ``job`` names the search space, the metric
and its direction (a built-in job, or ``package.module:attr`` of your own); your script does the
training.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import lightning.pytorch as pl

from agent.api import create_study, load_study
from agent.execution.checkpoints import describe, wants_model
from agent.execution.pruning import PruningState, curve_metrics, study_curves
from agent.execution.trial import quiet_lightning
from agent.execution.trial_callback import TrialCallback, save_model
from agent.tuning.scratch import CHECKPOINT
from agent.tuning.study import TrialHandle

__all__ = ["TuneAgentCallback", "create_study", "load_study", "open_study", "quiet_lightning"]

# BoTorch/GPyTorch's torch.jit deprecation notices are tune-agent's business, not the script's.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")


open_study = load_study  # its earlier name: a stored study by name, to go on after a crash


class TuneAgentCallback(TrialCallback):
    """Reports a trial's per-epoch metrics, sets its objective (the study's metric after the last
    validation epoch) and, when the study has a pruner, stops the training early as ``tune-agent
    start --pruner`` would, against the curves the study's finished trials left.

    When the study keeps models (``keep_models``, the best 3 by default), a trial that ranks
    saves its trained module when the fit ends: MLflow's pytorch flavour with the Lightning
    checkpoint, and a pyfunc signature from the first batch's inputs when ``forward`` takes one
    tensor; the study keeps it on the trial's run, as ``tune-agent start`` does.

    It also checkpoints the trial after every validation epoch into ``trial.checkpoint_dir``
    (``checkpoint=False`` turns that off): when the script is killed, the re-run of the slot gets
    the same configuration and ``trial.resume_from``, to pass as ``trainer.fit(...,
    ckpt_path=trial.resume_from)``; the pruner's curve and torch's random state come back with it
    (your data loaders' shuffling order is yours). What it shares with the LightningCLI callback
    is :class:`~agent.execution.trial_callback.TrialCallback`'s; it reports to the trial handle."""

    def __init__(self, trial: TrialHandle, checkpoint: bool = True) -> None:
        settings = trial.study.settings
        super().__init__(settings.metric)
        self.trial = trial
        self._pruner = getattr(settings, "pruner", "none")
        self._sign = settings.sign
        self._checkpoint = checkpoint

    def checkpoint_file(self) -> Path | None:
        """The trial's ``checkpoint_dir``'s ``last.ckpt``, or None when checkpointing is off."""
        return self.trial.checkpoint_dir / CHECKPOINT if self._checkpoint else None

    def report_epoch(self, trainer: pl.Trainer, epoch: int, metrics: dict[str, float]) -> None:
        """Sets the trial's metrics and value, and its pruning reason when the pruner stops it."""
        self.trial.metrics.update({f"final_{k}": v for k, v in metrics.items()})
        value = metrics.get(self.metric)
        if value is None:
            return
        self.trial.value = value
        if self.pruning is not None:
            reason = self.prune(trainer, epoch, value)
            if reason:
                self.trial.pruned = reason
            self.trial.metrics.update(curve_metrics(self.pruning.curve))

    def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self._pruner != "none":
            self.pruning = PruningState.named(
                self._pruner,
                self.metric,
                self._sign,
                int(trainer.max_epochs or 1),
                study_curves(self.trial.study.trials()),
            )
            self.restore_curve()
        if self._checkpoint:
            describe(self.trial.checkpoint_dir, self.trial.config, 0)

    def on_fit_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        """Saves the trained model where the study asked for it (its best ``keep_models``);
        the study keeps it on the trial's run when the trial ends."""
        folder = self.trial.checkpoint_dir
        if self.trial.pruned or not wants_model(folder, self.trial.value):
            return
        note = save_model(folder, module, self.example)
        if note:
            sys.stderr.write(f"trial {self.trial.number}: {note}\n")
