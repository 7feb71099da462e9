"""Search spaces: typed, optionally conditional parameters and their unit-cube encoding.

Every parameter owns one dimension of the unit cube ``[0, 1]^d``. Floats map linearly (or in log
space); integers and categoricals split their dimension into equal bins, so any point of the cube
decodes to a valid configuration and :meth:`SearchSpace.snap` moves it to the centre of its bin.
A conditional parameter is *active* only when its parent takes one of the listed values; inactive
dimensions encode to ``INACTIVE`` so two configurations of the same structure stay comparable, and
:meth:`SearchSpace.active_mask` tells kernels (the arc kernel of paper 002) which dimensions count.

We keep this small module rather than wrapping ConfigSpace: BO needs exactly one cube dimension per
parameter with bin-centred integers, and the conversion layer would be larger than this file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent.errors import SpaceError

INACTIVE = 0.5


@dataclass(frozen=True)
class Condition:
    """Makes a parameter active only when ``parent`` takes one of ``values``."""

    parent: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Float:
    name: str
    low: float
    high: float
    log: bool = False
    condition: Condition | None = None
    kind: str = field(default="float", init=False)

    def __post_init__(self) -> None:
        _check_range(self.name, self.low, self.high, self.log)

    def to_unit(self, value: Any) -> float:
        lo, hi, v = _scaled(self.low, self.high, float(value), self.log)
        return float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))

    def from_unit(self, u: float) -> float:
        lo, hi, _ = _scaled(self.low, self.high, self.low, self.log)
        v = lo + float(np.clip(u, 0.0, 1.0)) * (hi - lo)
        # exp(log(high)) can land an ulp above high: clip so decode always stays in the space.
        return float(np.clip(math.exp(v) if self.log else v, self.low, self.high))

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and self.low <= float(value) <= self.high


@dataclass(frozen=True)
class Int:
    name: str
    low: int
    high: int
    log: bool = False
    condition: Condition | None = None
    kind: str = field(default="int", init=False)

    def __post_init__(self) -> None:
        _check_range(self.name, self.low, self.high, self.log)

    def _edges(self) -> tuple[float, float]:
        # Each integer owns an equal slice of [low - 0.5, high + 0.5] (in log space if asked).
        lo, hi = self.low - 0.5, self.high + 0.5
        return (math.log(max(lo, 1e-12)), math.log(hi)) if self.log else (lo, hi)

    def to_unit(self, value: Any) -> float:
        lo, hi = self._edges()
        v = math.log(int(value)) if self.log else float(int(value))
        return float(np.clip((v - lo) / (hi - lo), 0.0, 1.0))

    def from_unit(self, u: float) -> int:
        lo, hi = self._edges()
        v = lo + float(np.clip(u, 0.0, 1.0)) * (hi - lo)
        return int(np.clip(round(math.exp(v) if self.log else v), self.low, self.high))

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer())
        ) and self.low <= int(value) <= self.high


@dataclass(frozen=True)
class Categorical:
    name: str
    choices: tuple[Any, ...]
    condition: Condition | None = None
    kind: str = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        if len(self.choices) < 1:
            raise SpaceError(f"parameter {self.name!r} has no choices")

    def to_unit(self, value: Any) -> float:
        return (self.choices.index(value) + 0.5) / len(self.choices)

    def from_unit(self, u: float) -> Any:
        i = min(int(float(np.clip(u, 0.0, 1.0)) * len(self.choices)), len(self.choices) - 1)
        return self.choices[i]

    def contains(self, value: Any) -> bool:
        return value in self.choices


Param = Float | Int | Categorical


def _check_range(name: str, low: float, high: float, log: bool) -> None:
    if not low < high:
        raise SpaceError(f"parameter {name!r} needs low < high, got [{low}, {high}]")
    if log and low <= 0:
        raise SpaceError(f"log-scaled parameter {name!r} needs low > 0, got {low}")


def _scaled(low: float, high: float, v: float, log: bool) -> tuple[float, float, float]:
    if log:
        return math.log(low), math.log(high), math.log(max(v, 1e-300))
    return low, high, v


@dataclass(frozen=True)
class SpaceMatch:
    """How another space's configurations map into this one: the parameters matched by name and
    type (their values clipped into this space's ranges) and the ones left unmatched."""

    matched: tuple[str, ...]
    unmatched: tuple[str, ...]

    def note(self, source: str) -> str:
        shown = ", ".join(self.matched)
        return (
            f"history of {source} shares {len(self.matched)} hyperparameters with this space ({shown}); "
            f"{len(self.unmatched)} others are left to this study's own trials"
        )


def _compatible(param: Any, value: Any) -> bool:
    if isinstance(param, Categorical):
        return value in param.choices
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return False
    return not isinstance(param, Int) or float(value).is_integer()


class SearchSpace:
    """An ordered set of parameters; dimension ``i`` of the cube belongs to ``params[i]``."""

    def __init__(self, params: Sequence[Param]) -> None:
        names = [p.name for p in params]
        if len(set(names)) != len(names):
            raise SpaceError(f"duplicate parameter names in {names}")
        position = {n: i for i, n in enumerate(names)}
        for i, p in enumerate(params):
            if p.condition is not None:
                parent = position.get(p.condition.parent)
                if parent is None or parent >= i:
                    raise SpaceError(
                        f"parameter {p.name!r} depends on {p.condition.parent!r}, which must be defined before it"
                    )
        self.params: tuple[Param, ...] = tuple(params)

    @property
    def dim(self) -> int:
        return len(self.params)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    # -- configurations <-> cube -------------------------------------------------------------
    def is_active(self, param: Param, config: Mapping[str, Any]) -> bool:
        cond = param.condition
        return cond is None or (cond.parent in config and config[cond.parent] in cond.values)

    def decode(self, u: Sequence[float] | np.ndarray) -> dict[str, Any]:
        """Maps a point of the cube (`d`) to the configuration of its active parameters."""
        point = np.asarray(u, dtype=float).reshape(-1)
        if point.shape[0] != self.dim:
            raise SpaceError(f"expected a point of dimension {self.dim}, got {point.shape[0]}")
        config: dict[str, Any] = {}
        for p, ui in zip(self.params, point):
            if self.is_active(p, config):
                config[p.name] = p.from_unit(float(ui))
        return config

    def encode(self, config: Mapping[str, Any]) -> np.ndarray:
        """Maps a configuration to the cube (`d`); inactive parameters encode to ``INACTIVE``."""
        self.validate(config)
        return np.array([p.to_unit(config[p.name]) if p.name in config else INACTIVE for p in self.params])

    def validate(self, config: Mapping[str, Any]) -> None:
        unknown = set(config) - set(self.names)
        if unknown:
            raise SpaceError(f"unknown parameters {sorted(unknown)}")
        for p in self.params:
            active = self.is_active(p, config)
            if active and p.name not in config:
                raise SpaceError(f"parameter {p.name!r} is missing")
            if not active and p.name in config:
                raise SpaceError(f"parameter {p.name!r} is set but inactive")
            if active and not p.contains(config[p.name]):
                raise SpaceError(f"value {config[p.name]!r} is outside parameter {p.name!r}")

    def snap(self, U: np.ndarray) -> np.ndarray:
        """Rounds points (`n x d`) to the configurations they decode to."""
        U = np.atleast_2d(np.asarray(U, dtype=float))
        if len(U) > 64:  # histories repeat configurations (a bootstrap shares one set): each distinct row once
            rows, inverse = np.unique(U, axis=0, return_inverse=True)
            return np.stack([self.encode(self.decode(u)) for u in rows])[inverse.reshape(-1)]
        return np.stack([self.encode(self.decode(u)) for u in U])

    def active_mask(self, U: np.ndarray) -> np.ndarray:
        """Boolean mask (`n x d`) of the dimensions active at each point."""
        U = np.atleast_2d(np.asarray(U, dtype=float))
        rows = []
        for u in U:
            config = self.decode(u)
            rows.append([p.name in config for p in self.params])
        return np.array(rows, dtype=bool)

    # -- other spaces' configurations ------------------------------------------------------------
    def match(self, configs: Iterable[Mapping[str, Any]]) -> SpaceMatch:
        """The parameters of this space that every one of ``configs`` (from another space) gives
        with a value of the right type (where the parameter is set at all)."""
        configs = list(configs)
        matched = []
        for p in self.params:
            values = [c[p.name] for c in configs if p.name in c]
            if values and all(_compatible(p, v) for v in values):
                matched.append(p.name)
        return SpaceMatch(tuple(matched), tuple(n for n in self.names if n not in matched))

    def translate(self, config: Mapping[str, Any], match: SpaceMatch) -> np.ndarray:
        """A cube point of this space for a configuration of another: matched values clipped into
        range, every other dimension at the cube's centre; snapped, so only what its values make
        active is set."""
        u = np.full(self.dim, INACTIVE)
        for i, p in enumerate(self.params):
            if p.name in match.matched and p.name in config:
                v = config[p.name]
                if isinstance(p, Categorical):
                    u[i] = p.to_unit(v)
                else:
                    u[i] = p.to_unit(min(max(v, p.low), p.high))
        return np.asarray(self.snap(u)[0])

    @property
    def has_conditions(self) -> bool:
        return any(p.condition is not None for p in self.params)

    # -- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> list[dict[str, Any]]:
        out = []
        for p in self.params:
            d = asdict(p)
            if p.condition is None:
                d.pop("condition")
            else:
                d["condition"] = {"parent": p.condition.parent, "values": list(p.condition.values)}
            if isinstance(p, Categorical):
                d["choices"] = list(p.choices)
            out.append(d)
        return out

    @classmethod
    def from_dict(cls, items: Iterable[Mapping[str, Any]]) -> SearchSpace:
        params: list[Param] = []
        for raw in items:
            d = dict(raw)
            kind = d.pop("kind", None)
            cond = d.pop("condition", None)
            condition = Condition(cond["parent"], tuple(cond["values"])) if cond else None
            try:
                if kind == "float":
                    params.append(Float(**d, condition=condition))
                elif kind == "int":
                    params.append(Int(**d, condition=condition))
                elif kind == "categorical":
                    params.append(Categorical(d["name"], tuple(d["choices"]), condition=condition))
                else:
                    raise SpaceError(f"unknown parameter kind {kind!r}")
            except TypeError as exc:
                raise SpaceError(f"bad parameter {raw!r}: {exc}") from None
        return cls(params)

    def signature(self) -> str:
        """A short stable hash of the space; studies can only resume on the same signature."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"SearchSpace({', '.join(self.names)})"
