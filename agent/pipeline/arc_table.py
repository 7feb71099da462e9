"""Paper 002's Table 1 on our data: how well six regression models predict BO results of a
conditional job, by 10-fold normalised mean squared error.

The data are ordinary studies of a conditional job (``mlp-arch``) read from the knowledge base:
every finished trial's configuration and its validation error (``1 - val_acc``, the paper's
classification error; the objective when a trial has no accuracy). Models, as in the paper:

- ``linear``: least squares on the cube point (inactive dimensions at their fixed encoding);
- ``gp``: the plain GP, inactive dimensions filled with uniform random values (train and test);
- ``arc_gp``: one GP with the arc kernel (:mod:`agent.surrogates.arc`) over every architecture;
  ``arc_gp_mode`` (ours, not in the paper): the same with the fit started at the priors' modes;
- ``separate_linear`` / ``separate_gp`` / ``separate_arc_gp``: one model per depth (value of the
  parameter every condition hangs on), fitted on that depth's trials alone (Bergstra et al. 2011).

NMSE of a fold = mean squared error / variance of the fold's targets; the table reports the mean and
the standard error over folds, on the original errors and on their logarithm. GP hyperparameters
are fitted by marginal likelihood (the paper slice-samples them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import TRIAL_OK
from agent.space import SearchSpace

MODELS = ("separate_linear", "separate_gp", "separate_arc_gp", "linear", "gp", "arc_gp", "arc_gp_mode")
PAPER = {  # Swersky et al. 2014, Table 1 (MNIST): NMSE on original / log outputs
    "separate_linear": (0.812, 0.737),
    "separate_gp": (0.546, 0.446),
    "separate_arc_gp": (0.535, 0.440),
    "linear": (0.876, 0.834),
    "gp": (0.481, 0.401),
    "arc_gp": (0.421, 0.335),
}


def collect(kb: KnowledgeBase, space: SearchSpace, prefix: str, job: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Cube points and validation errors of the finished trials of ``job``'s studies named ``prefix*``."""
    rows, errors, names = [], [], []
    for study in kb.list_studies():
        if not study.name.startswith(prefix) or study.settings.get("job") != job:
            continue
        names.append(study.name)
        for t in kb.trials(study):
            if t.state != TRIAL_OK or t.value is None:
                continue
            acc = t.extra.get("final_val_acc")
            err = 1.0 - float(acc) if acc is not None else float(t.value)
            if math.isfinite(err):
                rows.append(space.encode(t.config))
                errors.append(max(err, 1e-4))
    return np.array(rows), np.array(errors), names


def _root(space: SearchSpace) -> int:
    """The dimension every condition hangs on, directly or through a chain (the depth)."""
    parents = {p.condition.parent for p in space.params if p.condition is not None}
    roots = [n for n in parents if space[n].condition is None]
    if len(roots) != 1:
        raise ValueError(f"expected one root parameter of the conditions, got {roots}")
    return space.names.index(roots[0])


def _fit_predict(kind: str, space: SearchSpace, U: np.ndarray, y: np.ndarray, V: np.ndarray, seed: int) -> np.ndarray:
    import torch

    from agent.surrogates.arc import make_arc_kernel
    from agent.surrogates.gp import fit_gp, torch_threads

    if kind == "linear":
        from sklearn.linear_model import LinearRegression

        return LinearRegression().fit(U, y).predict(V)
    if len(y) < 3:
        return np.full(len(V), float(np.mean(y)))
    # kind "plain_gp": BoTorch's default kernel on the points as given
    if kind == "gp":  # inactive dimensions filled at random, as the paper's baseline
        rng = np.random.default_rng(seed)
        U, V = U.copy(), V.copy()
        for W in (U, V):
            inactive = ~space.active_mask(W)
            W[inactive] = rng.random(int(inactive.sum()))
    mu, sd = float(y.mean()), float(y.std() or 1.0)
    with torch_threads(1):
        X = torch.as_tensor(U, dtype=torch.double)
        Y = torch.as_tensor((y - mu) / sd, dtype=torch.double).reshape(-1, 1)
        arc = {"arc_gp": "median", "arc_gp_mode": "mode"}.get(kind)
        model = fit_gp(X, Y, covar_module=make_arc_kernel(space, arc) if arc else None)
        with torch.no_grad():
            pred = model.posterior(torch.as_tensor(V, dtype=torch.double)).mean.reshape(-1).numpy()
    return pred * sd + mu


