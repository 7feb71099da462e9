"""A YAHPO scenario's ``config_space.json`` (ConfigSpace's JSON) as our :class:`agent.space.SearchSpace`:
parameters, log scales, and the conditions between them (simple, and the conjunctions YAHPO writes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from agent.errors import TuneAgentError
from agent.space import Categorical, Condition, Float, Int, Param


def parse_param(raw: Mapping[str, Any]) -> Param:
    """One ConfigSpace JSON hyperparameter as our parameter type."""
    kind, name = raw.get("type"), raw["name"]
    if kind == "uniform_float":
        return _float(name, float(raw["lower"]), float(raw["upper"]), bool(raw.get("log")))
    if kind == "uniform_int":
        return Int(name, int(raw["lower"]), int(raw["upper"]), log=bool(raw.get("log")))
    if kind in ("categorical", "ordinal"):
        return Categorical(name, tuple(cast(Sequence[Any], raw.get("choices") or raw.get("sequence"))))
    raise TuneAgentError(f"unsupported hyperparameter type {kind!r} for {name!r}")


def _float(name: str, low: float, high: float, log: bool) -> Float:
    """A float whose cube ends decode inside its bounds.

    In log space ``lo + 1.0 * (hi - lo)`` can round past ``hi`` (ConfigSpace's learning-rate upper
    bound 0.10000000000000002 decodes to 0.10000000000000006, which the space then rejects), so the
    bounds move inwards by a few ulps until both ends round-trip.
    """
    for _ in range(64):
        p = Float(name, low, high, log=log)
        top, bottom = p.from_unit(1.0), p.from_unit(0.0)
        if p.contains(top) and p.contains(bottom):
            return p
        high = high if p.contains(top) else float(np.nextafter(high, low))
        low = low if p.contains(bottom) else float(np.nextafter(low, high))
    raise TuneAgentError(f"float parameter {name!r} cannot be decoded within [{low}, {high}]")


def _simple_condition(c: Mapping[str, Any]) -> Condition:
    if c.get("type") == "EQ":
        return Condition(c["parent"], (c["value"],))
    if c.get("type") == "IN":
        return Condition(c["parent"], tuple(c["values"]))
    raise TuneAgentError(f"unsupported condition type {c.get('type')!r} in config_space.json")


def _implied(conds: Mapping[str, Condition], param: str, parent: str, values: Sequence[Any]) -> bool:
    """Whether ``param`` being active forces ``parent`` into ``values`` (through its chain of parents)."""
    seen: set[str] = set()
    cond = conds.get(param)
    while cond is not None and param not in seen:
        seen.add(param)
        if cond.parent == parent and set(cond.values) <= set(values):
            return True
        param, cond = cond.parent, conds.get(cond.parent)
    return False


def parse_conditions(raw: Sequence[Mapping[str, Any]]) -> dict[str, Condition]:
    """Conditions of config_space.json as one :class:`Condition` per child.

    EQ and IN map directly. An AND is accepted when one conjunct implies the others through the
    parents' own conditions (as in rbv2_super: ``svm.degree`` needs ``svm.kernel == polynomial`` and
    ``learner_id == svm``, and ``svm.kernel`` is itself active only for ``learner_id == svm``); then
    that conjunct alone decides activity. Anything else is refused.
    """
    out: dict[str, Condition] = {}
    pending: dict[str, list[Condition]] = {}
    for c in raw:
        if c.get("type") == "AND":
            pending[c["child"]] = [_simple_condition(x) for x in c.get("conditions", [])]
        else:
            out[c["child"]] = _simple_condition(c)
    while pending:
        progress = False
        for child, parts in list(pending.items()):
            for i, part in enumerate(parts):
                rest = parts[:i] + parts[i + 1 :]
                if all(_implied(out, part.parent, r.parent, r.values) for r in rest):
                    out[child] = part
                    del pending[child]
                    progress = True
                    break
        if not progress:
            child = next(iter(pending))
            raise TuneAgentError(
                f"unsupported AND condition on {child!r} in config_space.json (no conjunct implies the others)"
            )
    return out


def with_condition(p: Param, condition: Condition | None) -> Param:
    if condition is None:
        return p
    return dataclasses.replace(p, condition=condition)
