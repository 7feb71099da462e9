"""Reads a YAHPO Gym surrogate scenario (model.onnx + config_space.json + encoding.json).

YAHPO Gym (Pfisterer, Schneider, Moosbauer, Binder & Bischl, 2022, "YAHPO Gym - An Efficient
Multi-Objective Multi-Fidelity Benchmark for Hyperparameter Optimization") ships, per scenario, an
ONNX surrogate fitted on real learning curves. This module owns turning such a folder into an
instance list, fixed fidelities, our :class:`agent.space.SearchSpace` and a batched ``evaluate``; it
reads the ONNX file directly with onnxruntime instead of depending on the ``yahpo-gym`` package (whose
pins clash with the rest of the stack, see /work/shared/benchmarks/yahpo/README.md).

The three files do not say in which order the model takes its inputs, what its outputs are, or which
parameters are fidelities: a :class:`~agent.data.yahpo_scenarios.ScenarioDescriptor` does. It comes
from the caller, from ``descriptor.json`` in the folder, or from the built-in facts of yahpo-gym's
scenarios (:data:`~agent.data.yahpo_scenarios.BUILTIN`, keyed by folder name); without one the folder
is refused rather than guessed (a wrong column order either crashes onnxruntime or, worse, returns
plausible wrong numbers). The descriptor is checked against config_space.json, encoding.json and the
model's input and output widths.

Inputs are fed the way yahpo-gym feeds them: ``x_cont`` float32 raw values in ``cont_names`` order,
``x_cat`` int32 codes from encoding.json in ``cat_names`` order; an inactive (conditional) numeric is
fed as 0 and an inactive categorical as the code of ``#na#``. All fidelities are fixed, by default at
their full value, and left out of the tunable space.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from agent.data.yahpo_scenarios import BUILTIN, NA, ScenarioDescriptor, check_known_ranges
from agent.data.yahpo_space import parse_conditions, parse_param, with_condition
from agent.errors import TuneAgentError
from agent.space import Categorical, Float, Int, Param, SearchSpace

__all__ = ["BUILTIN", "ScenarioDescriptor", "YahpoScenario", "DESCRIPTOR_FILE"]

DESCRIPTOR_FILE = "descriptor.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneAgentError(f"YAHPO scenario file {path} is missing") from None
    except (OSError, ValueError) as exc:
        raise TuneAgentError(f"YAHPO scenario file {path} is unreadable: {exc}") from None


def _code_key(value: Any) -> str:
    """The encoding.json key of a categorical value (integral numbers without a trailing .0)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _resolve_descriptor(folder: Path, given: ScenarioDescriptor | Mapping[str, Any] | None) -> ScenarioDescriptor:
    if given is not None:
        return _same_order(
            folder, given if isinstance(given, ScenarioDescriptor) else ScenarioDescriptor.from_mapping(given)
        )
    path = folder / DESCRIPTOR_FILE
    if path.is_file():
        return _same_order(folder, ScenarioDescriptor.from_json(path))
    if folder.name in BUILTIN:
        return BUILTIN[folder.name]
    raise TuneAgentError(
        f"YAHPO scenario {folder.name!r} has no descriptor: add {path} (cont_names, cat_names, targets, "
        f"fidelities, instance_name, maximize, default_target) or pass descriptor=; built in: {', '.join(BUILTIN)}"
    )


def _same_order(folder: Path, d: ScenarioDescriptor) -> ScenarioDescriptor:
    """A descriptor for a scenario yahpo-gym knows must list its columns in yahpo-gym's order: two
    same-typed columns swapped pass every check of the files and return plausible wrong values (an
    lcbench descriptor with two numeric columns swapped was off by up to 0.45 in mmce)."""
    known = BUILTIN.get(folder.name)
    if known is None:
        return d
    for field in ("cont_names", "cat_names", "targets"):
        mine, theirs = tuple(getattr(d, field)), tuple(getattr(known, field))
        if mine != theirs and sorted(mine) == sorted(theirs):
            raise TuneAgentError(
                f"descriptor of YAHPO scenario {folder.name!r} lists its {field} in another order than "
                f"yahpo-gym's ({', '.join(theirs)}); the ONNX model takes them in that order: fix it, or "
                f"remove {DESCRIPTOR_FILE} to use the built-in one"
            )
    return d


