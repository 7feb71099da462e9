"""``tune-agent report STUDY``: one HTML page about a study and its figures, built from the
tracking store. Five parts:

1. best so far over trials, against cold-start studies of the same dataset, job and space where
   the history has them (``--warm-start none`` studies);
2. hyperparameter importance: Optuna's PED-ANOVA evaluator (Watanabe et al. 2023) over the study's
   finished trials, falling back to fANOVA (Hutter et al. 2014) when PED-ANOVA cannot rank them;
3. the neighbours that seeded the study, with their distances and what the warm start said;
4. a 2-D map (PCA of the standardised hand-crafted meta-features) of every dataset the history
   holds for this job, with the study's dataset marked;
5. failed, pruned and killed trials, counted by reason.

:mod:`agent.tuning.report_store` logs the page on the study run (``report/``), writes it to a
folder, and builds it again only when something it shows has changed.
"""

from __future__ import annotations

import html
import json
import logging
import math
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import TRIAL_FAILED, TRIAL_KILLED, TRIAL_OK, TRIAL_PRUNED, StudyRecord, TrialRecord
from agent.space import Categorical, Float, Int, SearchSpace

SHOWN_TAGS = ("warm_start", "warm_start_method", "surrogate")  # the study tags the page shows
PARTS = ("best so far", "hyperparameter importance", "neighbours", "knowledge-base map", "failures and pruned trials")


@dataclass
class Report:
    study: str
    html: str
    figures: dict[str, Any] = field(default_factory=dict)  # file name -> matplotlib figure
    importance: dict[str, float] = field(default_factory=dict)
    parts: tuple[str, ...] = PARTS


def _best_so_far(trials: list[TrialRecord], mode: str) -> tuple[list[int], list[float]]:
    xs, ys, best = [], [], None
    for t in sorted(trials, key=lambda t: t.number):
        if t.state == TRIAL_OK and t.value is not None:
            best = t.value if best is None else (min(best, t.value) if mode == "min" else max(best, t.value))
        if best is not None:
            xs.append(t.number + 1)
            ys.append(best)
    return xs, ys


def cold_references(
    kb: KnowledgeBase, record: StudyRecord, studies: list[StudyRecord] | None = None
) -> list[tuple[str, list[TrialRecord]]]:
    out = []
    for other in kb.list_studies() if studies is None else studies:
        if (
            other.study_id != record.study_id
            and other.fingerprint == record.fingerprint
            and other.job == record.job
            and other.space_signature == record.space_signature
            and other.settings.get("warm_start") == "none"
        ):
            out.append((other.name, kb.trials(other)))
    return out[:5]


def _distribution(space: SearchSpace, name: str) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    p = space[name]
    if isinstance(p, Float):
        return FloatDistribution(p.low, p.high, log=p.log)
    if isinstance(p, Int):
        return IntDistribution(p.low, p.high, log=p.log)
    assert isinstance(p, Categorical)
    return CategoricalDistribution(p.choices)


ROUGH_BELOW = 20  # finished trials under which the importance ranking is said to be rough


