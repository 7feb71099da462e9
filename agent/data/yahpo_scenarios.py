"""What a YAHPO Gym scenario folder does not say about its surrogate: the per-scenario descriptor.

A scenario folder (model.onnx + config_space.json + encoding.json) does not record the column order of
the model's inputs ``x_cont`` / ``x_cat``, the names of its outputs, which parameters are fidelities or
the instance. YAHPO Gym keeps these per scenario in its ``configs`` (``cont_names``, ``cat_names``,
``y_names``, ``y_minimize``, ``fidelity_params``, ``instance_names``, ``runtime_name``). A
:class:`ScenarioDescriptor` carries the same facts; :data:`BUILTIN` holds them for the scenarios of
yahpo-gym 1.0.2 (the PyPI release, which reads the yahpo_data v1.0 folders), and any other scenario
drops in with a ``descriptor.json`` beside its model (keys: the field names below).

Fidelities map to the value used for a full evaluation: the upper bound of the fidelity in the
scenario's config_space.json (yahpo_data v1.0: lcbench epoch 1..52, nb301 epoch 1..98, rbv2_*
trainsize 0.03/0.05..1 and repl 1..10, iaml_* trainsize 0.05..1). The default target is the one of
YAHPO's single-objective suite (benchmark_suites/v1.0/single.json: val_accuracy for lcbench and nb301,
acc for rbv2_*); iaml_* is not in that suite, its default here is mmce, the first y_name.

Sources: yahpo-gym 1.0.2 (``yahpo_gym/benchmarks/{lcbench,nb301,rbv2,iaml}.py``) for the names and
orders; yahpo_data v1.0 config_space.json files for the fidelity bounds. One deliberate deviation:
yahpo-gym 1.0.2 lists ``f1`` of rbv2_* as minimised, which is a slip (F1 is a score; iaml_* and later
yahpo-gym versions treat it as maximised), so here it counts as maximised.

Note that yahpo-gym's development version has a different rbv2_* layout (``repl`` a categorical input,
f1 and memory dropped) for newer surrogates; such a folder fails validation against these built-ins
(``repl`` appears in encoding.json) and needs its own descriptor.json.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from agent.errors import TuneAgentError

NA = "#na#"  # YAHPO's code name for an inactive (or missing) categorical value


@dataclass(frozen=True)
class ScenarioDescriptor:
    """The facts of one YAHPO scenario that its files do not carry.

    ``cont_names`` / ``cat_names`` are the columns of ``x_cont`` / ``x_cat`` in the model's order;
    ``targets`` the output columns in order; ``fidelities`` maps each fidelity parameter to its full
    value (first one = the primary fidelity); ``instance_name`` is the categorical naming the instance
    (``None`` when the scenario has a single implicit instance, listed in ``instances``); ``maximize``
    lists the targets that are maximised (the rest are minimised); ``drop_predict`` names
    config-space parameters that are not fed to the model.
    """

    cont_names: tuple[str, ...]
    cat_names: tuple[str, ...]
    targets: tuple[str, ...]
    fidelities: Mapping[str, float]
    instance_name: str | None
    maximize: tuple[str, ...]
    default_target: str
    runtime_name: str | None = None
    instances: tuple[str, ...] = ()
    drop_predict: tuple[str, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        for attr in ("cont_names", "cat_names", "targets", "maximize", "instances", "drop_predict"):
            value = getattr(self, attr)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise TuneAgentError(f"descriptor field {attr!r} must be a list of names, got {value!r}")
            object.__setattr__(self, attr, tuple(value))
        if not isinstance(self.fidelities, Mapping):
            raise TuneAgentError(
                f"descriptor field 'fidelities' must map names to full values, got {self.fidelities!r}"
            )
        fids = {str(k): v for k, v in self.fidelities.items()}
        for k, v in fids.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TuneAgentError(f"full value of fidelity {k!r} must be a number, got {v!r}")
        object.__setattr__(self, "fidelities", MappingProxyType(fids))
        self._check()

    def _check(self) -> None:
        columns = self.cont_names + self.cat_names
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            raise TuneAgentError(f"descriptor names model columns more than once: {dupes}")
        if not self.targets or len(set(self.targets)) != len(self.targets):
            raise TuneAgentError(f"descriptor targets must be distinct and non-empty, got {list(self.targets)}")
        if self.default_target not in self.targets:
            raise TuneAgentError(
                f"default_target {self.default_target!r} is not among the targets {list(self.targets)}"
            )
        if not set(self.maximize) <= set(self.targets):
            raise TuneAgentError(f"maximize names unknown targets {sorted(set(self.maximize) - set(self.targets))}")
        if self.runtime_name is not None and self.runtime_name not in self.targets:
            raise TuneAgentError(f"runtime_name {self.runtime_name!r} is not among the targets")
        outside = [f for f in self.fidelities if f not in columns]
        if outside:
            raise TuneAgentError(f"fidelities {outside} are not model columns (cont_names / cat_names)")
        if self.instance_name is None:
            if not self.instances:
                raise TuneAgentError("a descriptor without instance_name must list its instances")
        elif self.instance_name not in self.cat_names:
            raise TuneAgentError(f"instance_name {self.instance_name!r} is not in cat_names")
        if set(self.drop_predict) & set(columns):
            raise TuneAgentError(f"drop_predict names model columns: {sorted(set(self.drop_predict) & set(columns))}")

    def __hash__(self) -> int:  # fidelities is a mapping; hash its items
        return hash(
            (
                self.cont_names,
                self.cat_names,
                self.targets,
                tuple(self.fidelities.items()),
                self.instance_name,
                self.maximize,
                self.default_target,
                self.runtime_name,
                self.instances,
                self.drop_predict,
                self.name,
            )
        )

    def is_maximized(self, target: str) -> bool:
        return target in self.maximize

    @property
    def primary_fidelity(self) -> str | None:
        return next(iter(self.fidelities), None)

    # -- JSON ---------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], source: str = "descriptor") -> ScenarioDescriptor:
        if not isinstance(raw, Mapping):
            raise TuneAgentError(f"{source} must be a JSON object")
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise TuneAgentError(f"{source} has unknown keys {unknown}; known: {sorted(known)}")
        required = ("cont_names", "cat_names", "targets", "fidelities", "instance_name", "maximize", "default_target")
        missing = [k for k in required if k not in raw]
        if missing:
            raise TuneAgentError(f"{source} lacks {missing}")
        try:
            return cls(**dict(raw))
        except TuneAgentError as exc:
            raise TuneAgentError(f"{source}: {exc}") from None
        except TypeError as exc:
            raise TuneAgentError(f"{source} is malformed: {exc}") from None

    @classmethod
    def from_json(cls, path: Path | str) -> ScenarioDescriptor:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise TuneAgentError(f"descriptor file {path} is missing") from None
        except (OSError, ValueError) as exc:
            raise TuneAgentError(f"descriptor file {path} is unreadable: {exc}") from None
        return cls.from_mapping(raw, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return {k: (dict(v) if k == "fidelities" else list(v) if isinstance(v, tuple) else v) for k, v in out.items()}


# -- the facts of yahpo-gym 1.0.2 ---------------------------------------------------------------


def _rbv2(name: str, cont: tuple[str, ...], cat: tuple[str, ...]) -> ScenarioDescriptor:
    return ScenarioDescriptor(
        name=name,
        cont_names=cont + ("trainsize", "repl"),
        cat_names=("task_id",) + cat,
        targets=("acc", "bac", "auc", "brier", "f1", "logloss", "timetrain", "timepredict", "memory"),
        maximize=("acc", "bac", "auc", "f1"),
        default_target="acc",
        runtime_name="timetrain",
        fidelities={"trainsize": 1.0, "repl": 10},
        instance_name="task_id",
    )


def _iaml(name: str, cont: tuple[str, ...], cat: tuple[str, ...]) -> ScenarioDescriptor:
    return ScenarioDescriptor(
        name=name,
        cont_names=cont + ("trainsize",),
        cat_names=("task_id",) + cat,
        targets=(
            "mmce",
            "f1",
            "auc",
            "logloss",
            "ramtrain",
            "rammodel",
            "rampredict",
            "timetrain",
            "timepredict",
            "mec",
            "ias",
            "nf",
        ),
        maximize=("f1", "auc"),
        default_target="mmce",
        runtime_name="timetrain",
        fidelities={"trainsize": 1.0},
        instance_name="task_id",
    )


_XGB = (
    "nrounds",
    "eta",
    "gamma",
    "lambda",
    "alpha",
    "subsample",
    "max_depth",
    "min_child_weight",
    "colsample_bytree",
    "colsample_bylevel",
    "rate_drop",
    "skip_drop",
)
_NB301_EDGES = tuple(
    f"NetworkSelectorDatasetInfo_COLON_darts_COLON_edge_{cell}_{i}" for cell in ("normal", "reduce") for i in range(14)
)
_NB301_INPUTS = tuple(
    f"NetworkSelectorDatasetInfo_COLON_darts_COLON_inputs_node_{cell}_{i}"
    for cell in ("normal", "reduce")
    for i in (3, 4, 5)
)


def _prefixed(prefix: str, names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{prefix}.{n}" for n in names)


BUILTIN: dict[str, ScenarioDescriptor] = {
    d.name: d
    for d in (
        ScenarioDescriptor(
            name="lcbench",
            cont_names=(
                "epoch",
                "batch_size",
                "learning_rate",
                "momentum",
                "weight_decay",
                "num_layers",
                "max_units",
                "max_dropout",
            ),
            cat_names=("OpenML_task_id",),
            targets=(
                "time",
                "val_accuracy",
                "val_cross_entropy",
                "val_balanced_accuracy",
                "test_cross_entropy",
                "test_balanced_accuracy",
            ),
            maximize=("val_accuracy", "val_balanced_accuracy", "test_balanced_accuracy"),
            default_target="val_accuracy",
            runtime_name="time",
            fidelities={"epoch": 52},
            instance_name="OpenML_task_id",
        ),
        ScenarioDescriptor(
            name="nb301",
            cont_names=("epoch",),
            cat_names=_NB301_EDGES + _NB301_INPUTS,
            targets=("val_accuracy", "runtime"),
            maximize=("val_accuracy",),
            default_target="val_accuracy",
            runtime_name="runtime",
            fidelities={"epoch": 98},
            instance_name=None,
            instances=("CIFAR10",),
            drop_predict=("dataset",),
        ),
        _rbv2("rbv2_svm", ("cost", "gamma", "tolerance", "degree"), ("kernel", "num.impute.selected.cpo")),
        _rbv2(
            "rbv2_ranger",
            ("num.trees", "sample.fraction", "mtry.power", "min.node.size", "num.random.splits"),
            ("respect.unordered.factors", "splitrule", "num.impute.selected.cpo"),
        ),
        _rbv2("rbv2_rpart", ("cp", "maxdepth", "minbucket", "minsplit"), ("num.impute.selected.cpo",)),
        _rbv2("rbv2_glmnet", ("alpha", "s"), ("num.impute.selected.cpo",)),
        _rbv2("rbv2_xgboost", _XGB, ("booster", "num.impute.selected.cpo")),
        _rbv2("rbv2_aknn", ("k", "M", "ef", "ef_construction"), ("distance", "num.impute.selected.cpo")),
        _rbv2(
            "rbv2_super",
            _prefixed("svm", ("cost", "gamma", "tolerance", "degree"))
            + _prefixed("glmnet", ("alpha", "s"))
            + _prefixed("rpart", ("cp", "maxdepth", "minbucket", "minsplit"))
            + _prefixed("ranger", ("num.trees", "sample.fraction", "mtry.power", "min.node.size", "num.random.splits"))
            + _prefixed("aknn", ("k", "M", "ef", "ef_construction"))
            + _prefixed("xgboost", _XGB),
            (
                "learner_id",
                "svm.kernel",
                "ranger.respect.unordered.factors",
                "ranger.splitrule",
                "aknn.distance",
                "xgboost.booster",
                "num.impute.selected.cpo",
            ),
        ),
        _iaml(
            "iaml_ranger",
            ("num.trees", "sample.fraction", "mtry.ratio", "min.node.size", "num.random.splits"),
            ("replace", "respect.unordered.factors", "splitrule"),
        ),
        _iaml("iaml_rpart", ("cp", "maxdepth", "minbucket", "minsplit"), ()),
        _iaml("iaml_glmnet", ("alpha", "s"), ()),
        _iaml("iaml_xgboost", _XGB, ("booster",)),
        _iaml(
            "iaml_super",
            _prefixed("ranger", ("num.trees", "sample.fraction", "mtry.ratio", "min.node.size", "num.random.splits"))
            + _prefixed("rpart", ("cp", "maxdepth", "minbucket", "minsplit"))
            + _prefixed("glmnet", ("alpha", "s"))
            + _prefixed("xgboost", _XGB),
            ("learner", "ranger.replace", "ranger.respect.unordered.factors", "ranger.splitrule", "xgboost.booster"),
        ),
    )
}


# The ranges of the numeric parameters of yahpo-gym's config spaces, for the scenarios whose files are
# checked against them (a config_space.json with two same-typed names swapped passes every other
# check, and the surrogate is then fed each value outside the range it was fitted on): name ->
# (kind, lower, upper, log). lcbench: Zimmer et al. 2021, as yahpo-gym ships it.
RANGES: dict[str, dict[str, tuple[str, float, float, bool]]] = {
    "lcbench": {
        "batch_size": ("int", 16, 512, True),
        "epoch": ("int", 1, 52, False),
        "learning_rate": ("float", 1e-4, 0.1, True),
        "max_dropout": ("float", 0.0, 1.0, False),
        "max_units": ("int", 64, 1024, True),
        "momentum": ("float", 0.1, 0.99, False),
        "num_layers": ("int", 1, 5, False),
        "weight_decay": ("float", 1e-5, 0.1, False),
    }
}


def check_known_ranges(folder: Path, params: Mapping[str, Any]) -> None:
    """A folder named after a scenario yahpo-gym ships gives its numeric parameters yahpo-gym's
    ranges (:data:`RANGES`): two same-typed names swapped in config_space.json would feed the
    surrogate each value from the other's range. Refused in one line naming the parameter."""
    known = RANGES.get(folder.name, {})
    for name, (kind, low, high, log) in known.items():
        p = params.get(name)
        if p is None:
            continue
        got = (str(p.kind), float(getattr(p, "low", math.nan)), float(getattr(p, "high", math.nan)))
        is_log = bool(getattr(p, "log", False))
        if got[0] == kind and is_log == log and _close(got[1:], (low, high)):
            continue
        swapped = [n for n, r in known.items() if n != name and r[0] == got[0] and _close(got[1:], r[1:3])]
        hint = f" (yahpo-gym's range of {swapped[0]}: two names swapped?)" if swapped else ""
        raise TuneAgentError(
            f"{folder / 'config_space.json'} gives {name} {got[0]} [{got[1]:g}, {got[2]:g}]{' log' * is_log}"
            f"{hint}; yahpo-gym's {folder.name} has {kind} [{low:g}, {high:g}]{' log' * log}: the surrogate "
            "would be fed values from the wrong range"
        )


def _close(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-6) for x, y in zip(a, b))
