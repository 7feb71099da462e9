"""``--config FILE.yaml``: a study's option values from a file (``start`` and ``create``)."""

from __future__ import annotations

from typing import Any

import click

from agent.errors import TuneAgentError

# top-level keys of a LightningCLI config (python main.py fit --config base.yaml)
LIGHTNING_SECTIONS = ("trainer", "model", "data", "seed_everything", "optimizer", "lr_scheduler", "ckpt_path")


def load_config_file(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--config FILE.yaml`` (repeatable): option defaults from a file whose keys are the option
    names; flags given on the command line (or in the environment) still win. A LightningCLI config
    (``trainer:``/``model:``/``data:`` sections) is kept for ``--cli``'s script instead."""
    files = [value] if isinstance(value, str) else list(value or ())
    for path in files:
        _load_one(ctx, path)
    return value


def _load_one(ctx: click.Context, value: str) -> None:
    import yaml

    from agent.cli.project_options import CLI_CONFIGS

    try:
        data = yaml.safe_load(open(value, encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TuneAgentError(f"cannot read --config {value}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise TuneAgentError(f"--config {value} must hold a mapping of option names to values")
    if _is_lightning_config(data):
        ctx.meta.setdefault(CLI_CONFIGS, []).append(value)
        return
    params = {p.name: p for p in ctx.command.params if p.name and p.name != "config"}
    # a key is the option's name as on the command line (metric, constraint) or its Python name
    names = {o.lstrip("-").replace("-", "_"): p.name for p in params.values() for o in p.opts if o.startswith("--")}
    names.update({name: name for name in params})
    settings: dict[str, Any] = {}
    for key, item in data.items():
        name = names.get(str(key).replace("-", "_"))
        if name is None:
            raise TuneAgentError(
                f"--config {value}: unknown option {str(key)!r}; options are {', '.join(sorted(names))}"
            )
        multiple = getattr(params[name], "multiple", False)
        settings[name] = [item] if multiple and not isinstance(item, (list, tuple)) else item
    ctx.default_map = {**(ctx.default_map or {}), **settings}


def _is_lightning_config(data: dict[str, Any]) -> bool:
    """A LightningCLI config: a trainer/model/data section that is a mapping, or seed_everything."""
    if "seed_everything" in data or "lr_scheduler" in data or "optimizer" in data:
        return True
    return any(isinstance(data.get(key), dict) for key in ("trainer", "model", "data"))