def importance(trials: list[TrialRecord], space: SearchSpace, mode: str) -> tuple[dict[str, float], str]:
    """Importance of each hyperparameter over the finished trials, by Optuna's evaluators; ``({}, why)``
    when there are too few trials."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState, create_trial

    finished = [t for t in trials if t.state == TRIAL_OK and t.value is not None and math.isfinite(t.value)]
    if len(finished) < 4:
        return {}, f"{len(finished)} finished trials: too few to rank hyperparameters"
    optuna.logging.set_verbosity(logging.WARNING)
    study = optuna.create_study(direction="minimize" if mode == "min" else "maximize")
    for t in finished:
        config = {k: v for k, v in t.config.items() if k in space.names}
        study.add_trial(
            create_trial(
                params=config,
                distributions={k: _distribution(space, k) for k in config},
                value=float(t.value or 0.0),  # finite: finished holds valued trials only
                state=TrialState.COMPLETE,
            )
        )
    for evaluator, label in (
        (PedAnovaImportanceEvaluator(), "PED-ANOVA"),
        (FanovaImportanceEvaluator(seed=0), "fANOVA"),
    ):
        try:
            with warnings.catch_warnings():  # "few trials in a regime" notes: the page says how many trials
                warnings.simplefilter("ignore")
                scores = get_param_importances(study, evaluator=evaluator)
        except (ValueError, RuntimeError, ZeroDivisionError):
            continue
        if scores and any(v > 0 for v in scores.values()):
            caveat = (
                ""
                if len(finished) >= ROUGH_BELOW
                else (f" (a rough ranking: with under {ROUGH_BELOW} trials one lucky configuration can decide it)")
            )
            return {
                k: float(v) for k, v in scores.items()
            }, f"Optuna's {label} over {len(finished)} finished trials{caveat}"
    return {}, f"no evaluator could rank the hyperparameters over {len(finished)} trials (all equal?)"


def _metafeature_map(kb: KnowledgeBase, record: StudyRecord) -> tuple[np.ndarray, list[str], int] | None:
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    rows: list[list[float]] = []
    names: list[str] = []
    me = -1
    keys: list[str] | None = None
    seen: set[str] = set()
    for s in kb.list_studies():
        mf = s.tags.get("metafeatures")
        if s.job != record.job or not mf or s.fingerprint in seen:
            continue
        try:
            values = json.loads(mf)
            keys = keys or sorted(values)
            vector = [float("nan") if values.get(k) is None else float(values[k]) for k in keys]
        except (TypeError, ValueError, AttributeError):
            continue
        seen.add(s.fingerprint)
        if s.fingerprint == record.fingerprint:
            me = len(rows)
        rows.append(vector)
        names.append(s.dataset)
    if len(rows) < 3 or me < 0:
        return None
    X = np.nan_to_num(np.asarray(rows, dtype=float))
    points = PCA(n_components=2, random_state=0).fit_transform(StandardScaler().fit_transform(X))
    return points, names, me


def build_report(kb: KnowledgeBase, record: StudyRecord, space: SearchSpace) -> Report:
    import matplotlib

    matplotlib.use("Agg")  # the section helpers draw with pyplot, off-screen

    settings = record.settings
    mode, metric = str(settings.get("mode", "min")), str(settings.get("metric", "objective"))
    trials = kb.trials(record)
    tags = kb.study_tags(record)
    figures: dict[str, Any] = {}  # each section helper adds the figure it draws
    sections = [_best_so_far_section(kb, record, trials, mode, metric, figures)]
    study_settings = (
        StudySettings.from_dict(settings) if settings.get("objectives") or settings.get("constraints") else None
    )
    if study_settings is not None:
        from agent.tuning.report_front import front_section

        sections.append(front_section(trials, study_settings, figures))
    scores, how = importance(trials, space, mode)
    sections.append(_importance_section(scores, how, figures))
    warm = json.loads(tags["warm_start"]) if tags.get("warm_start") else {}
    sections.append(_neighbours_section(warm, tags, metric))
    sections.append(_map_section(kb, record, warm.get("neighbours", []), figures))
    sections.append(_failures_section(trials))
    return Report(record.name, _page(record, tags, trials, mode, metric, sections), figures, scores)


def _best_so_far_section(
    kb: KnowledgeBase, record: StudyRecord, trials: list[TrialRecord], mode: str, metric: str, figures: dict[str, Any]
) -> str:
    """Part 1: the study's best so far against the cold-start studies; draws ``best_so_far.png``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs, ys = _best_so_far(trials, mode)
    if xs:
        ax.step(xs, ys, where="post", color="tab:orange", lw=2, label=f"{record.name}")
    refs = cold_references(kb, record)
    for name, ref in refs:
        rx, ry = _best_so_far(ref, mode)
        if rx:
            ax.step(rx, ry, where="post", color="tab:gray", alpha=0.7, label=f"cold: {name}")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"best {metric}")
    shown = [v for v in ys] + [v for _, ref in refs for v in _best_so_far(ref, mode)[1]]
    log_axis = bool(shown) and min(shown) > 0 and max(shown) / min(shown) >= 10
    if log_axis:  # on a linear axis one diverged trial (31 against 1.7) flattens every later improvement
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    figures["best_so_far.png"] = fig
    ref_note = (
        f"grey: {len(refs)} cold-start stud{'y' if len(refs) == 1 else 'ies'} of the same dataset, job and space"
        if refs
        else "the history has no cold-start study of this dataset, job and space to compare with"
    )
    if log_axis:
        ref_note += "; a log axis: the values span more than a factor of 10"
    return f"<h2>1. Best so far</h2><p>{html.escape(ref_note)}.</p><img src='best_so_far.png'>"


