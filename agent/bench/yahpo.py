"""Reads a YAHPO Gym surrogate scenario (model.onnx + config_space.json + encoding.json).

YAHPO Gym (Pfisterer, Schneider, Moosbauer, Binder & Bischl, 2022, "YAHPO Gym - An Efficient
Multi-Objective Multi-Fidelity Benchmark for Hyperparameter Optimization") ships, per scenario, an
ONNX surrogate fitted on real learning curves. This module owns turning such a folder into an
instance list, a fidelity, our :class:`agent.space.SearchSpace` and a batched ``evaluate``; it reads
the ONNX file directly with onnxruntime instead of depending on the ``yahpo-gym`` package (whose pins
clash with the rest of the stack, see /work/shared/benchmarks/yahpo/README.md).

Two facts are not in the three files and come from YAHPO's per-scenario ``config.yaml``: the column
order of ``x_cont`` and the names of the outputs. :data:`KNOWN_LAYOUTS` holds them per scenario folder
name; other scenarios pass ``cont_names`` / ``targets`` to :meth:`YahpoScenario.load`. Without a layout
the order falls back to the fidelity first, then the numeric hyperparameters in config_space.json
order; note that for lcbench this fallback (alphabetical) does *not* match the model, whose columns
follow the LCBench data (Zimmer, Lindauer & Hutter, 2021, "Auto-PyTorch Tabular"): epoch, batch_size,
learning_rate, momentum, weight_decay, num_layers, max_units, max_dropout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agent.errors import TuneAgentError
from agent.space import Categorical, Condition, Float, Int, Param, SearchSpace

FIDELITY_NAMES = ("epoch", "epochs", "trainsize", "budget", "repl")


@dataclass(frozen=True)
class ScenarioLayout:
    """The parts of YAHPO's ``config.yaml`` a scenario folder does not carry."""

    cont_names: tuple[str, ...]  # columns of x_cont, in the model's order
    targets: tuple[str, ...]  # columns of the output, in the model's order


KNOWN_LAYOUTS: dict[str, ScenarioLayout] = {
    # lcbench: LCBench's column order; outputs as documented in the shared README.
    "lcbench": ScenarioLayout(
        cont_names=("epoch", "batch_size", "learning_rate", "momentum", "weight_decay",
                    "num_layers", "max_units", "max_dropout"),
        targets=("time", "val_accuracy", "val_cross_entropy", "val_balanced_accuracy",
                 "test_cross_entropy", "test_balanced_accuracy"),
    ),
}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneAgentError(f"YAHPO scenario file {path} is missing") from None
    except (OSError, ValueError) as exc:
        raise TuneAgentError(f"YAHPO scenario file {path} is unreadable: {exc}") from None


def _param(raw: Mapping[str, Any]) -> Param:
    """One ConfigSpace JSON hyperparameter as our parameter type."""
    kind, name = raw.get("type"), raw["name"]
    if kind == "uniform_float":
        return _float(name, float(raw["lower"]), float(raw["upper"]), bool(raw.get("log")))
    if kind == "uniform_int":
        return Int(name, int(raw["lower"]), int(raw["upper"]), log=bool(raw.get("log")))
    if kind in ("categorical", "ordinal"):
        return Categorical(name, tuple(raw.get("choices") or raw.get("sequence")))
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


def _conditions(raw: Sequence[Mapping[str, Any]]) -> dict[str, Condition]:
    """EqualsCondition / InCondition entries of config_space.json, keyed by child."""
    out: dict[str, Condition] = {}
    for c in raw:
        if c.get("type") == "EQ":
            out[c["child"]] = Condition(c["parent"], (c["value"],))
        elif c.get("type") == "IN":
            out[c["child"]] = Condition(c["parent"], tuple(c["values"]))
        else:
            raise TuneAgentError(f"unsupported condition type {c.get('type')!r} in config_space.json")
    return out


def _instance_name(encoding: Mapping[str, Any]) -> str:
    for name in encoding:
        if name.lower().endswith("task_id") or name.lower() in ("dataset", "task"):
            return name
    if not encoding:
        raise TuneAgentError("encoding.json names no categorical column")
    return next(iter(encoding))