class YahpoScenario:
    """A YAHPO scenario: instances, fixed fidelities, the tunable space and a batched surrogate."""

    def __init__(
        self,
        folder: Path,
        session: Any,
        params: dict[str, Param],
        encoding: dict[str, dict],
        descriptor: ScenarioDescriptor,
    ) -> None:
        d = descriptor
        self.folder = folder
        self.descriptor = d
        self._session = session
        self._encoding = encoding
        self._params = params
        self.instance_name = d.instance_name
        self.cont_names = list(d.cont_names)
        self.cat_names = list(d.cat_names)
        self.targets = list(d.targets)
        self.fidelities: dict[str, float] = dict(d.fidelities)
        self.fidelity = d.primary_fidelity  # kept for callers of the one-fidelity API
        self.fidelity_max = self.fidelities.get(self.fidelity) if self.fidelity else None
        self.default_target = d.default_target
        self.maximize = d.is_maximized(d.default_target)
        if d.instance_name is None:
            self.instances = list(d.instances)
        else:
            self.instances = [str(c) for c in params[d.instance_name].choices]  # type: ignore[union-attr]
        self._fixed = {n for n in (d.instance_name,) if n} | set(d.fidelities) | set(d.drop_predict)
        self.space = self._build_space(params)

    # -- loading --------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        folder: Path | str,
        targets: Sequence[str] | ScenarioDescriptor | None = None,
        cont_names: Sequence[str] | None = None,
        descriptor: ScenarioDescriptor | Mapping[str, Any] | None = None,
    ) -> YahpoScenario:
        """Reads a scenario folder; raises :class:`TuneAgentError` on missing, corrupt or undescribed files.

        The descriptor is ``descriptor`` (also accepted as the second positional argument), else
        ``folder/descriptor.json``, else the built-in one for the folder's name. ``targets`` and
        ``cont_names`` override those of the descriptor (and are validated like it).
        """
        if isinstance(targets, ScenarioDescriptor):
            targets, descriptor = None, targets
        folder = Path(folder)
        if not folder.is_dir():
            raise TuneAgentError(f"YAHPO scenario folder {folder} does not exist")
        raw_space = _read_json(folder / "config_space.json")
        encoding = _read_json(folder / "encoding.json")
        if not isinstance(encoding, dict) or not all(isinstance(v, dict) for v in encoding.values()):
            raise TuneAgentError(f"{folder / 'encoding.json'} must map each categorical to its codes")
        try:
            conditions = parse_conditions(raw_space.get("conditions", []))
            params = {p.name: p for p in map(parse_param, raw_space["hyperparameters"])}
        except (KeyError, TypeError, AttributeError) as exc:
            raise TuneAgentError(f"{folder / 'config_space.json'} is not a ConfigSpace file: {exc}") from None
        unknown = sorted(set(conditions) - set(params))
        if unknown:
            raise TuneAgentError(f"{folder / 'config_space.json'} has conditions on unknown parameters {unknown}")
        params = {n: with_condition(p, conditions.get(n)) for n, p in params.items()}
        check_known_ranges(folder, params)
        d = _resolve_descriptor(folder, descriptor)
        if targets is not None or cont_names is not None:
            d = _override(d, targets, cont_names)
        _validate(folder, d, params, encoding)
        session = _open_session(folder / "model.onnx", d)
        return cls(folder, session, params, encoding, d)

    def _build_space(self, params: dict[str, Param]) -> SearchSpace:
        """Tunable parameters: categoricals (the usual condition parents) in x_cat order, then numerics
        in x_cont order; parents are moved before their children."""
        order = [n for n in self.cat_names + self.cont_names if n not in self._fixed]
        placed: list[str] = []
        while order:
            for i, name in enumerate(order):
                cond = params[name].condition
                if cond is None or cond.parent in placed:
                    placed.append(order.pop(i))
                    break
                if cond.parent not in order:
                    raise TuneAgentError(
                        f"{name!r} is conditional on {cond.parent!r}, which is not tunable "
                        f"in scenario {self.folder.name!r}"
                    )
            else:
                raise TuneAgentError(f"conditions of scenario {self.folder.name!r} form a cycle among {order}")
        return SearchSpace([params[n] for n in placed])

    # -- evaluation -----------------------------------------------------------------------------
    def fidelity_values(self, fidelity: Mapping[str, float] | None = None) -> dict[str, float]:
        """The fidelities to evaluate at: the full values, overridden by ``fidelity``."""
        values = dict(self.fidelities)
        if fidelity is not None and not isinstance(fidelity, Mapping):
            raise TuneAgentError(f"fidelity must map fidelity names to values, got {fidelity!r}")
        for name, value in (fidelity or {}).items():
            if name not in values:
                raise TuneAgentError(
                    f"{name!r} is not a fidelity of scenario {self.folder.name!r}; "
                    f"fidelities: {', '.join(values) or 'none'}"
                )
            if not self._params[name].contains(value):
                raise TuneAgentError(f"fidelity {name}={value!r} is outside config_space.json's range")
            values[name] = value
        return values

    def features(
        self, instance: str, configs: Sequence[Mapping[str, Any]], fidelity: Mapping[str, float] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The model's inputs: ``x_cont`` float32 `n x c` (raw values) and ``x_cat`` int32 `n x k`.

        ``configs`` hold values of the tunable parameters (validated against :attr:`space`); a config
        may also set a fidelity for itself. Inactive numerics are fed as 0, inactive categoricals as
        the ``#na#`` code, as yahpo-gym does.
        """
        if str(instance) not in self.instances:
            raise TuneAgentError(f"unknown instance {instance!r} of scenario {self.folder.name!r}")
        fixed: dict[str, Any] = self.fidelity_values(fidelity)
        if self.instance_name is not None:
            fixed[self.instance_name] = str(instance)
        x_cont = np.zeros((len(configs), len(self.cont_names)), dtype=np.float32)
        x_cat = np.zeros((len(configs), len(self.cat_names)), dtype=np.int32)
        for i, config in enumerate(configs):
            own = {k: v for k, v in config.items() if k in self.fidelities}
            tunable = {k: v for k, v in config.items() if k not in self.fidelities}
            self._check(tunable)
            if own:
                self.fidelity_values(own)  # validates them
            row = {**fixed, **own, **tunable}
            x_cont[i] = [float(row[n]) if n in row else 0.0 for n in self.cont_names]
            x_cat[i] = [self._code(n, row[n] if n in row else NA) for n in self.cat_names]
        return x_cont, x_cat

    def _check(self, config: Mapping[str, Any]) -> None:
        """Like :meth:`SearchSpace.validate`, but floats may sit a hair outside their bounds (a
        config_space.json bound such as 0.00010000000000000009 for 1e-4 should not refuse 1e-4)."""
        unknown = set(config) - set(self.space.names)
        if unknown:
            raise TuneAgentError(
                f"unknown parameters {sorted(unknown)} for scenario {self.folder.name!r}; "
                f"tunable: {', '.join(self.space.names)}"
            )
        for p in self.space.params:
            active = self.space.is_active(p, config)
            if active != (p.name in config):
                state = "missing" if active else "set but inactive"
                raise TuneAgentError(f"parameter {p.name!r} is {state} in configuration {dict(config)}")
            if not active or p.contains(config[p.name]):
                continue
            v = config[p.name]
            slack = 1e-9 * max(abs(p.low), abs(p.high)) if isinstance(p, Float) else 0.0
            if not (isinstance(p, Float) and isinstance(v, (int, float)) and p.low - slack <= v <= p.high + slack):
                raise TuneAgentError(f"value {v!r} is outside parameter {p.name!r}")

    def _code(self, name: str, value: Any) -> int:
        code = self._encoding[name].get(_code_key(value))
        if code is None:
            raise TuneAgentError(f"value {value!r} of {name!r} has no code in {self.folder / 'encoding.json'}")
        return int(code)

    def predict(
        self,
        instance: str,
        configs: Sequence[Mapping[str, Any]] | np.ndarray,
        fidelity: Mapping[str, float] | None = None,
    ) -> np.ndarray:
        """All surrogate outputs (`n x len(targets)`, columns in :attr:`targets` order)."""
        if isinstance(configs, np.ndarray):
            configs = [self.space.decode(u) for u in np.atleast_2d(configs)] if configs.size else []
        if len(configs) == 0:
            if str(instance) not in self.instances:
                raise TuneAgentError(f"unknown instance {instance!r} of scenario {self.folder.name!r}")
            return np.empty((0, len(self.targets)))
        x_cont, x_cat = self.features(instance, configs, fidelity)
        out = self._session.run(None, {"x_cont": x_cont, "x_cat": x_cat})[0]
        return np.asarray(out, dtype=float)

    def evaluate(
        self,
        instance: str,
        configs: Sequence[Mapping[str, Any]] | np.ndarray,
        target: str | None = None,
        fidelity: Mapping[str, float] | None = None,
        *,
        fidelity_value: float | None = None,
    ) -> np.ndarray:
        """Surrogate ``target`` (`n`; default :attr:`default_target`) of configurations (dicts, or
        `n x d` points of the unit cube), at full fidelity unless ``fidelity`` overrides some values.
        ``fidelity_value`` is shorthand for ``fidelity={primary fidelity: value}``."""
        target = self.default_target if target is None else target
        if target not in self.targets:
            raise TuneAgentError(f"unknown target {target!r}; choose from {', '.join(self.targets)}")
        if fidelity_value is not None:
            if self.fidelity is None:
                raise TuneAgentError(f"scenario {self.folder.name!r} has no fidelity")
            fidelity = {**(fidelity or {}), self.fidelity: fidelity_value}
        return self.predict(instance, configs, fidelity)[:, self.targets.index(target)]

    def is_maximized(self, target: str | None = None) -> bool:
        return self.descriptor.is_maximized(self.default_target if target is None else target)

    def __repr__(self) -> str:
        return f"YahpoScenario({self.folder.name}, {len(self.instances)} instances, {self.space})"


def _override(
    d: ScenarioDescriptor, targets: Sequence[str] | None, cont_names: Sequence[str] | None
) -> ScenarioDescriptor:
    changes: dict[str, Any] = {}
    if cont_names is not None:
        changes["cont_names"] = tuple(cont_names)
    if targets is not None:
        targets = tuple(targets)
        if d.default_target not in targets:
            raise TuneAgentError(f"targets {list(targets)} leave out the default target {d.default_target!r}")
        changes.update(
            targets=targets,
            maximize=tuple(t for t in d.maximize if t in targets),
            runtime_name=d.runtime_name if d.runtime_name in targets else None,
        )
    return replace(d, **changes)


def _validate(folder: Path, d: ScenarioDescriptor, params: Mapping[str, Param], encoding: Mapping[str, dict]) -> None:
    """Refuses a descriptor that does not fit config_space.json and encoding.json."""
    where = f"descriptor of YAHPO scenario {folder.name!r} does not match its files"
    columns = d.cont_names + d.cat_names
    absent = [n for n in columns + d.drop_predict if n not in params]
    if absent:
        raise TuneAgentError(f"{where}: {absent} are not in config_space.json")
    uncovered = [n for n in params if n not in columns and n not in d.drop_predict]
    if uncovered:
        raise TuneAgentError(
            f"{where}: config_space.json parameters {uncovered} are in neither cont_names nor cat_names"
        )
    not_numeric = [n for n in d.cont_names if isinstance(params[n], Categorical)]
    if not_numeric:
        raise TuneAgentError(f"{where}: cont_names {not_numeric} are categorical in config_space.json")
    clash = [n for n in d.cont_names if n in encoding]
    if clash:
        raise TuneAgentError(
            f"{where}: cont_names {clash} have codes in encoding.json, so the model takes them in x_cat"
        )
    for name in d.cat_names:
        p = params[name]
        if name not in encoding:
            raise TuneAgentError(f"{where}: categorical {name!r} has no codes in encoding.json")
        if isinstance(p, Categorical):
            values: Sequence[Any] = p.choices
        elif isinstance(p, Int) and p.high - p.low <= 10_000:
            values = range(p.low, p.high + 1)
        else:
            raise TuneAgentError(f"{where}: {name!r} in cat_names is a float in config_space.json")
        missing = [v for v in values if _code_key(v) not in encoding[name]]
        if missing:
            raise TuneAgentError(f"{where}: values {missing[:5]} of {name!r} have no code in encoding.json")
        if p.condition is not None and NA not in encoding[name]:
            raise TuneAgentError(f"{where}: conditional {name!r} has no {NA!r} code for when it is inactive")
    if d.instance_name is not None and not isinstance(params[d.instance_name], Categorical):
        raise TuneAgentError(f"{where}: instance {d.instance_name!r} is not categorical in config_space.json")
    for name, value in d.fidelities.items():
        if not params[name].contains(value):
            raise TuneAgentError(
                f"{where}: full value {value!r} of fidelity {name!r} is outside config_space.json's range"
            )


def _open_session(path: Path, d: ScenarioDescriptor) -> Any:
    """One single-threaded onnxruntime session (benchmark workers run in parallel), checked against ``d``."""
    import onnxruntime as ort

    if not path.is_file():
        raise TuneAgentError(f"YAHPO scenario file {path} is missing")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise TuneAgentError(f"cannot load ONNX model {path}: {str(exc).splitlines()[0]}") from None
    inputs = {i.name: i.shape for i in session.get_inputs()}
    if set(inputs) != {"x_cont", "x_cat"}:
        raise TuneAgentError(f"ONNX model {path} has inputs {sorted(inputs)}, expected x_cont and x_cat")
    widths = {"x_cont": len(d.cont_names), "x_cat": len(d.cat_names), session.get_outputs()[0].name: len(d.targets)}
    shapes = {**inputs, session.get_outputs()[0].name: session.get_outputs()[0].shape}
    for name, width in widths.items():
        shape = shapes[name]
        if len(shape) == 2 and isinstance(shape[1], int) and shape[1] != width:
            what = "targets" if name not in inputs else "cont_names" if name == "x_cont" else "cat_names"
            raise TuneAgentError(
                f"ONNX model {path}: {name} has {shape[1]} columns but the descriptor's {what} name {width}"
            )
    return session
