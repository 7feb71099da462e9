"""What tune-agent learns from a LightningCLI script before tuning it, by running it once.

``tune-agent start --cli main.py`` runs the user's script (``fit``, its ``--config`` files) with
:class:`ProjectProbe` added as a callback through the CLI's own ``--trainer.callbacks+=``. When
the Trainer has set up the model and the data, the probe writes ``probe.json`` (the classes the CLI
built, their ``__init__`` arguments, the Trainer's, whether ``forward`` takes one tensor) and
``sample.npz`` (a bounded sample of the training loader, :mod:`agent.project.sample`), then ends
the process before any training. The user's code imports nothing from tune-agent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np

from agent.project.cli_job import PROBE, SAMPLE


def _arguments(cls: type) -> dict[str, Any]:
    from agent.project.signature import init_parameters

    named, var = init_parameters(cls)
    return {"names": list(named), "var": var, "path": f"{cls.__module__}.{cls.__qualname__}", "module": cls.__module__}


class ProjectProbe(pl.Callback):
    """Writes what the CLI built into ``folder`` and ends the process (see the module docstring)."""

    def __init__(self, folder: str, rows: int = 2000) -> None:
        self.folder, self.rows = Path(folder), int(rows)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from agent.project.sample import sample_loader
        from agent.project.serving import one_tensor_forward

        datamodule = getattr(trainer, "datamodule", None)
        owner = datamodule if datamodule is not None else pl_module
        report: dict[str, Any] = {
            "model": _arguments(type(pl_module)),
            "data": _arguments(type(datamodule)) if datamodule is not None else None,
            "trainer": _arguments(pl.Trainer),
            "forward": one_tensor_forward(type(pl_module)),
        }
        try:
            import random

            import torch

            random.seed(0)
            np.random.seed(0)
            torch.manual_seed(0)
            sample = sample_loader(owner.train_dataloader(), self.rows)
            np.savez(self.folder / SAMPLE, X=sample.X, y=sample.y)
            report["note"] = sample.note
        except Exception as exc:
            report["sample_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        (self.folder / PROBE).write_text(json.dumps(report))
        os._exit(0)  # what was needed is written: no training, no teardown of the user's run
