"""Option values that need more than click's types: ``--keep-models K|all``, ``--fidelity NAME=NUMBER``."""

from __future__ import annotations

from typing import Any

import click

from agent.config import KEEP_ALL
from agent.errors import TuneAgentError


class KeepModels(click.ParamType):
    """``--keep-models``: a count of at least 0, or ``all``."""

    name = "K|all"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        if str(value).strip().lower() == "all":
            return KEEP_ALL
        try:
            count = int(str(value))
        except ValueError:
            count = -2
        if count < 0:
            self.fail(f"{value!r} is neither a count of at least 0 nor 'all'", param, ctx)
        return count


def fidelity_values(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise TuneAgentError(f"--fidelity takes NAME=NUMBER, got {item!r}") from None
        if not sep or not name.strip():
            raise TuneAgentError(f"--fidelity takes NAME=NUMBER, got {item!r}")
    return out
