"""What a study is asked for (:class:`StudyRequest`, the one validated study object) and what it
runs with (:class:`StudySettings`, derived from it and stored on the study run).

Everything a study needs to be resumed in another process lives here, so ``tune-agent resume``
reads it back from the knowledge base instead of asking the user again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from agent.errors import TuneAgentError
from agent.registry import PRUNERS, SAMPLERS, SURROGATES, WARM_STARTS

# The choices of a study's options. They live here, at the bottom of the layers, so that every
# layer above (surrogates, tuning, bench, cli) reads the same tuples; samplers and surrogates are
# registry entries (agent.registry).
INIT_METHODS = ("random", "lhs", "sobol", "halton")
ACQUISITIONS = ("logei", "ucb")
# How running trials (parallel workers) enter a BO step (agent/samplers/bo.py): auto (what the
# surrogate declares: joint for the GP family, liar for the TNP), joint (qLogEI/qUCB over the
# running points as X_pending), believer (the model conditioned on its own mean there) or liar
# (the running points as observations at the worst score). Measured in `bench lcbench --batch`.
PENDING = ("auto", "joint", "believer", "liar")
KERNELS = ("auto", "arc", "plain")  # GP kernels: arc (paper 002) for conditional spaces; auto picks it there
PRIOR_MEANS = ("neighbours", "observations", "constant")
# Every RANDOM_EVERY-th BO step of a GP-family surrogate is a uniform random configuration
# (interleaved random search, as in SMAC: Hutter, Hoos, Leyton-Brown 2011; Lindauer et al. 2022).
# A GP that has found a local trend keeps refining it under LogEI while a narrow better region
# elsewhere goes unsampled; on LCBench about 6 % of cold-GP runs stalled that way.
RANDOM_EVERY = 4
KEEP_ALL = -1  # --keep-models all


@dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """The options a study is asked for and runs with alike; each default is written here once."""

    trials: int = 20
    epochs: int = 5
    time_limit: float | None = None
    init: str = "sobol"
    acq: str = "logei"
    random_every: int = RANDOM_EVERY
    seed: int = 0
    val_fraction: float = 0.2
    label: str | None = None
    drop: tuple[str, ...] = ()
    k: int = 3
    prior_mean: str | None = None
    models_dir: str = "models"
    sampler: str = "bo"
    pruner: str = "none"
    pending: str = "auto"
    source: str | None = None  # --sampler hts: the historical study whose dataset is the source
    # The trained models kept on their trial runs: those of the best ``keep_models`` trials
    # (agent/execution/keep.py); 0 keeps none, KEEP_ALL every successful trial's.
    keep_models: int = 3
    # Several objectives: the metrics after the first (``--metric`` given again), each "NAME:min" or
    # "NAME:max"; the first is ``metric``/``mode``, the primary. Constraints: "NAME<=V" or "NAME>=V".
    objectives: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class StudyRequest(StudyOptions):
    """Everything ``tune-agent start``/``create`` (and :func:`agent.lightning.create_study`) is
    asked for: the one validated study object. The CLI's options are built from these fields and
    their defaults; each problem is one line (:class:`~agent.errors.TuneAgentError`, exit 2) when
    the request is made. :meth:`settings` derives the study's :class:`StudySettings` once the job,
    the dataset and the plan have resolved the rest."""

    dataset: str
    job: str
    metric: str | None = None
    mode: str | None = None
    n_init: int | None = None
    study_name: str | None = None
    tracking_uri: str | None = None
    artifact_root: str | None = None
    warm_start: str = "auto"
    surrogate: str = "auto"
    kernel: str = "auto"

    def __post_init__(self) -> None:
        check_positive("--trials", self.trials)
        check_positive("--epochs", self.epochs)
        check_positive("--k", self.k)
        if self.n_init is not None and self.n_init < 1:
            raise TuneAgentError(f"--n-init must be at least 1, got {self.n_init}")
        if self.mode is not None and self.mode not in ("min", "max"):
            raise TuneAgentError(f"--mode must be 'min' or 'max', got {self.mode!r}")
        if self.time_limit is not None and self.time_limit <= 0:
            raise TuneAgentError(f"--time-limit must be positive seconds, got {self.time_limit}")
        if self.random_every < 0:
            raise TuneAgentError(f"--random-every must be 0 (never) or a positive step count, got {self.random_every}")
        if self.keep_models < KEEP_ALL:
            raise TuneAgentError(f"--keep-models must be a count of at least 0 or 'all', got {self.keep_models}")
        if not 0.0 < self.val_fraction < 1.0:
            raise TuneAgentError(f"--val-fraction must be in (0, 1), got {self.val_fraction}")
        self._check_choices()
        self._check_objectives()
        if self.study_name and "'" in self.study_name and '"' in self.study_name:
            raise TuneAgentError(
                f"--study-name {self.study_name}: a name may hold ' or \", not both "
                "(the store's searches cannot quote it)"
            )

    def _check_choices(self) -> None:
        for option, value, choices in (
            ("--init", self.init, INIT_METHODS),
            ("--acq", self.acq, ACQUISITIONS),
            ("--pending", self.pending, PENDING),
            ("--kernel", self.kernel, KERNELS),
        ):
            if value not in choices:
                raise TuneAgentError(f"{option} must be one of {', '.join(choices)}, got {value!r}")
        if self.prior_mean not in (None, *PRIOR_MEANS):
            raise TuneAgentError(f"--prior-mean must be one of {', '.join(PRIOR_MEANS)}, got {self.prior_mean!r}")
        SURROGATES.check(self.surrogate)
        WARM_STARTS.check(self.warm_start)
        PRUNERS.load(self.pruner)  # a plugin's that fails to load is refused here, before any write
        sampler = SAMPLERS.load(self.sampler)  # a plugin's that fails to load is refused here, before any write
        if self.source is not None and sampler.plan != "sources":
            raise TuneAgentError(
                f"--source names the source study of a sampler that maps one (--sampler hts); "
                f"this study's sampler is {self.sampler}"
            )

    def _check_objectives(self) -> None:
        names = [self.metric] if self.metric is not None else []
        for text in self.objectives:
            name, _ = parse_objective(text, second=True)
            if name in names:
                raise TuneAgentError(f"--metric {name} is given twice")
            names.append(name)
        seen: set[tuple[str, str]] = set()
        for text in self.constraints:
            name, op, _ = parse_constraint(text)
            if (name, op) in seen:
                raise TuneAgentError(f"--constraint {name}{op}: one bound per metric and direction")
            seen.add((name, op))
        if self.objectives or self.constraints:
            if self.metric is None:
                raise TuneAgentError("--metric: name the first metric too when giving several or a --constraint")
            # bo (qLogNEHVI) and random take both; tpe (Optuna's multi-objective TPE) several metrics
            takes = self.sampler == "random" or (self.sampler == "tpe" and not self.constraints)
            if SAMPLERS.load(self.sampler).plan != "surrogate" and not takes:
                raise TuneAgentError(
                    f"--sampler {self.sampler} takes "
                    + ("several metrics but no constraint" if self.sampler == "tpe" else "one metric and no constraint")
                    + "; several metrics and constraints run with --sampler bo (qLogNEHVI) or random"
                )

    def settings(self, **resolved: Any) -> StudySettings:
        """The study's :class:`StudySettings`: every field the two share copied from the request,
        then ``resolved`` (what the job, the dataset and the plan decided: names, fingerprint,
        metric, mode, n_init, prior mean, kernel)."""
        shared = {f.name: getattr(self, f.name) for f in fields(StudySettings) if f.name in _REQUEST_FIELDS}
        return StudySettings(**{**shared, "drop": tuple(self.drop), **resolved})

    @classmethod
    def from_options(cls, metrics: Sequence[str] = (), mode: str | None = None, **options: Any) -> StudyRequest:
        """The request from the command line's (or :func:`agent.api.create_study`'s) options:
        ``metrics`` the repeated ``--metric`` values (:func:`split_metrics`)."""
        if isinstance(metrics, str):
            metrics = (metrics,)
        constraints = options.pop("constraints", ())
        if isinstance(constraints, str):
            constraints = (constraints,)
        return cls(**split_metrics(tuple(metrics), mode), constraints=tuple(constraints), **options)

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of option ``name`` (a field name)."""
        return next(f.default for f in fields(cls) if f.name == name)


