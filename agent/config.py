"""Study settings: one frozen record, built once at the CLI edge and stored on the study run.

Everything a study needs to be resumed in another process lives here, so ``tune-agent resume``
reads it back from the knowledge base instead of asking the user again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

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
        check_positive("--trials", self.trials)
        check_positive("--epochs", self.epochs)
        if self.n_init < 1:
            raise TuneAgentError(f"--n-init must be at least 1, got {self.n_init}")
        if self.mode not in ("min", "max"):
            raise TuneAgentError(f"--mode must be 'min' or 'max', got {self.mode!r}")
        if self.init not in INIT_METHODS:
            raise TuneAgentError(f"--init must be one of {', '.join(INIT_METHODS)}, got {self.init!r}")
        if self.acq not in ACQUISITIONS:
            raise TuneAgentError(f"--acq must be one of {', '.join(ACQUISITIONS)}, got {self.acq!r}")
        if self.time_limit is not None and self.time_limit <= 0:
            raise TuneAgentError(f"--time-limit must be positive seconds, got {self.time_limit}")
        if self.random_every < 0:
            raise TuneAgentError(f"--random-every must be 0 (never) or a positive step count, got {self.random_every}")
        if self.sampler not in SAMPLERS:
            raise TuneAgentError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.k < 1:
            raise TuneAgentError(f"--k must be at least 1, got {self.k}")
        if self.pruner not in PRUNERS:
            raise TuneAgentError(f"--pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}")
        if self.pending not in PENDING:
            raise TuneAgentError(f"--pending must be one of {', '.join(PENDING)}, got {self.pending!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise TuneAgentError(f"--val-fraction must be in (0, 1), got {self.val_fraction}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-shaped (``drop`` a list), as the store keeps it."""
        return {**asdict(self), "drop": list(self.drop)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StudySettings":
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if "drop" in values:
            values["drop"] = tuple(values["drop"] or ())
        return cls(**values)

    @property
    def sign(self) -> float:
        """Multiplies the objective so that the optimiser always maximises."""
        return -1.0 if self.mode == "min" else 1.0


def check_positive(option: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TuneAgentError(f"{option} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class StudyConfig:
    """Everything ``tune-agent start``/``create`` is asked for: one frozen record whose defaults are
    the CLI's (the options are built from these fields), validated by :meth:`check`."""

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

    def check(self) -> None:
        """The options that need no job, dataset or store; one line per problem, exit 2. (The
        surrogate's name is checked against the registry by the service that plans the study.)"""
        check_positive("--trials", self.trials)
        check_positive("--epochs", self.epochs)
        check_positive("--k", self.k)
        if self.warm_start not in WARM_METHODS:
            raise TuneAgentError(f"--warm-start must be one of {', '.join(WARM_METHODS)}, got {self.warm_start!r}")
        if self.prior_mean not in (None, *PRIOR_MEANS):
            raise TuneAgentError(f"--prior-mean must be one of {', '.join(PRIOR_MEANS)}, got {self.prior_mean!r}")
        if self.sampler not in SAMPLERS:
            raise TuneAgentError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        if self.kernel not in KERNELS:
            raise TuneAgentError(f"--kernel must be one of {', '.join(KERNELS)}, got {self.kernel!r}")
        if self.pruner not in PRUNERS:
            raise TuneAgentError(f"--pruner must be one of {', '.join(PRUNERS)}, got {self.pruner!r}")
        if self.n_init is not None and self.n_init < 1:
            raise TuneAgentError(f"--n-init must be at least 1, got {self.n_init}")
        if self.source is not None and self.sampler not in HTS_SAMPLERS:
            raise TuneAgentError(f"--source names the source study of --sampler hts; this study's sampler is {self.sampler}")


    @classmethod
    def default(cls, name: str) -> Any:
        """The default of option ``name`` (a field name)."""
        return next(f.default for f in fields(cls) if f.name == name)
