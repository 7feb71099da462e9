"""Paper 003 on its own protocol, at this machine's scale: image datasets subsampled at ten
stratified fractions, the ``cnn`` job's Table-1 space on one shared design, and the
leave-one-source-out evaluation of learned against hand-crafted meta-features.

The meta-dataset (:func:`image_specs`): five image sources, each a stratified base of at most
``ROWS`` images (digits 8x8; MNIST resized to 10x10; mnist1d sequences of 40; scikit-image's
``lfw_subset`` resized to 12x12, 200 faces and non-faces; ``bars``, the synthetic task of
:mod:`agent.data.builtin`), each at fractions 10%, 20%, ..., 100% (paper 003, section 5.1.1:
80 datasets from 8) -- 50 datasets. ``tune-agent-bench paper003-images`` trains the shared design
on every one with the product's bootstrap (resumable: a rerun skips finished studies and resumes
a broken one), then runs the ``evaluate`` stage's protocol on that history with one fold per
source (every fraction of the target's source out of its history and of the extractor's training)
and once more in paper 003's own setting (the target's sibling subsamples in its history, folds of
datasets), and writes ``metrics/paper003_images.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SOURCES: tuple[str, ...] = (
    "digits?rows=800",
    "mnist-5k?rows=800&size=10",
    "mnist1d?rows=800",
    "lfw-subset?size=12",
    "bars?rows=800",
)
FRACTIONS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 11))
EPOCHS = 7
CONFIGS = 64


def image_specs(sources: tuple[str, ...] = IMAGE_SOURCES, fractions: tuple[float, ...] = FRACTIONS) -> list[str]:
    """Every source at every fraction; fraction ``i/10`` draws with seed ``i`` (the whole base at 1.0)."""
    specs = []
    for source in sources:
        for i, f in enumerate(fractions, start=1):
            specs.append(source if f >= 1.0 else f"{source}&fraction={f!r}&seed={i}")
    return specs


def ordered(specs: list[str]) -> list[str]:
    """Largest fractions first, so the longest studies start first and two workers finish together."""

    def size(spec: str) -> float:
        return float(spec.split("fraction=")[1].split("&")[0]) if "fraction=" in spec else 1.0

    return sorted(specs, key=lambda s: -size(s))


def evaluate_settings(sources: int, workers: int) -> dict[str, Any]:
    """The ``evaluate`` stage's settings for this protocol: one fold per image source (leave one
    source out), k = 3 nearest datasets' bests as in paper 003, 10 trials, three cold Sobol seeds,
    the Bi-LSTM extractor beside the product's mean aggregator (the paper's two wings)."""
    return {
        "k": 3,
        "budget": 10,
        "folds": sources,
        "seeds": 3,
        "acquisition": "ei",
        "wings": ["bilstm"],
        "workers": workers,
    }


def size_effect(datasets: list[Any]) -> dict[str, Any]:
    """How far dataset size moves the optimum: per source, the best configuration's log10 learning
    rate at each fraction (the history's own table), its range and its rank correlation with size."""
    from scipy.stats import spearmanr

    per: dict[str, list[tuple[int, float]]] = {}
    for h in datasets:
        best = min(
            (e for e in h.evaluations if (e.val_error if e.val_error is not None else e.value) is not None),
            key=lambda e: e.val_error if e.val_error is not None else e.value,
        )
        per.setdefault(h.source, []).append((int(h.summary.get("n", 0)), float(best.config["lr_log10"])))
    out: dict[str, Any] = {}
    for source, rows in sorted(per.items()):
        rows.sort()
        n, lr = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        rho = spearmanr(n, lr).statistic if len(set(lr.tolist())) > 1 else float("nan")
        out[source] = {
            "best_lr_log10_by_size": [[int(a), round(float(b), 2)] for a, b in rows],
            "range_decades": round(float(lr.max() - lr.min()), 2),
            "spearman_size_vs_lr": None if not np.isfinite(rho) else round(float(rho), 3),
        }
    return out


def _append_bootstrap(journal: Path, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Adds this invocation's bootstrap summary to ``journal``; returns the totals over all of them."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    with open(journal, "a") as out:
        out.write(json.dumps(dict(summary)) + "\n")
    rows = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
    return {
        "invocations": len(rows),
        "trials": int(sum(r["trials"] for r in rows)),
        "wall_seconds": round(float(sum(r["wall_seconds"] for r in rows)), 1),
        "workers": int(rows[-1]["workers"]),
    }


def _regret(methods: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Mean normalised regret per method at trials 1, 3, 5 and 10."""
    at = (1, 3, 5, 10)
    return {m: {str(t): row[f"regret@{t}"] for t in at if f"regret@{t}" in row} for m, row in methods.items()}


def _bootstrap(
    specs: list[str],
    configs: int,
    epochs: int,
    tracking_uri: str,
    artifact_root: str | None,
    work: Path,
    echo: Any,
    workers: int,
) -> dict[str, Any]:
    """Trains (or resumes) the shared design on every dataset; the totals over every invocation."""
    from agent.pipeline.bootstrap import run_bootstrap

    echo(f"paper003-images: {len(specs)} datasets x {configs} configurations of cnn, {epochs} epochs each")
    boot = run_bootstrap("cnn", ordered(specs), configs, epochs, 0, tracking_uri, artifact_root, echo, workers)
    if boot["failed"]:
        from agent.errors import StudyFailedError

        first = boot["failed"][0]
        raise StudyFailedError(f"{len(boot['failed'])} bootstrap studies failed ({first}, ...): rerun to resume")
    return _append_bootstrap(work / "bootstrap.jsonl", boot)


def run_paper003_images(
    kb: Any,
    tracking_uri: str,
    artifact_root: str | None,
    work: Path,
    meta_features: Mapping[str, Any],
    epochs: int = EPOCHS,
    configs: int = CONFIGS,
    workers: int = 2,
    sources: tuple[str, ...] = IMAGE_SOURCES,
    echo: Callable[[str], None] = print,
    fractions: tuple[float, ...] = FRACTIONS,
) -> dict[str, Any]:
    """Bootstraps the meta-dataset into the store (or resumes it), then evaluates learned against
    hand-crafted meta-features on it, leaving out the target's source (the issue's protocol) and,
    second, only the target (paper 003's own setting); returns the report of
    ``metrics/paper003_images.json``."""
    from agent.pipeline.evaluation import stage_evaluate
    from agent.pipeline.export import load_export
    from agent.pipeline.stages import stage_distances, stage_export

    start = time.perf_counter()
    totals = _bootstrap(
        image_specs(sources, fractions), configs, epochs, tracking_uri, artifact_root, work, echo, workers
    )
    export, distances = work / "export", work / "distances.json"
    stage_export(kb, {"job": "cnn", "min_datasets": 4}, export)
    stage_distances({"normalisation": "rank"}, export, distances)
    datasets = load_export(export)
    n_sources = len(set(h.source for h in datasets))
    echo(f"paper003-images: evaluating on {len(datasets)} datasets of {n_sources} sources")
    settings = evaluate_settings(n_sources, workers)
    report = stage_evaluate(
        settings, meta_features, work / "evaluate.json", work / "plots", export, distances, work / "evaluate", echo
    )
    echo("paper003-images: the paper's own setting, other subsamples of the target's source in its history")
    own = stage_evaluate(
        {**settings, "holdout": "dataset", "folds": 5},
        meta_features,
        work / "evaluate-dataset.json",
        work / "plots-dataset",
        export,
        distances,
        work / "evaluate-dataset",
        echo,
    )
    out = _report(sources, datasets, epochs, report, own)
    wings = (str(meta_features.get("aggregator", "mean")), *settings["wings"])
    out["placing_seconds"] = placing_seconds(datasets, meta_features, wings)
    return {**out, "bootstrap": totals, "seconds": round(time.perf_counter() - start, 1)}


def _report(
    sources: tuple[str, ...], datasets: list[Any], epochs: int, report: Mapping[str, Any], own: Mapping[str, Any]
) -> dict[str, Any]:
    from agent.pipeline.evaluation_tables import choose_meta_features

    methods = report["methods"]
    return {
        "protocol": (
            f"paper 003 (section 5.1) at this machine's scale: {len(sources)} image sources ("
            + ", ".join(sources)
            + ") each at stratified fractions 10%, 20%, ..., 100% (fraction i/10 drawn with seed i), "
            f"{len(datasets)} datasets; the cnn job's Table-1 space on one shared Sobol design of {report['configs']} "
            f"configurations, each trained {epochs} epochs on a stratified 80/20 split with `tune-agent bootstrap`; "
            "objective validation error. Then the evaluate stage's protocol with one fold per source: "
            + report["protocol"]
        ),
        "datasets": len(datasets),
        "dataset_names": [h.name for h in datasets],
        "sources": sorted(set(h.source for h in datasets)),
        "configs": report["configs"],
        "epochs": epochs,
        "k": report["k"],
        "budget": report["budget"],
        "rank_correlation": report["rank_correlation"],
        "regret": _regret(methods),
        "p_vs_cold": {
            m: {str(t): row[f"p_vs_cold@{t}"] for t in (1, 3, 5, 10) if f"p_vs_cold@{t}" in row}
            for m, row in methods.items()
            if m != "cold"
        },
        "learned_vs_handcrafted": report["learned_vs_handcrafted"],
        "far_targets": report["far_targets"],
        "size_effect": size_effect(datasets),
        "same_source_history": {
            "protocol": own["protocol"],
            "rank_correlation": own["rank_correlation"],
            "regret": _regret(own["methods"]),
            "learned_vs_handcrafted": own["learned_vs_handcrafted"],
            "auto_choice": choose_meta_features(own),
        },
        "auto_choice": choose_meta_features(report),
        "evaluate_seconds": round(float(report["seconds"]) + float(own["seconds"]), 1),
    }


def settle_choice(
    kb: Any,
    report: Mapping[str, Any],
    work: Path,
    models_dir: Path,
    meta_features: Mapping[str, Any],
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Writes the verdict for the cnn job's space into ``models_dir`` (and, when the learned
    extractor won, that extractor trained on the whole image history), then publishes the folder as
    the store's cnn meta-models: a cnn study with ``--warm-start auto`` on that store follows it."""
    from agent.jobs import load_job
    from agent.pipeline.stages import stage_train
    from agent.tuning.published import scope_of
    from agent.tuning.source_models import update_for_job
    from agent.tuning.warm_choice import write_choice

    scope = scope_of("cnn", load_job("cnn").space)
    if report["auto_choice"]["method"] == "learned":
        stage_train(
            kb,
            meta_features,
            models_dir,
            work / "train_metafeatures.json",
            work / "plots" / "learning.csv",
            work / "export",
            work / "distances.json",
        )
    write_choice(models_dir, report["auto_choice"], scope)
    done = update_for_job(kb, models_dir, "cnn", progress=echo)
    return {"scope": scope, "version": done.get("published"), "models_dir": str(models_dir)}


def placing_seconds(datasets: list[Any], meta_features: Mapping[str, Any], wings: tuple[str, ...]) -> dict[str, float]:
    """What each kind of meta-features costs a study that places its dataset: the mean seconds (one
    torch thread) to compute the hand-crafted statistics and to embed the sample with an extractor of
    each aggregator ``wings`` names (a forward pass costs the same whatever the weights), over the
    history's samples."""
    import torch

    from agent.meta.handcrafted import handcrafted_metafeatures
    from agent.meta.siamese import ExtractorConfig, MetaFeatureExtractor, MetaFeatureNet

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    extractors = {}
    for wing in wings:
        config = ExtractorConfig.from_dict({**meta_features, "aggregator": wing})
        extractors["learned" if wing == wings[0] else f"learned:{wing}"] = MetaFeatureExtractor(
            MetaFeatureNet(config), config, 1.0
        )
    spent = dict.fromkeys(["handcrafted", *extractors], 0.0)
    try:
        for h in datasets:
            assert h.sample is not None, f"{h.name}: the export holds no sample"
            X, y = h.sample
            t0 = time.perf_counter()
            handcrafted_metafeatures(X, y, h.summary)
            spent["handcrafted"] += time.perf_counter() - t0
            for name, extractor in extractors.items():
                t0 = time.perf_counter()
                extractor.embed(X, y, h.kind, h.num_classes)
                spent[name] += time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    return {name: round(total / len(datasets), 4) for name, total in spent.items()}