class YahpoScenario:
    """A YAHPO scenario: instances, a fidelity, the tunable space and a batched surrogate."""

    def __init__(self, folder: Path, session: Any, params: dict[str, Param], encoding: dict[str, dict],
                 instance_name: str, fidelity: str, cont_names: Sequence[str], targets: Sequence[str]) -> None:
        self.folder = folder
        self._session = session
        self._encoding = encoding
        self.instance_name = instance_name
        self.fidelity = fidelity
        self.fidelity_max = params[fidelity].high  # type: ignore[union-attr]
        self.cont_names = list(cont_names)
        self.cat_names = list(encoding)  # x_cat columns, in encoding.json order
        self.targets = list(targets)
        self.instances = [str(c) for c in params[instance_name].choices]  # type: ignore[union-attr]
        self.space = self._build_space(params)

    # -- loading --------------------------------------------------------------------------------
    @classmethod
    def load(cls, folder: Path | str, targets: Sequence[str] | None = None,
             cont_names: Sequence[str] | None = None) -> YahpoScenario:
        """Reads a scenario folder; raises :class:`TuneAgentError` on missing or corrupt files."""
        folder = Path(folder)
        if not folder.is_dir():
            raise TuneAgentError(f"YAHPO scenario folder {folder} does not exist")
        raw_space = _read_json(folder / "config_space.json")
        encoding = _read_json(folder / "encoding.json")
        try:
            conditions = _conditions(raw_space.get("conditions", []))
            params = {p.name: p for p in map(_param, raw_space["hyperparameters"])}
            params = {n: _with_condition(p, conditions.get(n)) for n, p in params.items()}
        except (KeyError, TypeError, AttributeError) as exc:
            raise TuneAgentError(f"{folder / 'config_space.json'} is not a ConfigSpace file: {exc}") from None
        layout = KNOWN_LAYOUTS.get(folder.name)
        instance = _instance_name(encoding)
        fidelity = next((n for n in FIDELITY_NAMES if n in params), None)
        if instance not in params or fidelity is None:
            raise TuneAgentError(f"{folder} has no instance column {instance!r} or no fidelity parameter")
        numeric = [n for n, p in params.items() if not isinstance(p, Categorical)]
        cont = cont_names or (layout.cont_names if layout else [fidelity] + [n for n in numeric if n != fidelity])
        outs = targets or (layout.targets if layout else None)
        if outs is None:
            raise TuneAgentError(f"targets of scenario {folder.name!r} are unknown; pass them explicitly")
        session = _open_session(folder / "model.onnx")
        return cls(folder, session, params, encoding, instance, fidelity, cont, outs)

    def _build_space(self, params: dict[str, Param]) -> SearchSpace:
        """Tunable parameters: categoricals (usual condition parents) first, then x_cont order."""
        skip = {self.instance_name, self.fidelity}
        cats = [p for n, p in params.items() if isinstance(p, Categorical) and n not in skip]
        nums = [params[n] for n in self.cont_names if n not in skip]
        missing = set(params) - skip - {p.name for p in cats + nums}
        if missing or len(nums) != len(self.cont_names) - 1:
            raise TuneAgentError(f"x_cont columns {self.cont_names} do not match config_space.json")
        return SearchSpace(cats + nums)

    # -- evaluation -----------------------------------------------------------------------------
    def features(self, instance: str, configs: Sequence[Mapping[str, Any]],
                 fidelity_value: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The model's inputs: ``x_cont`` float32 `n x c` (raw values) and ``x_cat`` int32 `n x k`.

        Inactive numeric parameters are fed as 0 and inactive categoricals as code 0 (``#na#``).
        """
        if instance not in self.instances:
            raise TuneAgentError(f"unknown instance {instance!r} of scenario {self.folder.name!r}")
        fid = self.fidelity_max if fidelity_value is None else fidelity_value
        rows = [{**c, self.fidelity: fid, self.instance_name: instance} for c in configs]
        x_cont = np.array([[float(r.get(n, 0.0)) for n in self.cont_names] for r in rows], dtype=np.float32)
        x_cat = np.array([[self._encoding[n].get(str(r.get(n)), 0) for n in self.cat_names] for r in rows],
                         dtype=np.int32)
        return x_cont.reshape(len(rows), -1), x_cat.reshape(len(rows), -1)

    def evaluate(self, instance: str, configs: Sequence[Mapping[str, Any]] | np.ndarray,
                 fidelity_value: int | None = None, target: str = "val_accuracy") -> np.ndarray:
        """Surrogate ``target`` (`n`) of configurations (dicts, or `n x d` points of the unit cube)."""
        if target not in self.targets:
            raise TuneAgentError(f"unknown target {target!r}; choose from {', '.join(self.targets)}")
        if isinstance(configs, np.ndarray):
            configs = [self.space.decode(u) for u in np.atleast_2d(configs)]
        if len(configs) == 0:
            return np.empty(0)
        x_cont, x_cat = self.features(instance, configs, fidelity_value)
        out = self._session.run(None, {"x_cont": x_cont, "x_cat": x_cat})[0]
        return np.asarray(out[:, self.targets.index(target)], dtype=float)

    def __repr__(self) -> str:
        return f"YahpoScenario({self.folder.name}, {len(self.instances)} instances, {self.space})"


def _with_condition(p: Param, condition: Condition | None) -> Param:
    if condition is None:
        return p
    if isinstance(p, Categorical):
        return Categorical(p.name, p.choices, condition=condition)
    return type(p)(p.name, p.low, p.high, log=p.log, condition=condition)  # type: ignore[call-arg]


def _open_session(path: Path) -> Any:
    """One single-threaded onnxruntime session (benchmark workers run in parallel)."""
    import onnxruntime as ort

    if not path.is_file():
        raise TuneAgentError(f"YAHPO scenario file {path} is missing")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise TuneAgentError(f"cannot load ONNX model {path}: {str(exc).splitlines()[0]}") from None
    names = {i.name for i in session.get_inputs()}
    if names != {"x_cont", "x_cat"}:
        raise TuneAgentError(f"ONNX model {path} has inputs {sorted(names)}, expected x_cont and x_cat")
    return session