def _importance_section(scores: dict[str, float], how: str, figures: dict[str, Any]) -> str:
    """Part 2: the importance ranking and how it was computed; draws ``importance.png`` when ranked."""
    import matplotlib.pyplot as plt

    if not scores:
        return f"<h2>2. Hyperparameter importance</h2><p>{html.escape(how)}.</p>"
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(scores) + 1))
    names = list(scores)[::-1]
    ax.barh(names, [scores[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance")
    fig.tight_layout()
    figures["importance.png"] = fig
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.3f}</td></tr>" for k, v in scores.items())
    return (
        f"<h2>2. Hyperparameter importance</h2><p>{html.escape(how)}.</p><img src='importance.png'>"
        f"<table><tr><th>hyperparameter</th><th>importance</th></tr>{rows}</table>"
    )


def _neighbours_section(warm: dict[str, Any], tags: dict[str, str], metric: str) -> str:
    """Part 3: the neighbours that seeded the study (the ``warm_start`` tag) and what the warm start said."""
    neighbours = warm.get("neighbours", [])
    if neighbours:
        rows = "".join(
            f"<tr><td>{html.escape(str(n['name']))}</td><td>{float(n['distance']):.4g}</td>"
            f"<td>{float(n['best_value']):.5g}</td><td><code>{html.escape(json.dumps(n['best_config']))}</code></td></tr>"
            for n in neighbours
        )
        head = f"<th>dataset</th><th>distance</th><th>best {html.escape(metric)}</th><th>configuration</th>"
        table = f"<table><tr>{head}</tr>{rows}</table>"
    else:
        table = "<p>No neighbour seeded this study.</p>"
    said = warm.get("message") or tags.get("warm_start_method") or "warm start off"
    return f"<h2>3. Neighbours that seeded the study</h2><p>{html.escape(str(said))}</p>{table}"


def _map_section(
    kb: KnowledgeBase, record: StudyRecord, neighbours: list[dict[str, Any]], figures: dict[str, Any]
) -> str:
    """Part 4: the job's datasets by meta-features, this one and its neighbours marked; draws
    ``knowledge_map.png`` when at least three datasets have meta-features."""
    import matplotlib.pyplot as plt

    mapped = _metafeature_map(kb, record)
    if mapped is None:
        return "<h2>4. The knowledge base</h2><p>Fewer than three datasets with meta-features for this job: no map.</p>"
    points, names, me = mapped
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.scatter(points[:, 0], points[:, 1], s=14, color="tab:gray", alpha=0.6, label="historical datasets")
    ax.scatter([points[me, 0]], [points[me, 1]], s=90, marker="*", color="tab:red", label=record.dataset[:40])
    near = {str(n["name"]) for n in neighbours}
    for i, name in enumerate(names):
        if name in near:
            ax.scatter([points[i, 0]], [points[i, 1]], s=40, facecolors="none", edgecolors="tab:blue")
            ax.annotate(name[:30], points[i], fontsize=7)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    figures["knowledge_map.png"] = fig
    return (
        f"<h2>4. The knowledge base</h2><p>{len(names)} datasets of job {html.escape(record.job)} by their "
        "hand-crafted meta-features (PCA to 2-D); red star: this study's dataset; circles: its "
        "neighbours.</p><img src='knowledge_map.png'>"
    )


def _failures_section(trials: list[TrialRecord]) -> str:
    """Part 5: failed, pruned and killed trials counted by state and reason."""
    reasons = Counter(
        (t.state, t.reason.split(":")[0] if t.state == TRIAL_PRUNED else t.reason)
        for t in trials
        if t.state in (TRIAL_FAILED, TRIAL_PRUNED, TRIAL_KILLED)
    )
    if reasons:
        rows = "".join(
            f"<tr><td>{html.escape(state)}</td><td>{html.escape(reason or '-')}</td><td>{n}</td></tr>"
            for (state, reason), n in reasons.most_common()
        )
        body = f"<table><tr><th>state</th><th>reason</th><th>trials</th></tr>{rows}</table>"
    else:
        body = "<p>None: every trial finished.</p>"
    return f"<h2>5. Failed, pruned and killed trials</h2>{body}"


def _page(
    record: StudyRecord, tags: dict[str, str], trials: list[TrialRecord], mode: str, metric: str, sections: list[str]
) -> str:
    """The HTML page: a heading line about the study, then the sections."""
    counts = Counter(t.state for t in trials)
    best = record.best_value
    head = (
        f"<h1>Study {html.escape(record.name)}</h1><p>job <b>{html.escape(record.job)}</b> on "
        f"<b>{html.escape(record.dataset)}</b>, {mode} {html.escape(metric)}; status {html.escape(record.status)}; "
        f"trials: {', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}; best "
        f"{'-' if best is None else f'{best:.5g}'}; surrogate {html.escape(tags.get('surrogate', '-'))}.</p>"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>tune-agent report: "
        f"{html.escape(record.name)}</title><style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;font-size:90%}"
        f"img{{max-width:100%}}</style></head><body>{head}{''.join(sections)}</body></html>"
    )