@dataclass(frozen=True, kw_only=True)
class StudySettings(StudyOptions):
    """What a study runs with, stored on the study run so that ``resume`` reads it back instead of
    asking again. Derived from a validated :class:`StudyRequest` (:meth:`StudyRequest.settings`)
    or read back from the store, so it is not validated again."""

    job: str
    job_name: str
    dataset: str
    dataset_name: str
    fingerprint: str
    space_signature: str
    metric: str
    mode: str
    n_init: int = 5
    kernel: str = "plain"  # resolved: plain | arc
    warm_start: str = "none"
    surrogate: str = "gp"

    def to_dict(self) -> dict[str, Any]:
        """JSON-shaped (tuples as lists), as the store keeps it; a one-metric study's has no
        ``objectives`` or ``constraints``."""
        out = {**asdict(self), "drop": list(self.drop)}
        for key in ("objectives", "constraints"):
            if out[key]:
                out[key] = list(out[key])
            else:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudySettings:
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("drop", "objectives", "constraints"):
            if key in values:
                values[key] = tuple(values[key] or ())
        return cls(**values)

    @property
    def sign(self) -> float:
        """Multiplies the objective so that the optimiser always maximises."""
        return -1.0 if self.mode == "min" else 1.0

    @property
    def multi(self) -> bool:
        """Several objectives or any constraint: the study's result is a Pareto front."""
        return bool(self.objectives or self.constraints)

    def objective_list(self) -> list[tuple[str, str]]:
        """Every objective as (metric, mode), the primary first."""
        out = [(self.metric, self.mode)]
        for text in self.objectives:
            name, mode = parse_objective(text, second=True)
            out.append((name, mode or "min"))  # a later metric always carries its direction
        return out

    def constraint_list(self) -> list[tuple[str, str, float]]:
        """Every constraint as (metric, "<=" or ">=", bound)."""
        return [parse_constraint(t) for t in self.constraints]

    def required_metrics(self) -> list[str]:
        """The metrics a trial must report besides the primary: further objectives, constraints."""
        out: list[str] = []
        for name in [n for n, _ in self.objective_list()[1:]] + [n for n, _, _ in self.constraint_list()]:
            if name != self.metric and name not in out:
                out.append(name)
        return out


