"""A trial's checkpoint in scratch: where it lives, the callbacks that write it, and resuming from it.

Every Lightning trial writes ``last.ckpt`` (Lightning's ``ModelCheckpoint``, after each epoch:
weights, optimiser, loop and callback states, the data order's and dropout's random states) and
``trial.json`` (its configuration and seed) into its own folder under the study's scratch. A trial
killed mid-epoch that runs again with the same configuration and seed continues from the end of
the last epoch it finished; its final metric equals an uninterrupted run's (the random states
travel with the checkpoint). The study loop keeps the models it asks for from these files
(:mod:`agent.execution.keep`) and removes the folder when the trial ends; a killed trial's stays
for its re-run.

Scratch lies under the store's artifact root when that is a local folder (the embedded store's
``mlflow/artifacts/scratch``), otherwise under the system's temporary folder; the folder is per
study and trial slot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.tuning.scratch import CHECKPOINT, DESCRIPTION, clear, description


@dataclass(frozen=True)
class ResumePoint:
    """Where a trial's run starts: ``checkpoint`` (None: from epoch 0) after ``epoch`` epochs;
    ``note`` says why a checkpoint found was not used (one line), else empty."""

    checkpoint: Path | None = None
    epoch: int = 0
    note: str = ""


def resume_point(folder: Path, config: Mapping[str, Any], seed: int, epochs: int) -> ResumePoint:
    """The checkpoint a run of ``config`` with ``seed`` for ``epochs`` can continue from in
    ``folder``: one whose ``trial.json`` matches, whose file loads and that has epochs left (one of
    a finished fit holds no metrics to report). A corrupt one is removed and said in ``note``."""
    path = folder / CHECKPOINT
    if not path.is_file():
        return ResumePoint()
    try:
        described = json.loads((folder / DESCRIPTION).read_text())
    except (OSError, ValueError):
        described = None
    if described != description(config, seed):
        clear(folder)
        return ResumePoint()
    try:
        import torch

        epoch = int(torch.load(path, map_location="cpu", weights_only=False)["epoch"]) + 1
    except Exception as exc:
        clear(folder)
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:200]
        return ResumePoint(note=f"checkpoint {path} is unreadable ({reason}); the trial starts again from epoch 0")
    if epoch >= epochs:
        clear(folder)
        return ResumePoint()
    return ResumePoint(path, epoch)


def describe(folder: Path, config: Mapping[str, Any], seed: int) -> None:
    """Writes ``trial.json``: what a checkpoint in ``folder`` was trained with."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DESCRIPTION).write_text(json.dumps(description(config, seed)))


def checkpoint_callbacks(folder: Path) -> list[Any]:
    """Lightning's ``ModelCheckpoint`` writing ``last.ckpt`` in ``folder`` after every epoch, and a
    callback that puts the random states in the checkpoint and takes them back on resume."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    class RandomStates(pl.Callback):
        """The global torch generator (dropout) and the data module's shuffling generator, as they
        were when the checkpoint was written; set again as the next epoch starts (Lightning, when
        it resumes, may draw from them before that epoch's data order is drawn)."""

        def __init__(self) -> None:
            self.trainer: Any = None
            self.pending: dict[str, Any] | None = None

        def setup(self, trainer: Any, module: Any, stage: str) -> None:
            self.trainer = trainer

        def _generator(self) -> Any:
            return getattr(getattr(self.trainer, "datamodule", None), "generator", None)

        def state_dict(self) -> dict[str, Any]:
            import torch

            states: dict[str, Any] = {"torch": torch.get_rng_state()}
            if self._generator() is not None:
                states["data"] = self._generator().get_state()
            return states

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.pending = dict(state_dict)

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            if self.pending is None:
                return
            import torch

            torch.set_rng_state(self.pending["torch"])
            if self._generator() is not None and "data" in self.pending:
                self._generator().set_state(self.pending["data"])
            self.pending = None

    saver = ModelCheckpoint(
        dirpath=str(folder),
        filename=Path(CHECKPOINT).stem,
        monitor=None,
        save_top_k=1,
        every_n_epochs=1,
        save_on_train_epoch_end=False,  # after validation: what the epoch's metrics describe
        enable_version_counter=False,
    )
    return [RandomStates(), saver]


SERVED = "served"  # the trained model as kept (agent.knowledge.save_model_files), in the trial's scratch
KEEP = "keep.json"  # what the trial must beat for its model to be saved there (agent.execution.keep)


def request_keep(folder: Path, mode: str, beat: float | None) -> None:
    """Asks the trial training in ``folder`` to save its model when its value beats ``beat``
    (``mode`` min or max; None: whatever it reaches)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / KEEP).write_text(json.dumps({"mode": mode, "beat": beat}))


def wants_model(folder: Path | None, value: float | None, asked: bool = False) -> bool:
    """Whether a trial that reached ``value`` saves its model in ``folder`` (:func:`request_keep`);
    ``asked``: whether the study asked for it at all (before the trial has a value)."""
    if folder is None or (value is None and not asked):
        return False
    try:
        request = json.loads((folder / KEEP).read_text())
    except (OSError, ValueError):
        return False
    if value is None:
        return asked
    beat = request.get("beat")
    if beat is None:
        return True
    return value <= float(beat) if request.get("mode") == "min" else value >= float(beat)


def save_served(folder: Path, module: Any, datamodule: Any, dataset: Any, val_idx: Any) -> None:
    """The trained ``module`` as served (raw rows in, class probabilities out) saved in
    ``folder/served`` with an input example and its predictions, and its network."""
    from agent.jobs.serving import RawClassifier, serving_example, serving_model
    from agent.knowledge import save_model_files

    network = serving_model(module, datamodule)
    model = RawClassifier(network, getattr(dataset, "inputs", None), dataset.class_names)
    example = serving_example(dataset, val_idx)
    save_model_files(folder / SERVED, model, example, model.predict(example), network)
