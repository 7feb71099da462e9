"""``tune-agent-bench paper003-images``: paper 003's claim tested on its own protocol
(:mod:`agent.pipeline.paper003_images`)."""

from __future__ import annotations

from pathlib import Path

import click

from agent.cli.options import kb_for, params_option, write_json

CAMPAIGN = Path("data/paper003")


@click.command("paper003-images")
@click.option(
    "--tracking-uri",
    default=f"sqlite:///{CAMPAIGN}/mlflow.db",
    show_default=True,
    help="The store the image meta-dataset is trained into (its own: the export reads every cnn study there).",
)
@click.option("--artifact-root", default=str(CAMPAIGN / "artifacts"), show_default=True)
@click.option("--work", default=str(CAMPAIGN), show_default=True, help="The export, journals and plots.")
@click.option("--epochs", type=int, default=7, show_default=True, help="Epochs of every configuration.")
@click.option("--configs", type=int, default=64, show_default=True, help="The shared Sobol design's size.")
@click.option("--workers", type=int, default=2, show_default=True, help="Studies (and replays) side by side.")
@click.option(
    "--models-dir",
    default=str(CAMPAIGN / "models"),
    show_default=True,
    help="Where the verdict for the cnn job's space (warm_start.json) and, when the learned extractor "
    "wins, that extractor go; both are then published to the store's cnn meta-models.",
)
@click.option("--out", default="metrics/paper003_images.json", show_default=True)
@params_option
def bench_paper003_images(
    tracking_uri: str,
    artifact_root: str,
    work: str,
    epochs: int,
    configs: int,
    workers: int,
    models_dir: str,
    out: str,
    params_file: str,
) -> None:
    """Learned against hand-crafted meta-features on 50 subsampled image datasets (paper 003's protocol)."""
    from agent.config import check_positive
    from agent.knowledge import make_store_folder
    from agent.pipeline.paper003_images import run_paper003_images, settle_choice
    from agent.pipeline.stages import load_params

    for option, value in (("--epochs", epochs), ("--configs", configs), ("--workers", workers)):
        check_positive(option, value)
    mf = load_params(Path(params_file)).get("meta_features", {})
    made = make_store_folder(tracking_uri)
    if made is not None:
        click.echo(f"tracking store folder {made} did not exist: made it")
    kb = kb_for(tracking_uri, artifact_root)
    kb.open()
    report = run_paper003_images(
        kb, tracking_uri, artifact_root, Path(work), mf, epochs, configs, workers, echo=click.echo
    )
    report["published"] = settle_choice(kb, report, Path(work), Path(models_dir), mf, echo=click.echo)
    from agent.bench.fingerprint import engine_fingerprint, environment

    report["command"] = "tune-agent-bench paper003-images"
    report["engine"] = engine_fingerprint("pipeline/paper003_images.py")
    report["environment"] = environment()
    click.echo(f"wrote {write_json(Path(out), report)}")
    rc = report["rank_correlation"]
    click.echo(
        f"rank correlation learned {rc['learned']['mean']:.3f} vs hand-crafted {rc['handcrafted']['mean']:.3f}; "
        f"regret@1 learned {report['regret']['learned']['1']:.3f} vs hand-crafted "
        f"{report['regret']['handcrafted']['1']:.3f}; --warm-start auto for cnn: {report['auto_choice']['method']}"
    )


COMMANDS = [bench_paper003_images]
