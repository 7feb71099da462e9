"""The meta-model pipeline's stages (`dvc repro` runs them; see dvc.yaml), and `neighbors`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from agent.cli.options import json_option, kb_for, params_option, talks, tracking_option
from agent.registry import WARM_STARTS


@click.group()
def meta() -> None:
    """Stages of the meta-model pipeline (run by `dvc repro`; see dvc.yaml)."""


@meta.command("export")
@click.option("--out", default="data/export", show_default=True)
@params_option
@tracking_option
def meta_export(out: str, params_file: str, tracking_uri: str | None) -> None:
    """Export trials, dataset samples and summaries from the tracking store."""
    from agent.pipeline.stages import load_params, stage_export

    n = stage_export(kb_for(tracking_uri), load_params(Path(params_file)).get("export", {}), Path(out))
    click.echo(f"exported {n} historical datasets to {out}")


@meta.command("source-models")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--job", default=None, help="The job whose history to model [default: params.yaml export.job].")
@params_option
@tracking_option
def meta_source_models(models_dir: str, job: str | None, params_file: str, tracking_uri: str | None) -> None:
    """Fit and store the history's source GPs, signal checks and portfolios (models/source_models.jsonl):
    what transfer surrogates load instead of fitting in every study. Only what is new is fitted;
    `meta publish` (the last stage) publishes them with the other meta-models."""
    from agent.pipeline.stages import load_params
    from agent.tuning.source_models import update_for_job

    job = job or load_params(Path(params_file)).get("export", {}).get("job", "mlp")
    click.echo(
        json.dumps(update_for_job(kb_for(tracking_uri), models_dir, str(job), progress=click.echo, publish=False))
    )


@meta.command("publish")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--job", default=None, help="The job whose meta-models to publish [default: params.yaml export.job].")
@params_option
@tracking_option
def meta_publish(models_dir: str, job: str | None, params_file: str, tracking_uri: str | None) -> None:
    """Publish the job's meta-models (source models, extractor, index, TNP, warm-start choice) to the
    tracking store as a new version, when anything changed: what every other folder and teammate loads."""
    from agent.pipeline.stages import load_params
    from agent.tuning.heartbeat import Heartbeat
    from agent.tuning.source_models import update_for_job

    job = job or load_params(Path(params_file)).get("export", {}).get("job", "mlp")
    with Heartbeat(click.echo) as beat:
        beat.phase(f"publishing the meta-models of {job}: reading the history, fitting what changed")
        done = update_for_job(kb_for(tracking_uri), models_dir, str(job), progress=beat)
    click.echo(json.dumps(done))
    if "not_published" in done:
        raise SystemExit(1)


@meta.command("distances")
@params_option
def meta_distances(params_file: str) -> None:
    """Target distances between historical datasets (paper 003 eq. 2, or EMD)."""
    from agent.pipeline.stages import DISTANCES_FILE, load_params, stage_distances

    D = stage_distances(load_params(Path(params_file)).get("distances", {}))
    click.echo(f"wrote {DISTANCES_FILE}: {len(D)} x {len(D)}")


@meta.command("train")
@click.option("--models-dir", default="models", show_default=True)
@params_option
@tracking_option
def meta_train(models_dir: str, params_file: str, tracking_uri: str | None) -> None:
    """Train the Siamese meta-feature extractor (logged to MLflow)."""
    from agent.pipeline.stages import load_params, stage_train

    params = load_params(Path(params_file)).get("meta_features", {})
    summary = stage_train(
        kb_for(tracking_uri),
        params,
        Path(models_dir),
        Path("metrics/train_metafeatures.json"),
        Path("plots/metafeature_learning.csv"),
    )
    click.echo(json.dumps(summary))


@meta.command("train-transfer")
@click.option("--models-dir", default="models", show_default=True)
@params_option
def meta_train_transfer(models_dir: str, params_file: str) -> None:
    """Meta-train the Transferable Neural Process surrogate on the exported history."""
    from agent.pipeline.metamodels import stage_train_transfer
    from agent.pipeline.stages import load_params

    params = load_params(Path(params_file)).get("transfer", {})
    click.echo(
        json.dumps(
            stage_train_transfer(
                params,
                Path(models_dir),
                Path("metrics/train_transfer.json"),
                progress=lambda line: click.echo(line, err=True),
            )
        )
    )


@click.command("evaluate")
@params_option
def evaluate_cmd(params_file: str) -> None:
    """Leave-one-source-out warm-start replay of every dataset; writes metrics/warmstart.json."""
    from agent.pipeline.evaluation import stage_evaluate
    from agent.pipeline.stages import load_params

    params = load_params(Path(params_file))
    report = stage_evaluate(
        params.get("evaluate", {}),
        params.get("meta_features", {}),
        Path("metrics/warmstart.json"),
        Path("plots"),
        choice_dir=Path("models"),
    )
    click.echo(
        json.dumps(
            {
                "datasets": report["datasets"],
                "sources": report["sources"],
                "rank_correlation": {m: report["rank_correlation"][m]["mean"] for m in ("handcrafted", "learned")},
                "regret@5": {m: v.get("regret@5") for m, v in report["methods"].items()},
                "auto": report["auto_choice"]["method"],
            }
        )
    )


@click.command()
@click.option("--dataset", required=True, help="Dataset whose nearest historical datasets to list.")
@click.option("--job", default="mlp", show_default=True)
@click.option("--label", default=None)
@click.option("--drop", multiple=True, help="A .csv/.parquet column to leave out (repeatable).")
@click.option(
    "--warm-start",
    type=click.Choice([c for c in WARM_STARTS.choices() if c != "none"]),
    default="auto",
    show_default=True,
)
@click.option("--k", type=int, default=3, show_default=True)
@click.option("--models-dir", default="models", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@tracking_option
@json_option
@talks("loading the dataset and the history", log=True)
def neighbors(
    dataset: str,
    job: str,
    label: str | None,
    drop: tuple[str, ...],
    warm_start: str,
    k: int,
    models_dir: str,
    seed: int,
    tracking_uri: str | None,
    as_json: bool,
) -> None:
    """Print the nearest historical datasets, their distances and best configurations: those a
    `start` with the same options would seed from, with the distances it records."""
    from agent.config import StudyRequest
    from agent.tuning.service import preview_warm_start

    req = StudyRequest(
        dataset=dataset,
        job=job,
        label=label,
        drop=drop,
        warm_start=warm_start,
        k=k,
        models_dir=models_dir,
        seed=seed,
        tracking_uri=tracking_uri,
    )
    from agent.tuning.heartbeat import Heartbeat

    with Heartbeat(lambda line: click.echo(line, err=True)) as beat:  # stdout stays the answer (or JSON)
        warm, job_obj, ds = preview_warm_start(req, kb_for(tracking_uri, reads=True), beat)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "dataset": ds.name,
                    "job": job_obj.name,
                    "method": warm.method,
                    "message": warm.message,
                    "far_from_history": warm.far,
                    "distance_ratio": warm.distance_ratio,
                    "neighbours": [
                        {
                            "dataset": n.name,
                            "distance": n.distance,
                            "best_value": n.best_value,
                            "best_config": dict(n.best_config),
                        }
                        for n in warm.neighbours
                    ],
                },
                indent=2,
            )
        )
        return
    click.echo(warm.message.replace("; starting cold", "; a study would start cold"))  # a query starts nothing
    for n in warm.neighbours:
        click.echo(f"{n.distance:10.4g}  {n.name}  best={n.best_value:.5g}  {json.dumps(dict(n.best_config))}")


COMMANDS = [meta, evaluate_cmd, neighbors]
