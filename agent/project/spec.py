"""A user's Lightning project as a job spec: what a study stores to build its job again anywhere.

``tune-agent start --model/--data/--space`` and ``--cli/--config/--space`` become one text, stored
as the study's ``job`` setting, so ``resume``, a trial process and a Ray worker rebuild the same job
from it (:func:`agent.jobs.load_job`):

- ``lightning:{...}``: a LightningModule class and a DataModule class (``package.module:Class``),
  the space file's content, ``--trainer`` arguments, the dataset's name and the folder the classes
  were imported from;
- ``lightning-cli:{...}``: a LightningCLI script with its ``--config`` files, the space file's content,
  ``--trainer`` arguments and what the first probe of the script found (its classes' names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.errors import JobError

MODULE_PREFIX = "lightning:"
CLI_PREFIX = "lightning-cli:"


@dataclass(frozen=True)
class ProjectSpec:
    """What a project job is built from; :meth:`text` is the stored job setting."""

    space: Mapping[str, Any]
    model: str = ""  # package.module:Class (for a CLI: the class its probe found)
    data: str = ""
    trainer: Mapping[str, Any] = field(default_factory=dict)
    dataset_name: str = ""
    path: str = ""  # a folder put on sys.path before importing (the folder `start` ran in)
    script: str = ""  # a LightningCLI script (absolute path); empty for a module/DataModule project
    configs: tuple[str, ...] = ()  # its --config files (absolute paths)

    @property
    def is_cli(self) -> bool:
        return bool(self.script)

    def text(self) -> str:
        body = {k: v for k, v in asdict(self).items() if v not in ("", (), [], {}, None)}
        if "configs" in body:
            body["configs"] = list(body["configs"])
        # not sorted: the space's order is its meaning (a parent before the arguments it conditions)
        return (CLI_PREFIX if self.is_cli else MODULE_PREFIX) + json.dumps(body, default=str)

    @classmethod
    def parse(cls, text: str) -> ProjectSpec:
        prefix = CLI_PREFIX if text.startswith(CLI_PREFIX) else MODULE_PREFIX
        try:
            body = json.loads(text[len(prefix) :])
        except ValueError as exc:
            raise JobError(f"job spec {text[:60]!r}... is not a project spec: {exc}") from None
        if not isinstance(body, dict) or "space" not in body:
            raise JobError(f"job spec {text[:60]!r}... has no space")
        body["configs"] = tuple(body.get("configs", ()))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in body.items() if k in known})


def is_project_spec(text: str) -> bool:
    return text.startswith((MODULE_PREFIX, CLI_PREFIX))


def parse_trainer_options(items: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--trainer KEY=VALUE`` (repeatable) as Trainer arguments; values are read as YAML scalars
    (``devices=2`` an int, ``precision=bf16-mixed`` a string, ``deterministic=true`` a bool)."""
    import yaml

    from agent.errors import TuneAgentError
    from agent.project.signature import OWNED_TRAINER_ARGS

    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = str(item).partition("=")
        key = key.strip().removeprefix("trainer.")
        if not eq or not key:
            raise TuneAgentError(f"--trainer {item!r} must be KEY=VALUE, e.g. --trainer precision=bf16-mixed")
        if key in OWNED_TRAINER_ARGS:
            raise TuneAgentError(f"--trainer {key} is set by tune-agent ({OWNED_TRAINER_ARGS[key]})")
        try:
            out[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key] = value
    return out


def project_spec(
    *,
    space: str | Mapping[str, Any] | None,
    model: str | None = None,
    data: str | None = None,
    cli: str | None = None,
    configs: tuple[str, ...] | list[str] = (),
    trainer: Mapping[str, Any] | tuple[str, ...] | list[str] = (),
    dataset_name: str | None = None,
    path: str | None = None,
) -> str:
    """The job spec of a user's project, from ``start``'s options (or ``create_study``'s
    arguments): ``model`` (and ``data``) or ``cli`` (and ``configs``), with ``space`` a space
    file's path or its content. Refuses what cannot make a project in one line."""
    import os

    from agent.errors import TuneAgentError

    if cli and (model or data):
        raise TuneAgentError("give either --cli SCRIPT or --model/--data, not both")
    if not cli and not model:
        raise TuneAgentError("--data and --space need --model PACKAGE.MODULE:CLASS (or give --cli SCRIPT)")
    if space is None or space == "":
        raise TuneAgentError(
            f"{'--cli' if cli else '--model'} needs --space FILE: the arguments to tune and their ranges"
        )
    if configs and not cli:
        raise TuneAgentError("LightningCLI --config files need --cli SCRIPT")
    from agent.project.space_file import parse_space, read_space_file

    parsed = read_space_file(space) if isinstance(space, (str, os.PathLike)) else parse_space(space)
    options = dict(trainer) if isinstance(trainer, Mapping) else parse_trainer_options(tuple(trainer))
    here = path or os.getcwd()
    if cli:
        script = os.path.abspath(cli)
        if not os.path.isfile(script):
            raise TuneAgentError(f"--cli {cli}: no such file")
        spec = ProjectSpec(
            space=dict(parsed.raw),
            trainer=options,
            dataset_name=dataset_name or "",
            path=here,
            script=script,
            configs=tuple(os.path.abspath(c) for c in configs),
        )
    else:
        spec = ProjectSpec(
            space=dict(parsed.raw),
            model=str(model),
            data=str(data or ""),
            trainer=options,
            dataset_name=dataset_name or "",
            path=here,
        )
    return spec.text()
