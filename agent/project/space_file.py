"""The search-space file of a user's Lightning project: ``space.yaml`` to a :class:`SearchSpace`.

One key per tuned argument, named by where it goes (``model.lr`` to the LightningModule's
``__init__``, ``data.batch_size`` to the DataModule's, ``trainer.gradient_clip_val`` to the
``Trainer``)::

    model.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
    model.width: {type: int, low: 8, high: 128}
    model.optimizer: {type: categorical, choices: [adam, sgd]}
    model.momentum: {type: float, low: 0.0, high: 0.95, when: {model.optimizer: sgd}}
    data.batch_size: {type: int, low: 16, high: 128, log: true}
    model.activation: [relu, gelu]          # a list: a categorical
    fixed:                                  # arguments every trial gets as they are
      model.num_classes: 10

``when`` makes an argument active only where its parent (defined above it) takes the value, or one
of a list of values; an inactive argument is not passed, so its ``__init__`` default applies.
Everything wrong in the file is one line (:class:`~agent.errors.SpaceError`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import SpaceError
from agent.space import Categorical, Condition, Float, Int, SearchSpace

TARGETS = ("model", "data", "trainer")  # where an argument goes
RESERVED = ("fixed",)
TYPES = ("float", "int", "categorical")
FIELDS = {"type", "low", "high", "log", "choices", "when"}


@dataclass(frozen=True)
class SpaceFile:
    """A parsed space file: the tuned ``space`` and the ``fixed`` arguments, by dotted key."""

    space: SearchSpace
    fixed: Mapping[str, Any] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict)  # the file's mapping, as read (it travels in the job spec)


def read_space_file(path: str | Path, targets: tuple[str, ...] = TARGETS) -> SpaceFile:
    """Reads and checks ``path`` (YAML or JSON); one line for an unreadable or ill-formed file."""
    import yaml

    where = f"space file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpaceError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise SpaceError(f"{where} is not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    return parse_space(data, where, targets)


def parse_space(data: Any, where: str = "space", targets: tuple[str, ...] = TARGETS) -> SpaceFile:
    """The :class:`SpaceFile` of an already-loaded mapping (a space file's content)."""
    if not isinstance(data, Mapping) or not data:
        raise SpaceError(f"{where} must be a mapping of arguments to ranges, e.g. 'model.lr: {{type: float, ...}}'")
    fixed = data.get("fixed") or {}
    if not isinstance(fixed, Mapping):
        raise SpaceError(f"{where}: 'fixed' must be a mapping of arguments to values")
    for key in fixed:
        _check_key(str(key), where, targets)
    params = []
    for key, spec in data.items():
        if key in RESERVED:
            continue
        name = str(key)
        _check_key(name, where, targets)
        if name in fixed:
            raise SpaceError(f"{where}: {name} is both tuned and fixed")
        params.append(_param(name, spec, where))
    if not params:
        raise SpaceError(f"{where} tunes no argument")
    try:
        space = SearchSpace(params)
    except SpaceError as exc:
        raise SpaceError(f"{where}: {exc}") from None
    raw = {str(k): v for k, v in data.items()}
    return SpaceFile(space, {str(k): v for k, v in fixed.items()}, raw)


def _check_key(name: str, where: str, targets: tuple[str, ...]) -> None:
    head, dot, rest = name.partition(".")
    if not dot or head not in targets or not rest or "" in rest.split("."):
        raise SpaceError(f"{where}: key {name!r} must name an argument as {' or '.join(t + '.NAME' for t in targets)}")


def _param(name: str, spec: Any, where: str) -> Float | Int | Categorical:
    if isinstance(spec, list):
        spec = {"type": "categorical", "choices": spec}
    if not isinstance(spec, Mapping):
        raise SpaceError(f"{where}: {name} must be a mapping like {{type: float, low: 0.001, high: 0.1}} or a list")
    unknown = set(map(str, spec)) - FIELDS
    if unknown:
        raise SpaceError(
            f"{where}: {name} has unknown field(s) {', '.join(sorted(unknown))}; fields are {', '.join(sorted(FIELDS))}"
        )
    kind = spec.get("type", "categorical" if "choices" in spec else None)
    if kind not in TYPES:
        raise SpaceError(f"{where}: {name} needs type float, int or categorical, got {kind!r}")
    condition = _condition(name, spec.get("when"), where)
    try:
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise SpaceError(f"{where}: {name} needs a non-empty list of choices")
            if len({repr(c) for c in choices}) != len(choices):
                raise SpaceError(f"{where}: {name} lists a choice twice")
            return Categorical(name, tuple(choices), condition=condition)
        low, high = spec.get("low"), spec.get("high")
        for label, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SpaceError(f"{where}: {name} needs a numeric {label}, got {value!r}")
        log = spec.get("log", False)
        if not isinstance(log, bool):
            raise SpaceError(f"{where}: {name}'s log must be true or false, got {log!r}")
        if kind == "int":
            if float(low).is_integer() is False or float(high).is_integer() is False:  # type: ignore[arg-type]
                raise SpaceError(f"{where}: {name} is an int and needs whole low and high, got {low} and {high}")
            return Int(name, int(low), int(high), log=log, condition=condition)  # type: ignore[arg-type]
        return Float(name, float(low), float(high), log=log, condition=condition)  # type: ignore[arg-type]
    except SpaceError as exc:
        text = str(exc)
        raise SpaceError(text if text.startswith(where) else f"{where}: {text}") from None


def _condition(name: str, when: Any, where: str) -> Condition | None:
    if when is None:
        return None
    if not isinstance(when, Mapping) or len(when) != 1:
        raise SpaceError(f"{where}: {name}'s when must name one parent, e.g. when: {{model.optimizer: sgd}}")
    ((parent, values),) = when.items()
    values = tuple(values) if isinstance(values, list) else (values,)
    return Condition(str(parent), values)


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"lr": 0.1, "optim.momentum": 0.9}`` -> ``{"lr": 0.1, "optim": {"momentum": 0.9}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SpaceError(f"argument {key} sets a field of {part}, which is given a value too")
        node[parts[-1]] = value
    return out


def arguments(values: Mapping[str, Any], target: str) -> dict[str, Any]:
    """The ``__init__`` arguments of ``target`` (model, data or trainer) in ``values`` (dotted keys),
    nested where a key goes deeper than one level."""
    prefix = target + "."
    return nest({k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)})
