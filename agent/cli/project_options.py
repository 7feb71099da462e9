"""``start``/``create`` on a user's own Lightning project: the options, and the request they make.

``--model PKG.MOD:Class [--data PKG.MOD:Class] --space space.yaml`` tunes a LightningModule and a
DataModule as they are; ``--cli main.py --config base.yaml --space space.yaml`` runs a LightningCLI
script for each trial. Both become one job spec (:func:`agent.project.spec.project_spec`); the
dataset the study records is named by ``--dataset-name`` (default: the DataModule's class name).
"""

from __future__ import annotations

from typing import Any

import click

from agent.errors import TuneAgentError

CLI_CONFIGS = "tune_agent.cli_configs"  # ctx.meta: --config files that are LightningCLI configs

PROJECT_OPTIONS = [
    click.option("--model", default=None, metavar="PKG.MOD:CLASS", help="Your LightningModule class (with --space)."),
    click.option(
        "--data", default=None, metavar="PKG.MOD:CLASS", help="Your LightningDataModule class (with --model)."
    ),
    click.option(
        "--cli",
        default=None,
        metavar="SCRIPT",
        help="Your LightningCLI script, run for each trial (with --space; its --config files).",
    ),
    click.option(
        "--space",
        "space_file",
        default=None,
        metavar="FILE",
        help="YAML of the arguments to tune (model.lr: {type: float, low: 1e-4, high: 0.1}) and fixed: ones.",
    ),
    click.option(
        "--trainer",
        "trainer_options",
        multiple=True,
        metavar="KEY=VALUE",
        help="A Trainer argument for every trial of --model or --cli (repeatable), e.g. precision=bf16-mixed.",
    ),
    click.option(
        "--dataset-name", default=None, help="Name of your DataModule's data in the history [default: its class name]."
    ),
]


def project_request_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the project options turned into ``job`` (a project spec) and ``dataset``;
    the built-in form (``--dataset`` and ``--job``) passes through. One line for a mix-up."""
    model, data, cli = kwargs.pop("model", None), kwargs.pop("data", None), kwargs.pop("cli", None)
    space = kwargs.pop("space_file", None)
    trainer = tuple(kwargs.pop("trainer_options", ()) or ())
    dataset_name = kwargs.pop("dataset_name", None)
    ctx = click.get_current_context(silent=True)
    configs = list(ctx.meta.get(CLI_CONFIGS, [])) if ctx is not None else []
    own = any(v for v in (model, data, cli, space))
    if configs and not cli:
        raise TuneAgentError(
            f"--config {configs[0]} is a LightningCLI config (trainer/model/data sections): "
            "give its script with --cli main.py"
        )
    if not own:
        if trainer or dataset_name:
            raise TuneAgentError("--trainer and --dataset-name apply to your own project (--model or --cli)")
        missing = [
            name for name, value in (("--dataset", kwargs.get("dataset")), ("--job", kwargs.get("job"))) if not value
        ]
        if missing:
            raise TuneAgentError(
                f"missing {' and '.join(missing)}: tune a built-in job (--dataset D --job J), your LightningModule "
                "(--model PKG.MOD:Class --data PKG.MOD:Class --space space.yaml) or your LightningCLI script "
                "(--cli main.py --config base.yaml --space space.yaml)"
            )
        return kwargs
    for option, key in (("--job", "job"), ("--dataset", "dataset"), ("--label", "label")):
        if kwargs.get(key):
            raise TuneAgentError(
                f"{option} names a built-in job's input; your project's model and data come from "
                "--model/--data or --cli"
            )
    from agent.project.spec import project_spec

    kwargs["job"] = project_spec(
        space=space, model=model, data=data, cli=cli, configs=tuple(configs), trainer=trainer, dataset_name=dataset_name
    )
    kwargs["dataset"] = dataset_name or ""
    return kwargs


def project_options(fn: Any) -> Any:
    for option in reversed(PROJECT_OPTIONS):
        fn = option(fn)
    return fn
