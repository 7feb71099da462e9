"""A command whose ``--help`` fits in one's head: the options most studies use, then one line that
names the others; ``--help-all`` shows every option with its help, and the reference page
(docs/reference/cli.md) and the options table (docs/guide/options.md) list them all."""

from __future__ import annotations

from typing import Any

import click


class ShortHelp(click.Command):
    """A click command whose options named in ``common`` (long names without their dashes:
    ``"study-name"``) are shown by ``--help``, the rest named in a line."""

    def __init__(self, *args: Any, common: frozenset[str] = frozenset(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.common = common
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
        shown, others = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if ctx.meta.get(ALL) or not isinstance(param, click.Option) or self._common(param):
                shown.append(record)
            else:
                others.append(param.opts[0])
        with formatter.section("Options"):
            formatter.write_dl(shown)
        if others:
            import textwrap

            width = max((formatter.width or 80) - formatter.current_indent - 2, 40)
            with formatter.section(f"{len(others)} more options (--help-all shows them)"):
                for line in textwrap.wrap(", ".join(others), width, break_on_hyphens=False):  # whole names
                    formatter.write(" " * formatter.current_indent + line + "\n")

    def _common(self, param: click.Option) -> bool:
        names = {o.lstrip("-") for o in param.opts}
        return bool(names & (self.common | {"help", "help-all"}))


ALL = "tune_agent.help_all"


def _help_all(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[ALL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()