def _predict(
    model: str, space: SearchSpace, U: np.ndarray, y: np.ndarray, V: np.ndarray, root: int, seed: int
) -> np.ndarray:
    if not model.startswith("separate_"):
        return _fit_predict(model, space, U, y, V, seed)
    kind = model[len("separate_") :]
    out = np.empty(len(V))
    for depth in np.unique(V[:, root]):
        test, train = V[:, root] == depth, U[:, root] == depth
        if train.sum() == 0:  # no trial of this depth to learn from: the overall mean
            out[test] = float(y.mean())
            continue
        active = space.active_mask(U[train][:1])[0]  # one depth: the same dimensions active throughout
        Us, Vs = U[train], V[test]
        if kind == "arc_gp":  # the arc embedding over this depth's points (the paper's "separate Arc GP")
            out[test] = _fit_predict("arc_gp", space, Us, y[train], Vs, seed)
        else:  # only this depth's active dimensions; a plain GP needs no filling within one depth
            out[test] = _fit_predict(
                "linear" if kind == "linear" else "plain_gp", space, Us[:, active], y[train], Vs[:, active], seed
            )
    return out


def nmse_table(
    space: SearchSpace,
    U: np.ndarray,
    errors: np.ndarray,
    folds: int = 10,
    seed: int = 0,
    models: Sequence[str] = MODELS,
) -> dict[str, Any]:
    """{model: {"original": [mean, se], "log": [mean, se]}} over ``folds`` random folds."""
    root = _root(space)
    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(errors)) % folds
    out: dict[str, Any] = {}
    for scale, y in (("original", errors), ("log", np.log(errors))):
        for model in models:
            scores = []
            for f in range(folds):
                test, train = fold_of == f, fold_of != f
                pred = _predict(model, space, U[train], y[train], U[test], root, seed + f)
                var = float(np.var(y[test]))
                scores.append(float(np.mean((pred - y[test]) ** 2)) / var if var > 0 else float("nan"))
            s = np.array(scores)
            out.setdefault(model, {})[scale] = [
                float(np.nanmean(s)),
                float(np.nanstd(s) / math.sqrt(np.isfinite(s).sum())),
            ]
    return out


def run_studies(
    dataset: str,
    job: str,
    studies: int,
    trials: int,
    epochs: int,
    prefix: str,
    tracking_uri: str | None,
    artifact_root: str | None,
    kernel: str = "auto",
    echo: Any = print,
) -> list[str]:
    """The data: ``studies`` ordinary BO studies (seeds 0..N-1) named ``PREFIX<seed>``; finished ones
    are kept and interrupted ones resumed, so the command can simply run again."""
    from agent.config import StudyRequest
    from agent.execution.progress import SilentReporter
    from agent.execution.runner import quiet_lightning, run_study
    from agent.tuning.service import open_or_prepare

    quiet_lightning()
    names = []
    for seed in range(studies):
        name = f"{prefix}{seed}"
        names.append(name)
        req = StudyRequest(
            dataset=dataset,
            job=job,
            trials=trials,
            epochs=epochs,
            seed=seed,
            study_name=name,
            warm_start="none",
            surrogate="gp",
            kernel=kernel,
            tracking_uri=tracking_uri,
            artifact_root=artifact_root,
        )
        opened = open_or_prepare(req)
        if opened is None:
            continue
        study, job_obj, data, split = opened
        timing = run_study(study, job_obj, data, split, SilentReporter(), trace_plot=False)
        best = study.best(study.trials())
        echo(
            f"{name}: {trials} trials, best {study.settings.metric}={best.value if best else float('nan'):.4g}, "
            f"{timing.wall_seconds:.0f} s"
        )
    return names


def kernel_bo_comparison(
    kb: KnowledgeBase,
    space: SearchSpace,
    prefix: str,
    kernels: Sequence[str],
    seeds: int,
    job: str,
    at: Sequence[int] = (10, 30),
) -> dict[str, Any]:
    """Mean best-so-far validation error at trials ``at`` of the studies ``PREFIX<kernel>-<seed>``,
    and their regret against the best error any of them found (per seed)."""
    curves: dict[str, list[np.ndarray]] = {k: [] for k in kernels}
    by_name = {st.name: st for st in kb.list_studies() if st.settings.get("job") == job}
    for seed in range(seeds):
        runs = {}
        for k in kernels:
            study = by_name[f"{prefix}{k}-{seed}"]
            trials = sorted(
                (t for t in kb.trials(study) if t.state == TRIAL_OK and t.value is not None), key=lambda t: t.number
            )
            errors = [
                1.0 - float(t.extra["final_val_acc"]) if "final_val_acc" in t.extra else float(cast(float, t.value))
                for t in trials
            ]
            runs[k] = np.minimum.accumulate(np.array(errors))
        for k in kernels:
            curves[k].append(runs[k])
    out: dict[str, Any] = {}
    for k in kernels:
        n = min(len(c) for c in curves[k])
        A = np.array([c[:n] for c in curves[k]])
        out[k] = {f"best_error@{t}": round(float(A[:, t - 1].mean()), 4) for t in sorted({*at, n}) if t <= n}
        # each seed's own curve at its last trial when shorter (a failed trial leaves fewer finished ones)
        out[k]["per_seed"] = {
            f"best_error@{t}": [round(float(c[min(t, len(c)) - 1]), 4) for c in curves[k]] for t in at
        }
    return out
