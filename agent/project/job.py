"""A user's LightningModule and DataModule as a job, as they are (``--model/--data/--space``).

Each trial builds the user's classes with the trial's configuration as ``__init__`` arguments
(``model.lr`` to the LightningModule, ``data.batch_size`` to the DataModule, ``trainer.*`` to the
``Trainer``), plus the space file's ``fixed:`` values; nothing of the user's code changes. The
warm start measures a bounded sample of the DataModule's training loader
(:mod:`agent.project.sample`). The job's name is the LightningModule's dotted class name, so the
history of one model and space warm-starts its next study on another DataModule.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from agent.errors import JobError, SpaceError
from agent.project.signature import check_arguments, init_parameters, required_missing
from agent.project.space_file import SpaceFile, arguments, parse_space
from agent.project.spec import ProjectSpec

DEFAULT_METRIC = "val_loss"


def import_class(spec: str, what: str, path: str = "") -> type:
    """The class named by ``package.module:Class`` (or ``package.module.Class``); one line when
    it cannot be imported, or is not a class."""
    spec = str(spec).strip()
    module_name, colon, attr = spec.partition(":")
    if not colon:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise JobError(f"{what} {spec!r} must look like package.module:Class")
    for folder in (path, ""):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    import os

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise JobError(
            f"cannot import {what} {spec!r}: {exc} (looked on the Python path and in {here}; "
            "PYTHONPATH=DIR adds a folder)"
        ) from None
    except Exception as exc:
        raise JobError(f"importing {what} {spec!r} failed: {type(exc).__name__}: {_one_line(exc)}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise JobError(f"module {module_name!r} has no attribute {attr!r} ({what} {spec!r})")
        target = getattr(target, part)
    if not isinstance(target, type):
        raise JobError(f"{what} {spec!r} is a {type(target).__name__}, not a class")
    return target


def starter_file(source: str) -> str:
    """``tune-agent space --from``: the starter space file of a LightningModule or DataModule."""
    import lightning.pytorch as pl

    from agent.project.signature import starter_space

    cls = import_class(source, "--from")
    return starter_space(cls, "data" if issubclass(cls, pl.LightningDataModule) else "model")


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class ProjectJob:
    """The job of a LightningModule class and a DataModule class (see the module docstring).

    Built from a :class:`ProjectSpec`; pickled as that spec, so a trial process or a Ray worker
    imports the user's classes itself."""

    owns_data = True  # the DataModule loads and splits its data; the study's "dataset" is its sample
    metric = DEFAULT_METRIC
    mode = "min"

    def __init__(self, spec: ProjectSpec) -> None:
        import lightning.pytorch as pl

        self.spec = spec
        self.model_cls = import_class(spec.model, "--model", spec.path)
        if not issubclass(self.model_cls, pl.LightningModule):
            raise JobError(f"--model {spec.model}: {class_path(self.model_cls)} is not a LightningModule")
        self.data_cls: type | None = None
        if spec.data:
            self.data_cls = import_class(spec.data, "--data", spec.path)
            if not issubclass(self.data_cls, pl.LightningDataModule):
                raise JobError(f"--data {spec.data}: {class_path(self.data_cls)} is not a LightningDataModule")
        parsed = parse_space(
            spec.space, "space file", ("model", "data", "trainer") if self.data_cls else ("model", "trainer")
        )
        self.space, self.fixed = parsed.space, dict(parsed.fixed)
        check_project_arguments(parsed, self.model_cls, self.data_cls, dict(spec.trainer))
        self.name = class_path(self.model_cls)
        self.short_name = self.model_cls.__name__.lower()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.spec.text(),))

    def __repr__(self) -> str:
        return f"ProjectJob({self.name}, data={self.spec.data or '-'})"

    # -- the job protocol ------------------------------------------------------------------------
    def check_dataset(self, dataset: Any) -> None:
        return None

    def values(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Every argument of a trial: the fixed ones, then the configuration's."""
        return {**self.fixed, **dict(config)}

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray | None, val_idx: np.ndarray | None, seed: int
    ) -> tuple[Any, Any]:
        values = self.values(config)
        model = _construct(self.model_cls, arguments(values, "model"), "--model")
        data = _construct(self.data_cls, arguments(values, "data"), "--data") if self.data_cls else None
        return model, data

    def trainer_options(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The ``Trainer`` arguments of a trial: ``--trainer`` values, then fixed and tuned ``trainer.*``."""
        return {**dict(self.spec.trainer), **arguments(self.values(config), "trainer")}

    # -- what the warm start measures --------------------------------------------------------------
    def sample_config(self) -> dict[str, Any]:
        """The configuration the sample's DataModule is built with: each tuned argument at its
        ``__init__`` default where the space holds it, else at the space's centre."""
        centre = self.space.decode(np.full(self.space.dim, 0.5))
        out = dict(centre)
        for target, cls in (("model", self.model_cls), ("data", self.data_cls)):
            if cls is None:
                continue
            params = init_parameters(cls)[0]
            for key in list(out):
                head, _, rest = key.partition(".")
                if head == target and rest in params and params[rest].default is not inspect.Parameter.empty:
                    default = params[rest].default
                    try:
                        if self.space[key].contains(default):
                            out[key] = default
                    except KeyError:
                        pass
        return self.space.decode(self.space.encode(out)) if _valid(self.space, out) else centre

    def dataset(self, name: str = "", say: Callable[[str], None] = lambda _: None) -> Any:
        """The dataset the warm start measures: a bounded sample of the training loader, seeded."""
        from agent.project.sample import as_dataset, sample_loader

        values = self.values(self.sample_config())
        if self.data_cls is not None:
            owner = _construct(self.data_cls, arguments(values, "data"), "--data")
        else:  # a LightningModule with loaders of its own
            owner = _construct(self.model_cls, arguments(values, "model"), "--model")
        loader = _train_loader(owner, self.spec.data or self.spec.model)
        _seed(0)
        sample = sample_loader(loader)
        return as_dataset(sample, name or self.dataset_name(), say)

    def dataset_source(self) -> str:
        """The class whose training loader the sample comes from."""
        return (self.data_cls or self.model_cls).__name__

    def dataset_name(self) -> str:
        """``--dataset-name``, else the DataModule's class name with its fixed arguments."""
        if self.spec.dataset_name:
            return self.spec.dataset_name
        cls = self.data_cls or self.model_cls
        fixed = {k.partition(".")[2]: v for k, v in self.fixed.items() if k.startswith("data.")}
        simple = "&".join(f"{k}={v}" for k, v in sorted(fixed.items()) if isinstance(v, (int, float, str, bool)))
        return cls.__name__ + (f"?{simple}" if simple else "")

    def serving_note(self) -> str:
        """Why a kept model of this job has no pyfunc flavour ('' when it has one)."""
        from agent.project.serving import one_tensor_forward

        return one_tensor_forward(self.model_cls)

    def trial_callbacks(self) -> list[Any]:
        """Callbacks a trial adds: one that keeps a few input rows for a kept model's signature."""
        from agent.project.serving import example_catcher

        return [example_catcher()]

    def save_model(self, served: Any, module: Any, callbacks: list[Any], checkpoint: Any = None) -> str:
        """Saves a trained model in ``served`` for the study to keep; one line when only part of it could be."""
        from agent.project.serving import caught_example, save_project_model

        return save_project_model(served, module, caught_example(callbacks), self.serving_note(), checkpoint)


def check_project_arguments(
    parsed: SpaceFile, model_cls: type, data_cls: type | None, trainer: Mapping[str, Any]
) -> None:
    """Every key names an argument of its class; every argument without a default is given."""
    keys = [*parsed.space.names, *parsed.fixed]
    check_arguments(keys, "model", model_cls, "space file")
    if data_cls is not None:
        check_arguments(keys, "data", data_cls, "space file")
    import lightning.pytorch as pl

    check_arguments(keys, "trainer", pl.Trainer, "space file")
    check_arguments([f"trainer.{k}" for k in trainer], "trainer", pl.Trainer, "--trainer")
    for target, cls in (("model", model_cls), ("data", data_cls)):
        if cls is None:
            continue
        given = {k.split(".")[1] for k in keys if k.startswith(target + ".")}
        missing = required_missing(cls, given, target)
        if missing:
            raise SpaceError(
                f"{class_path(cls)}.__init__ needs {', '.join(missing)}: tune it, or give it under fixed: "
                "in the space file"
            )


def _construct(cls: Any, kwargs: dict[str, Any], what: str) -> Any:
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise JobError(f"{what} {class_path(cls)}({', '.join(kwargs)}) failed: {_one_line(exc)}") from exc


def _train_loader(owner: Any, label: str) -> Any:
    for step in ("prepare_data", "setup"):
        hook = getattr(owner, step, None)
        if callable(hook):
            try:
                hook("fit") if step == "setup" else hook()
            except Exception as exc:
                raise JobError(f"{label}.{step}() failed: {type(exc).__name__}: {_one_line(exc)}") from None
    try:
        return owner.train_dataloader()
    except Exception as exc:
        raise JobError(f"{label}.train_dataloader() failed: {type(exc).__name__}: {_one_line(exc)}") from None


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _valid(space: Any, config: Mapping[str, Any]) -> bool:
    try:
        space.encode(config)
        return True
    except SpaceError:
        return False


def _rebuild(text: str) -> ProjectJob:
    return ProjectJob(ProjectSpec.parse(text))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."
