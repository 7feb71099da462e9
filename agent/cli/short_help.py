"""A command whose ``--help`` fits on one screen: the options most studies use, each with a one-line
summary, then one line that names the others; ``--help-all`` shows every option with its full help, and
the reference page (docs/reference/cli.md) and the options table (docs/guide/options.md) list them all."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import click

ALL = "tune_agent.help_all"
_HELP_FLAGS = {"help": "Show this message and exit.", "help-all": "Show every option with its full help."}


class ShortHelp(click.Command):
    """A click command whose options named in ``common`` (long name without its dashes, e.g.
    ``"study-name"``, to a one-line summary) are shown by ``--help``, the rest named in a line."""

    def __init__(self, *args: Any, common: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.common = {**(common or {}), **_HELP_FLAGS}
        self.params.append(
            click.Option(
                ["--help-all"],
                is_flag=True,
                expose_value=False,
                is_eager=True,
                callback=_help_all,
                help="Show every option of this command with its help.",
            )
        )

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if ctx.meta.get(ALL):
            super().format_options(ctx, formatter)
            return
        shown, others = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or not isinstance(param, click.Option):
                continue
            summary = self._summary(param)
            if summary is None:
                others.append(param.opts[0])
            else:
                shown.append((_name(param, ctx), summary))
        with formatter.section("Options"):
            formatter.write_dl(shown, col_max=24)
        if others:
            width = max((formatter.width or 80) - formatter.current_indent - 2, 40)
            with formatter.section(f"{len(others)} more options (--help-all shows them)"):
                for line in textwrap.wrap(", ".join(others), width, break_on_hyphens=False):  # whole names
                    formatter.write(" " * formatter.current_indent + line + "\n")

    def _summary(self, param: click.Option) -> str | None:
        for name in param.opts:
            if name.lstrip("-") in self.common:
                return self.common[name.lstrip("-")]
        return None


def _name(param: click.Option, ctx: click.Context) -> str:
    """The option's names and, unless it is a flag or a choice (its summary names the choices), its
    metavar."""
    names = ", ".join(sorted(param.opts, key=len))
    if param.is_flag or isinstance(param.type, click.Choice):
        return names
    return f"{names} {param.make_metavar(ctx)}"


def _help_all(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[ALL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()
