"""Checking a space against the user's classes, and a starter space from a class's signature.

A key of the space file (``model.lr``) must be an argument of the class's ``__init__`` (the
LightningModule's, the DataModule's or ``lightning.pytorch.Trainer``'s); one that is not is one line
naming the closest argument. A class whose ``__init__`` takes ``**kwargs`` takes any name.
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from agent.errors import SpaceError

# Trainer arguments that tune-agent sets for every trial: a space or --trainer may not set them
OWNED_TRAINER_ARGS = {
    "max_epochs": "--epochs",
    "logger": "tune-agent's logger (every trial is an MLflow run)",
    "callbacks": "tune-agent's callbacks (reporting, pruning, checkpoints)",
    "enable_checkpointing": "tune-agent's checkpoints (resume, kept models)",
    "enable_progress_bar": "tune-agent's progress lines",
    "enable_model_summary": "tune-agent's output",
}


def init_parameters(cls: type) -> tuple[dict[str, inspect.Parameter], bool]:
    """``(named parameters of cls.__init__ without self, whether it takes **kwargs)``."""
    try:
        signature = inspect.signature(getattr(cls, "__init__"))  # noqa: B009 - a class's, not an instance's
    except (TypeError, ValueError):
        return {}, True
    named, var = {}, False
    for name, p in signature.parameters.items():
        if name == "self" or p.kind is p.VAR_POSITIONAL:
            continue
        if p.kind is p.VAR_KEYWORD:
            var = True
            continue
        named[name] = p
    return named, var


def check_arguments(keys: Iterable[str], target: str, cls: type, where: str) -> None:
    """Each dotted key under ``target`` names an ``__init__`` argument of ``cls``, else one line."""
    named, var = init_parameters(cls)
    check_names(keys, target, list(named), var, f"{cls.__module__}.{cls.__qualname__}", where)


def check_names(keys: Iterable[str], target: str, names: list[str], var: bool, label: str, where: str) -> None:
    """:func:`check_arguments` against known argument ``names`` (``var``: it takes ``**kwargs``)."""
    for key in keys:
        head, _, rest = key.partition(".")
        if head != target:
            continue
        name = rest.split(".")[0]
        if target == "trainer" and name in OWNED_TRAINER_ARGS:
            raise SpaceError(f"{where}: {key} is set by tune-agent ({OWNED_TRAINER_ARGS[name]})")
        if name in names or var:
            continue
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"; did you mean {target}.{close[0]}?" if close else f"; its arguments: {', '.join(names) or 'none'}"
        raise SpaceError(f"{where}: {key} is not an argument of {label}.__init__{hint}")


def required_missing(cls: type, given: Iterable[str], target: str) -> list[str]:
    """Arguments of ``cls.__init__`` without a default that ``given`` (top-level names) lacks."""
    named, _ = init_parameters(cls)
    given = set(given)
    return [
        f"{target}.{n}"
        for n, p in named.items()
        if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD and n not in given
    ]


def starter_space(cls: type, target: str) -> str:
    """A space file (YAML text) for ``cls``: a range around each numeric default, the choices of a
    ``Literal`` or a bool; arguments it cannot guess a range for are listed as comments."""
    named, _ = init_parameters(cls)
    hints = _hints(cls)
    lines = [f"# search space for {cls.__module__}.{cls.__qualname__} (made by tune-agent space --from)", ""]
    skipped = []
    for name, p in named.items():
        key = f"{target}.{name}"
        entry = _entry(p.default, hints.get(name))
        if entry is None:
            shown = "no default" if p.default is inspect.Parameter.empty else f"default {p.default!r}"
            skipped.append(f"#   {key}: {shown}")
        else:
            lines.append(f"{key}: {entry}")
    if skipped:
        lines += ["", "# not tuned (no range to guess; add one, or give a value under fixed:):", *skipped]
    return "\n".join(lines) + "\n"


def _hints(cls: type) -> Mapping[str, Any]:
    try:
        return typing.get_type_hints(getattr(cls, "__init__"))  # noqa: B009 - a class's, not an instance's
    except Exception:
        return {}


def _entry(default: Any, hint: Any) -> str | None:
    choices = _literal_choices(hint)
    if choices:
        return "[" + ", ".join(_yaml(c) for c in choices) + "]"
    if isinstance(default, bool) or hint is bool:
        return "[true, false]"
    if isinstance(default, int) and default > 0:
        low, high = max(1, default // 4), default * 4
        log = ", log: true" if high / low >= 16 else ""
        return f"{{type: int, low: {low}, high: {high}{log}}}"
    if isinstance(default, float):
        if 0 < default < 1 and default <= 0.5:  # a rate or a probability
            if default <= 0.05:
                return f"{{type: float, low: {default / 10:.3g}, high: {min(default * 10, 1.0):.3g}, log: true}}"
            return f"{{type: float, low: 0.0, high: {min(2 * default, 0.95):.3g}}}"
        if default > 0:
            return f"{{type: float, low: {default / 10:.3g}, high: {default * 10:.3g}, log: true}}"
    return None


def _literal_choices(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return ()


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if not isinstance(value, str) else value
