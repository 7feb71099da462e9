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

import warnings

import lightning.pytorch as pl
import numpy as np

from agent.api import create_study, load_study
from agent.execution.pruning import Pruner, PruningState, curve_metrics, study_curves
from agent.execution.trial import quiet_lightning
from agent.tuning.study import TrialHandle

__all__ = ["TuneAgentCallback", "create_study", "load_study", "open_study", "quiet_lightning"]

# BoTorch/GPyTorch's torch.jit deprecation notices are tune-agent's business, not the script's.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")


open_study = load_study  # its earlier name: a stored study by name, to go on after a crash


class TuneAgentCallback(pl.Callback):
    """Reports a trial's per-epoch metrics, sets its objective (the study's metric after the last
    validation epoch) and, when the study has a pruner, stops the training early as ``tune-agent
    start --pruner`` would, against the curves the study's finished trials left."""

    def __init__(self, trial: TrialHandle) -> None:
        self.trial = trial
        settings = trial.study.settings
        self.metric = settings.metric
        self._pruning: PruningState | None = None
        self._pruner = getattr(settings, "pruner", "none")
        self._sign = settings.sign

    def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if self._pruner != "none":
            self._pruning = PruningState(
                Pruner(self._pruner),
                self.metric,
                self._sign,
                int(trainer.max_epochs or 1),
                study_curves(self.trial.study.trials()),
            )

    def on_validation_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
        self.trial.metrics.update({f"final_{k}": v for k, v in metrics.items()})
        value = metrics.get(self.metric)
        if value is None:
            return
        self.trial.value = value
        if self._pruning is not None:
            if self._pruning.observe(trainer.current_epoch + 1, value):
                self.trial.pruned = self._pruning.reason
                trainer.should_stop = True
            self.trial.metrics.update(curve_metrics(self._pruning.curve))
