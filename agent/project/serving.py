"""A user's trained LightningModule as a study keeps it: MLflow's pytorch flavour, the Lightning
checkpoint beside it, and a pyfunc signature when ``forward`` takes one tensor.

``mlflow.pytorch.load_model(uri)`` gives the LightningModule back; where ``forward`` takes one
input tensor, the same model is also a pyfunc (``mlflow.pyfunc.load_model(uri).predict(rows)``)
whose signature and input example are rows of the trial's first training batch. A model whose
``forward`` takes anything else is kept in the pytorch flavour only, and the study says why once.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLE_ROWS = 5


def one_tensor_forward(model_cls: type) -> str:
    """'' when ``model_cls.forward`` takes exactly one input, else why a pyfunc cannot call it."""
    forward = getattr(model_cls, "forward", None)
    if forward is None:
        return f"{model_cls.__name__} has no forward()"
    try:
        params = list(inspect.signature(forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return f"{model_cls.__name__}.forward's signature cannot be read"
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = [p for p in params if p.kind is p.VAR_POSITIONAL]
    if len(required) == 1 or (not required and variadic):
        return ""
    names = ", ".join(p.name for p in params) or "nothing"
    return f"{model_cls.__name__}.forward takes ({names}), not one input tensor"


def first_rows(batch: Any) -> np.ndarray:
    """The first :data:`EXAMPLE_ROWS` inputs of a training batch (empty when it holds no tensor)."""
    from agent.project.sample import pick_tensors

    try:
        return pick_tensors(batch)[0][:EXAMPLE_ROWS].detach().cpu().numpy()
    except Exception:
        return np.zeros(0)


def example_catcher() -> Any:
    """A callback that keeps the first rows of the trial's first training batch's inputs."""
    import lightning.pytorch as pl

    class ExampleCatcher(pl.Callback):
        def __init__(self) -> None:
            self.example: np.ndarray | None = None

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if self.example is None:
                self.example = first_rows(batch)

    return ExampleCatcher()


def caught_example(callbacks: list[Any]) -> np.ndarray | None:
    for callback in callbacks:
        example = getattr(callback, "example", None)
        if isinstance(example, np.ndarray) and example.size:
            return example
    return None


def save_project_model(
    served: Path, module: Any, example: np.ndarray | None, why_not: str, checkpoint: Path | None = None
) -> str:
    """Saves ``module`` for the study to keep in ``served`` (see the module docstring), with the
    Lightning ``checkpoint`` file beside it. Returns one line when the pyfunc could not be made
    though ``forward`` looked right, else ''."""
    import torch

    from agent.knowledge import save_torch_model_files

    module.eval()
    outputs, note = None, ""
    if example is not None and not why_not:
        try:
            with torch.no_grad():
                out = module(torch.as_tensor(example))
            outputs = out.detach().cpu().numpy() if isinstance(out, torch.Tensor) else None
            if outputs is None:
                note = f"model kept without a pyfunc signature: forward returned {type(out).__name__}, not a tensor"
        except Exception as exc:
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
            note = f"model kept without a pyfunc signature: forward on the first batch's rows failed ({why})"
    extra = [str(checkpoint)] if checkpoint is not None and checkpoint.is_file() else []
    save_torch_model_files(served, module, example if outputs is not None else None, outputs, extra)
    return note
