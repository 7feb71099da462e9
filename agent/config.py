"""What a study is asked for (:class:`StudyRequest`) and what it runs with (:class:`StudySettings`,
stored on the study run).

Everything a study needs to be resumed in another process lives here, so ``tune-agent resume``
reads it back from the knowledge base instead of asking the user again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from agent.errors import TuneAgentError

# The choices of a study's options. They live here, at the bottom of the layers, so that every
# layer above (surrogates, tuning, bench, cli) reads the same tuples.
INIT_METHODS = ("random", "lhs", "sobol", "halton")
ACQUISITIONS = ("logei", "ucb")
SAMPLERS = ("bo", "random", "tpe", "hts", "hts-anchored")
HTS_SAMPLERS = ("hts", "hts-anchored")  # paper 001, and ours with the map anchored at the identity
# How running trials (parallel workers) enter a BO step (agent/samplers/bo.py): auto (what the
# surrogate declares: joint for the GP family, liar for the TNP), joint (qLogEI/qUCB over the
# running points as X_pending), believer (the model conditioned on its own mean there) or liar
# (the running points as observations at the worst score). Measured in `bench lcbench --batch`.
PENDING = ("auto", "joint", "believer", "liar")
PRUNERS = ("none", "median", "asha")  # early stopping of trials on the per-epoch metric (agent/execution/pruning.py)
KERNELS = ("auto", "arc", "plain")  # GP kernels: arc (paper 002) for conditional spaces; auto picks it there
WARM_METHODS = ("auto", "learned", "handcrafted", "none")
PRIOR_MEANS = ("neighbours", "observations", "constant")
# Every RANDOM_EVERY-th BO step of a GP-family surrogate is a uniform random configuration
# (interleaved random search, as in SMAC: Hutter, Hoos, Leyton-Brown 2011; Lindauer et al. 2022).
# A GP that has found a local trend keeps refining it under LogEI while a narrow better region
# elsewhere goes unsampled; on LCBench about 6 % of cold-GP runs stalled that way.
RANDOM_EVERY = 4


@dataclass(frozen=True)
class StudySettings:
    job: str
    job_name: str
    dataset: str
    dataset_name: str
    fingerprint: str
    space_signature: str
    metric: str
    mode: str
    trials: int
    epochs: int = 5
    time_limit: float | None = None
    init: str = "sobol"
    n_init: int = 5
    acq: str = "logei"
    random_every: int = RANDOM_EVERY
    seed: int = 0
    val_fraction: float = 0.2
    label: str | None = None
    drop: tuple[str, ...] = ()
    kernel: str = "plain"  # resolved: plain | arc
    warm_start: str = "none"
    k: int = 3
    prior_mean: str | None = None
    surrogate: str = "gp"
    sampler: str = "bo"
    models_dir: str = "models"
    pruner: str = "none"
    pending: str = "auto"
    source: str | None = None  # --sampler hts: the historical study whose dataset is the source

    def __post_init__(self) -> None:
        check_study_fields(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-shaped (``drop`` a list), as the store keeps it."""
        return {**asdict(self), "drop": list(self.drop)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StudySettings:
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if "drop" in values:
            values["drop"] = tuple(values["drop"] or ())
        return cls(**values)

    @property
    def sign(self) -> float:
        """Multiplies the objective so that the optimiser always maximises."""
        return -1.0 if self.mode == "min" else 1.0


def check_study_fields(values: Any) -> None:
    """The one validator of what a :class:`StudyRequest` and :class:`StudySettings` share (a
    request's unresolved ``None``/``auto`` values pass); one line per problem, exit 2."""
    check_positive("--trials", values.trials)
    check_positive("--epochs", values.epochs)
    check_positive("--k", values.k)
    if values.n_init is not None and values.n_init < 1:
        raise TuneAgentError(f"--n-init must be at least 1, got {values.n_init}")
    if values.mode is not None and values.mode not in ("min", "max"):
        raise TuneAgentError(f"--mode must be 'min' or 'max', got {values.mode!r}")
    if values.time_limit is not None and values.time_limit <= 0:
        raise TuneAgentError(f"--time-limit must be positive seconds, got {values.time_limit}")
    if values.random_every < 0:
        raise TuneAgentError(f"--random-every must be 0 (never) or a positive step count, got {values.random_every}")
    if not 0.0 < values.val_fraction < 1.0:
        raise TuneAgentError(f"--val-fraction must be in (0, 1), got {values.val_fraction}")
    for option, value, choices in (
        ("--init", values.init, INIT_METHODS),
        ("--acq", values.acq, ACQUISITIONS),
        ("--sampler", values.sampler, SAMPLERS),
        ("--pruner", values.pruner, PRUNERS),
        ("--pending", values.pending, PENDING),
        ("--warm-start", values.warm_start, WARM_METHODS),
        ("--kernel", values.kernel, KERNELS),
    ):
        if value not in choices:
            raise TuneAgentError(f"{option} must be one of {', '.join(choices)}, got {value!r}")
    if values.prior_mean not in (None, *PRIOR_MEANS):
        raise TuneAgentError(f"--prior-mean must be one of {', '.join(PRIOR_MEANS)}, got {values.prior_mean!r}")


def check_positive(option: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TuneAgentError(f"{option} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class StudyRequest:
    """Everything ``tune-agent start``/``create`` (and :func:`agent.lightning.create_study`) is
    asked for: one typed, frozen record whose defaults are the CLI's (the options are built from
    these fields), validated once when it is made. :meth:`settings` turns it into the study's
    :class:`StudySettings` once the job, the dataset and the plan have resolved the rest."""

    dataset: str
    job: str
    trials: int = 20
    epochs: int = 5
    label: str | None = None
    drop: tuple[str, ...] = ()
    metric: str | None = None
    mode: str | None = None
    time_limit: float | None = None
    init: str = "sobol"
    n_init: int | None = None
    acq: str = "logei"
    random_every: int = RANDOM_EVERY
    seed: int = 0
    val_fraction: float = 0.2
    study_name: str | None = None
    tracking_uri: str | None = None
    artifact_root: str | None = None
    warm_start: str = "auto"
    k: int = 3
    prior_mean: str | None = None
    models_dir: str = "models"
    surrogate: str = "auto"
    sampler: str = "bo"
    kernel: str = "auto"
    pruner: str = "none"
    pending: str = "auto"
    source: str | None = None

    def __post_init__(self) -> None:
        check_study_fields(self)
        if self.source is not None and self.sampler not in HTS_SAMPLERS:
            raise TuneAgentError(
                f"--source names the source study of --sampler hts; this study's sampler is {self.sampler}"
            )

    def settings(self, **resolved: Any) -> StudySettings:
        """The study's :class:`StudySettings`: every field the two share copied from the request,
        then ``resolved`` (what the job, the dataset and the plan decided: names, fingerprint,
        metric, mode, n_init, prior mean, kernel)."""
        shared = {f.name: getattr(self, f.name) for f in fields(StudySettings) if f.name in _REQUEST_FIELDS}
        return StudySettings(**{**shared, "drop": tuple(self.drop), **resolved})

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of option ``name`` (a field name)."""
        return next(f.default for f in fields(cls) if f.name == name)


_REQUEST_FIELDS = frozenset(f.name for f in fields(StudyRequest))