def parse_objective(text: str, second: bool = False) -> tuple[str, str | None]:
    """``"NAME"``, ``"NAME:min"`` or ``"NAME:max"`` as (name, mode or None); ``second``: a metric
    after the first, which must say its direction."""
    name, sep, mode = str(text).strip().partition(":")
    name = name.strip()
    if not name or (sep and mode not in ("min", "max")):
        raise TuneAgentError(f"--metric {text!r}: write NAME, NAME:min or NAME:max")
    if second and not sep:
        raise TuneAgentError(f"--metric {name}: a second or later metric says its direction ({name}:min or {name}:max)")
    return name, (mode or None)


def parse_constraint(text: str) -> tuple[str, str, float]:
    """``"NAME<=V"`` or ``"NAME>=V"`` as (name, op, bound)."""
    import math
    import re

    match = re.fullmatch(r"\s*([A-Za-z_][\w./-]*)\s*(<=|>=)\s*([^\s]+)\s*", str(text))
    bound = None
    if match:
        try:
            bound = float(match.group(3))
        except ValueError:
            bound = None
    if match is None or bound is None or not math.isfinite(bound):
        raise TuneAgentError(f"--constraint {text!r}: write NAME<=VALUE or NAME>=VALUE (e.g. n_params<=20000)")
    return match.group(1), match.group(2), bound


def split_metrics(metrics: Sequence[str], mode: str | None = None) -> dict[str, Any]:
    """Repeated ``--metric`` values (``create_study(metrics=...)``) as the request's ``metric``,
    ``mode`` and ``objectives``; ``mode`` (``--mode``) is the first metric's when it has none."""
    if not metrics:
        return {"metric": None, "mode": mode}
    name, own = parse_objective(metrics[0])
    if own is not None and mode is not None and own != mode:
        raise TuneAgentError(f"--metric {metrics[0]} and --mode {mode} disagree")
    rest = []
    for text in metrics[1:]:
        other, direction = parse_objective(text, second=True)
        rest.append(f"{other}:{direction}")
    return {"metric": name, "mode": own or mode, "objectives": tuple(rest)}


def check_positive(option: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TuneAgentError(f"{option} must be a positive integer, got {value!r}")


_REQUEST_FIELDS = frozenset(f.name for f in fields(StudyRequest))
