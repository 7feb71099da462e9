"""Warm start end to end: tiny bootstrap → real `dvc repro` in a temp copy → warm-started study."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(900)  # the module fixture bootstraps and runs `dvc repro` once

SPECS = [
    "wine",
    "wine?fraction=0.5&seed=1",
    "iris",
    "iris?fraction=0.6&seed=1",
    "breast-cancer?fraction=0.3&seed=2",
    "breast-cancer?fraction=0.2&seed=1",
]
TINY = {
    "export": {"job": "mlp", "min_datasets": 4},
    "distances": {"normalisation": "rank", "emd": False},
    "meta_features": {
        "aggregator": "mean",
        "meta_dim": 8,
        "hidden": 16,
        "tau": 16,
        "pairs_per_step": 4,
        "steps": 25,
        "lr": 0.003,
        "weight_decay": 0.0,
        "seed": 0,
    },
    "transfer": {
        "hidden": 16,
        "heads": 2,
        "meta_steps": 10,
        "inner_steps": 1,
        "inner_lr": 0.001,
        "outer_lr": 0.003,
        "n_initial": 2,
        "seed": 0,
    },
    "evaluate": {"k": 2, "budget": 4, "folds": 2, "seeds": 1, "acquisition": "ei", "wings": [], "workers": 1},
}


def _env(store) -> dict[str, str]:
    env = dict(os.environ)
    env["MLFLOW_TRACKING_URI"] = store.uri
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _repo_copy(dst: Path) -> Path:
    for item in ("agent", "dvc.yaml", ".dvcignore"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dst / item)
    (dst / "params.yaml").write_text(yaml.safe_dump(TINY))
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    subprocess.run([str(Path(sys.executable).with_name("dvc")), "init", "-q"], cwd=dst, check=True)
    return dst


def _dvc(repo: Path, store, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("dvc"))
    return subprocess.run([exe, *args], cwd=repo, env=_env(store), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny bootstrapped store and a repo copy whose pipeline has been reproduced."""
    from tests.conftest import Store

    root = tmp_path_factory.mktemp("kb")
    store = Store(root)
    from agent.pipeline.bootstrap import run_bootstrap

    summary = run_bootstrap(
        "mlp",
        SPECS,
        configs=6,
        epochs=1,
        seed=0,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
        echo=lambda _: None,
    )
    assert summary["studies"] == len(SPECS)
    repo = _repo_copy(root / "repo")
    res = _dvc(repo, store, "repro")
    assert res.returncode == 0, res.stdout + res.stderr
    return store, repo


def test_bootstrap_shares_one_configuration_set(built) -> None:
    store, _ = built
    from agent.knowledge.history import load_history

    history = load_history(store.kb(), job="mlp", with_samples=False)
    assert len(history) == len(SPECS)
    configs = [sorted(json.dumps(dict(e.config), sort_keys=True) for e in h.evaluations) for h in history]
    assert all(c == configs[0] for c in configs) and len(configs[0]) == 6


def test_pipeline_outputs_and_second_repro_is_a_no_op(built) -> None:
    store, repo = built
    for path in (
        "models/metafeature_extractor.pt",
        "models/metafeature_index.json",
        "data/distances.json",
        "models/tnp.pt",
        "models/warm_start.json",
        "models/source_models.jsonl",
        "metrics/warmstart.json",
        "metrics/train_metafeatures.json",
        "plots/regret.csv",
        "plots/regret.png",
    ):
        assert (repo / path).exists(), path
    report = json.loads((repo / "metrics/warmstart.json").read_text())
    assert report["datasets"] == len(SPECS) and report["sources"] == 3 and report["folds"] == 2
    for kind in ("learned", "handcrafted"):
        assert -1.0 <= report["rank_correlation"][kind]["mean"] <= 1.0
    for method in ("cold", "portfolio", "learned", "handcrafted", "learned+prior"):
        m = report["methods"][method]
        assert set(m) >= {"regret@1", "regret@3"} and all(0.0 <= m[f"regret@{t}"] <= 1.0 for t in (1, 3))
        assert method == "cold" or "p_vs_cold@3" in m
    from agent.jobs import load_job
    from agent.tuning.published import scope_of

    record = store.kb().current_meta_models(scope_of("mlp", load_job("mlp").space))  # `dvc repro` published them
    assert record is not None and {
        "files/metafeature_extractor.pt",
        "files/metafeature_index.json",
        "files/tnp.pt",
        "files/warm_start.json",
    } <= set(record.files), record
    assert any(name.startswith("source_models/") for name in record.files)
    journal = [json.loads(line) for line in (repo / "data/evaluate/journal.jsonl").read_text().splitlines()]
    assert sorted(e["target"] for e in journal) == sorted(SPECS)  # every dataset was a target once
    again = _dvc(repo, store, "repro")
    assert again.returncode == 0
    ran = [line for line in again.stdout.splitlines() if line.startswith("Running stage")]
    assert ran == ["Running stage 'export':"], again.stdout  # export is re-checked, nothing else reruns
    # A meta_features change reruns only the stages that use it.
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["meta_features"]["lr"] = 0.002
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    status = _dvc(repo, store, "status")
    assert "train-metafeatures" in status.stdout and "evaluate" in status.stdout
    assert "distances:" not in status.stdout


def test_evaluate_resumes_from_its_journal(built, tmp_path) -> None:
    """A stage killed mid-way (a target missing, a line cut) replays only what is missing and
    reports the same figures as the uninterrupted run."""
    from agent.pipeline.evaluation import stage_evaluate

    _, repo = built
    journal = tmp_path / "evaluate"
    shutil.copytree(repo / "data/evaluate", journal)
    lines = (journal / "journal.jsonl").read_text().splitlines()
    (journal / "journal.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])
    said: list[str] = []
    report = stage_evaluate(
        TINY["evaluate"],
        TINY["meta_features"],
        tmp_path / "warmstart.json",
        tmp_path / "plots",
        export=repo / "data/export",
        distances=repo / "data/distances.json",
        journal=journal,
        progress=said.append,
    )
    assert f"{len(SPECS) - 1} of {len(SPECS)} targets already" in " ".join(said), said
    assert sum("evaluate: [" in line for line in said) == 1  # one target replayed
    committed = json.loads((repo / "metrics/warmstart.json").read_text())
    assert report["methods"] == committed["methods"]
    assert report["rank_correlation"] == committed["rank_correlation"]


def test_warm_started_study_picks_the_planted_neighbour(built, cli) -> None:
    store, repo = built
    args = [
        "--dataset",
        "wine?fraction=0.7&seed=3",
        "--job",
        "mlp",
        "--trials",
        "3",
        "--epochs",
        "1",
        "--tracking-uri",
        store.uri,
        "--artifact-root",
        store.artifacts,
        "--models-dir",
        str(repo / "models"),
    ]
    res = cli("neighbors", *args[:4], "--warm-start", "handcrafted", "--k", "2", "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    assert res.out.splitlines()[1].split()[1].startswith("wine")
    res = cli("start", *args, "--warm-start", "handcrafted", "--k", "2", "--study-name", "warm-hc")
    assert res.code == 0, res.err
    kb = store.kb()
    study = kb.find_study("warm-hc")
    trials = kb.trials(study)
    assert trials[0].origin.startswith("warm:handcrafted:wine")
    record = json.loads(kb.study_tags(study)["warm_start"])
    assert record["method"] == "handcrafted" and record["prior_mean"] == "neighbours"
    assert record["neighbours"][0]["name"].startswith("wine")
    assert not record["neighbours"][1]["name"].startswith("wine")  # a second source before a second wine
    assert record["far"] is False and record["distance_ratio"] > 0
    assert "x the history's median nearest-neighbour distance" in res.out
    assert trials[2].origin == "bo:logei"  # the neighbour prior mean drove a real BO step
    from mlflow import MlflowClient  # the UI's description lists the neighbours with their distances

    note = MlflowClient(store.uri).get_run(study.study_id).data.tags["mlflow.note.content"]
    first = record["neighbours"][0]
    assert (
        "| neighbour | distance | best val_loss |" in note
        and f"| `{first['name']}` | {first['distance']:.4g} |" in note
    )
    # A study reopened in another command (resume, ask) gets the same seeds from its run's record.
    assert cli("create", *args, "--warm-start", "handcrafted", "--k", "2", "--study-name", "warm-ask").code == 0
    asked = json.loads(cli("ask", "warm-ask", "--tracking-uri", store.uri).out)
    assert asked["origin"] == trials[0].origin and asked["config"] == dict(trials[0].config)
    res = cli("start", *args, "--warm-start", "learned", "--study-name", "warm-learned")
    assert res.code == 0, res.err
    assert "learned meta-features" in res.out
    assert kb.trials(kb.find_study("warm-learned"))[0].origin.startswith("warm:learned:")


def test_auto_uses_the_meta_features_the_evaluation_chose(built, cli, tmp_path) -> None:
    store, repo = built
    choice = json.loads((repo / "models/warm_start.json").read_text())
    assert choice["method"] in ("learned", "handcrafted") and "rank correlation" in choice["why"]
    models = tmp_path / "models"
    shutil.copytree(repo / "models", models)
    base = [
        "start",
        "--dataset",
        "wine?fraction=0.7&seed=3",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--tracking-uri",
        store.uri,
        "--artifact-root",
        store.artifacts,
        "--models-dir",
        str(models),
        "--warm-start",
        "auto",
    ]
    kb = store.kb()
    for method in ("handcrafted", "learned"):
        (models / "warm_start.json").write_text(json.dumps({"method": method, "why": f"{method} won here"}))
        res = cli(*base, "--study-name", f"auto-{method}")
        assert res.code == 0, res.err
        assert kb.trials(kb.find_study(f"auto-{method}"))[0].origin.startswith(f"warm:{method}:")
        assert (f"auto chose them: {method} won here" in res.out) == (method == "handcrafted"), res.out


def test_hts_takes_the_source_study_it_is_told(built, cli) -> None:
    store, _ = built
    source = next(s for s in store.kb().list_studies() if s.name.startswith("bootstrap-") and s.dataset == "iris")
    base = [
        "start",
        "--dataset",
        "wine?fraction=0.7&seed=3",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--tracking-uri",
        store.uri,
        "--artifact-root",
        store.artifacts,
        "--sampler",
        "hts",
    ]
    res = cli(*base, "--source", source.name, "--study-name", "hts-told")
    assert res.code == 0, res.err
    assert f"source iris (--source {source.name})" in res.out
    settings = store.kb().find_study("hts-told").settings
    assert settings["source"] == source.name  # a resume plans the same source
    bad = cli(*base, "--source", "no-such-study", "--study-name", "hts-bad")
    assert (
        bad.code == 2
        and "--source: no study named 'no-such-study'" in bad.err
        and store.kb().find_study("hts-bad") is None
    )
    wrong = cli(*base[:-2], "--source", source.name)
    assert wrong.code == 2 and "--source names the source study of a sampler that maps one (--sampler hts)" in wrong.err


def test_fallbacks_say_so_in_one_line(built, cli, tmp_path) -> None:
    store, _ = built
    base = [
        "start",
        "--dataset",
        "iris?fraction=0.5&seed=7",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--tracking-uri",
        store.uri,
        "--artifact-root",
        store.artifacts,
    ]
    # a folder without models/: the extractor `dvc repro` published to the store is fetched and used
    res = cli(*base, "--warm-start", "learned", "--models-dir", str(tmp_path / "none"), "--study-name", "fb1")
    assert res.code == 0, res.err
    assert "learned meta-features" in res.out and "fetching version" in res.out, res.out
    from agent.tuning.warmstart import _featurizer

    featurizer, note = _featurizer("learned", tmp_path / "none")  # neither here nor published: one line says so
    assert featurizer.method == "handcrafted" and "no trained meta-feature extractor" in note
    featurizer, note = _featurizer("auto", tmp_path / "none")  # the default: hand-crafted by design, no nag
    assert featurizer.method == "handcrafted" and "run `dvc repro`" not in note
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    res = cli(*base[:-4], "--tracking-uri", empty, "--artifact-root", str(tmp_path / "a"), "--study-name", "fb2")
    assert res.code == 0 and "no history for job mlp" in res.out


def test_repro_on_an_empty_store_stops_with_one_line(tmp_path) -> None:
    from tests.conftest import Store

    store = Store(tmp_path)
    repo = _repo_copy(tmp_path / "repo")
    res = _dvc(repo, store, "repro", "export")
    assert res.returncode != 0
    assert "run `tune-agent bootstrap` first" in res.stdout + res.stderr
    assert not (repo / "models" / "metafeature_extractor.pt").exists()


def test_a_starter_history_carries_the_bootstrap_to_a_fresh_store(built, cli, tmp_path) -> None:
    """Export the bootstrapped store to one file, import it into an empty store: the history
    (datasets, summaries, samples, meta-features, evaluations) reads back the same, and a second
    import skips what is there."""
    from agent.knowledge.history import load_history
    from tests.conftest import Store

    store, _ = built
    starter = tmp_path / "starter" / "mlp.npz"
    res = cli("bootstrap", "export", str(starter), "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    assert json.loads(res.out.splitlines()[-1])["studies"] == len(SPECS) and starter.stat().st_size < 1_000_000
    (tmp_path / "fresh").mkdir()
    fresh = Store(tmp_path / "fresh")
    models = tmp_path / "models"
    res = cli(
        "bootstrap",
        "starter",
        str(starter),
        "--tracking-uri",
        fresh.uri,
        "--artifact-root",
        fresh.artifacts,
        "--models-dir",
        str(models),
    )
    assert res.code == 0, res.err
    assert json.loads(res.out.splitlines()[-1])["imported"] == len(SPECS)
    # built once, here (bootstrap datasets that rank the shared configurations alike are one fit)
    assert re.search(rf"source models: {len(SPECS)} sources, [1-{len(SPECS)}] GP\(s\) fitted", res.out), res.out
    assert (models / "source_models.jsonl").is_file()

    def view(kb):
        return [
            (
                h.key,
                h.name,
                h.source,
                dict(h.summary),
                [(dict(e.config), e.value) for e in h.evaluations],
                h.sample[0].tolist(),
                h.sample[1].tolist(),
                h.metafeatures is not None,
            )
            for h in load_history(kb, job="mlp")
            if h.studies[0].startswith("bootstrap-")
        ]

    assert view(fresh.kb()) == view(store.kb())
    again = cli(
        "bootstrap",
        "starter",
        str(starter),
        "--tracking-uri",
        fresh.uri,
        "--artifact-root",
        fresh.artifacts,
        "--models-dir",
        str(models),
    )
    assert f"{len(SPECS)} sources, 0 GP(s) fitted" in again.out
    report = json.loads(again.out.splitlines()[-1])
    assert report["per_second"] is None and set(report["stages"]) == {"import_s", "source_models_s"}
    assert {k: v for k, v in report.items() if k not in ("per_second", "stages", "read_seconds")} | {"seconds": 0} == {
        "imported": 0,
        "skipped": len(SPECS),
        "seconds": 0,
    }
    res = cli(
        "neighbors",
        "--dataset",
        "wine?fraction=0.7&seed=3",
        "--job",
        "mlp",
        "--warm-start",
        "handcrafted",
        "--tracking-uri",
        fresh.uri,
    )
    assert res.code == 0 and "wine" in res.out.splitlines()[1]
    bad = cli("bootstrap", "starter", str(tmp_path / "none.npz"), "--tracking-uri", fresh.uri)
    assert bad.code == 2 and "starter history not found" in bad.err


def test_end_to_end_warm_start_evaluation_holds_out_whole_sources(built, cli, tmp_path) -> None:
    """`bench warmstart`: real studies on held-out sources, regret, Wilcoxon p-values, a journal."""
    store, _ = built
    params = tmp_path / "params.yaml"  # the fold meta-models' training kept short: their quality is not tested here
    params.write_text("meta_features: {steps: 20, pairs_per_step: 4}\ntransfer: {meta_steps: 20}\n")
    args = (
        "bench",
        "warmstart",
        "--tracking-uri",
        store.uri,
        "--targets",
        "2",
        "--seeds",
        "1",
        "--trials",
        "3",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--methods",
        "cold,default,learned,tnp",
        "--out",
        str(tmp_path),
        "--params",
        str(params),
    )
    res = cli(*args)
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "metrics" / "warmstart_e2e.json").read_text())
    assert report["history_sources"] == 3 and len(report["targets"]) == 2
    assert set(report["methods"]) == {"cold", "default", "learned", "tnp"}
    # the learned method's extractor and the TNP were trained per held-out source, without that source
    root = tmp_path / "data" / "bench-runs" / "warmstart_e2e-mlp-models"  # a folder per settings-and-code key
    assert len(sorted(root.glob("*/fold-*/metafeature_extractor.pt"))) == 2 and "extractor without" in res.out
    tnps = sorted(root.glob("*/fold-*/tnp.json"))
    assert len(tnps) == 2 and "tnp without" in res.out
    assert all(json.loads(p.read_text())["sources"] == 4 for p in tnps)  # 6 datasets, 2 of the held-out source
    journal = [
        json.loads(line) for line in next((tmp_path / "data" / "bench-runs").glob("*.jsonl")).read_text().splitlines()
    ]
    learned = [o for row in journal if row["method"] == "learned" for o in row["result"]["origins"]]
    assert learned and not any(o.startswith("warm:handcrafted") for o in learned), learned  # no fallback
    assert "p_vs_cold@1" in report["methods"]["default"] and "p_vs_cold@1" not in report["methods"]["cold"]
    assert all(0.0 <= v <= 1.0 for row in report["mean_curves"].values() for v in row)
    # the wall-clock view: regret at seconds since the study was asked, from each trial's end
    clock = report["wall_clock"]
    assert clock["runs"] == 2 and set(clock["methods"]) == {"cold", "default", "learned", "tnp"}
    for row in clock["methods"].values():
        assert len(row["regret"]) == len(clock["seconds"]) and all(0.0 <= v <= 1.0 for v in row["regret"])
        assert 0 < row["median_first_trial_s"] < row["median_run_s"]
    assert all(a >= b for a, b in zip(clock["methods"]["cold"]["regret"], clock["methods"]["cold"]["regret"][1:]))
    # source models built once before the runs: no study fitted a source GP
    assert "source models without" in res.out
    assert all(row["result"]["source_fits"] == 0 for row in journal)
    assert all(len(row["result"]["ended_s"]) == 3 for row in journal)
    again = cli(*args)  # everything is in the journal now
    assert again.code == 0 and "2 (target, seed) pairs already in" in again.out
    assert cli("bench", "warmstart", "--tracking-uri", store.uri, "--methods", "portfolio").code == 2
    missing = cli("bench", "warmstart", "--tracking-uri", store.uri, "--params", str(tmp_path / "nope.yaml"))
    assert missing.code == 2 and "no such file" in missing.err


@pytest.mark.slow  # a benchmark command's run: with the benchmarks, out of the default suite
def test_hts_pairs_bench_reports_the_evaluation_ratio(built, cli, tmp_path) -> None:
    """`bench hts`: real cold and HTS studies on the target, the source alone as history, a journal."""
    store, _ = built
    args = (
        "bench",
        "hts",
        "--tracking-uri",
        store.uri,
        "--pair",
        "iris",
        "wine",
        "--seeds",
        "1",
        "--trials",
        "4",
        "--n-init",
        "2",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--out",
        str(tmp_path),
    )
    res = cli(*args)
    assert res.code == 0, res.err
    report = json.loads((tmp_path / "metrics" / "hts_pairs_m2.json").read_text())
    pair = report["pairs"]["iris -> wine"]
    assert pair["source_study"].startswith("bootstrap-mlp-iris")
    cold, hts = (np.array(pair["mean_curves"][m]) for m in ("cold", "hts"))
    assert len(cold) == len(hts) == 4 and np.all(np.diff(cold) <= 0) and np.all(np.diff(hts) <= 0)
    assert pair["cold_final"] == pytest.approx(cold[-1], abs=1e-5)
    assert pair["ratio"] is None or pair["ratio"] == pytest.approx(pair["cold_trials"] / pair["hts_trials"], abs=0.01)
    journal = [
        json.loads(line)
        for line in next((tmp_path / "data" / "bench-runs").glob("hts_pairs-*.jsonl")).read_text().splitlines()
    ]
    origins = next(r["result"]["origins"] for r in journal if r["method"] == "hts")
    assert origins[:2] == ["init:lhs", "init:lhs"] and origins[2].startswith("hts:iris"), (
        origins
    )  # mapped from the source
    anchored = next(r["result"]["origins"] for r in journal if r["method"] == "hts-anchored")
    assert anchored[2].startswith("hts-anchored:iris"), anchored
    assert set(pair["anchored"]) == {"hts_final", "cold_trials", "hts_trials", "ratio", "seeds_reached"}
    assert set(pair["mean_curves"]) == {"cold", "hts", "hts-anchored"}
    again = cli(*args)
    assert again.code == 0 and "1 (pair, seed) already in" in again.out
    missing = cli(
        "bench", "hts", "--tracking-uri", store.uri, "--pair", "iris", "no-such-dataset", "--out", str(tmp_path)
    )
    assert missing.code == 2 and "no bootstrap study of no-such-dataset" in missing.err


def test_extra_datasets_keep_their_source_fold() -> None:
    """An extra dataset of a history source trains only the folds its source is out of; a source
    new to the history is dealt a fold round-robin, in sorted order."""
    import numpy as np

    from agent.bench.metafeature_data import extra_folds

    folds = extra_folds(["a", "a", "b", "c"], np.array([0, 0, 1, 0]), ["b", "a", "z", "y", "x"])
    assert folds.tolist() == [1, 0, 0, 1, 0]  # b -> 1, a -> 0; the new x, y, z dealt 0, 1, 0 in sorted order


@pytest.mark.slow  # a benchmark command's run: with the benchmarks, out of the default suite
def test_the_metafeature_data_bench_trains_on_extra_datasets_and_resumes(built, tmp_path) -> None:
    """`bench metafeature-data` on the tiny history with three extra datasets (two of its sources,
    one new): the hand-crafted reference and three learned arms replayed on every history dataset
    (never on an extra one); a second run reads every extractor from its cache."""
    from agent.bench.metafeature_data import run_metafeature_data
    from agent.knowledge import open_knowledge_base
    from agent.pipeline.bootstrap import run_bootstrap
    from agent.pipeline.export import export_history
    from tests.conftest import Store

    _, repo = built
    (tmp_path / "extra").mkdir()
    extra_store = Store(tmp_path / "extra")
    run_bootstrap(
        "mlp",
        ["wine?fraction=0.7&seed=3", "iris?fraction=0.8&seed=2", "digits?classes=0-2&fraction=0.2"],
        configs=6,
        epochs=1,
        seed=0,
        tracking_uri=extra_store.uri,
        artifact_root=extra_store.artifacts,
        echo=lambda _: None,
    )
    extra = tmp_path / "extra_export"
    assert export_history(open_knowledge_base(extra_store.uri, extra_store.artifacts), extra, "mlp") == 3
    said: list[str] = []
    report = run_metafeature_data(repo / "data/export", extra, TINY, tmp_path / "out", factor=2, say=said.append)
    arms = ["history", "history, steps x2", "history + extra, steps x2"]
    assert list(report["methods"]) == ["handcrafted", *arms]
    assert report["history"]["datasets"] == len(SPECS) and report["extra"]["datasets"] == 3
    for arm in arms:
        assert set(report["methods"][arm]) >= {"regret@1", "regret@3", "p_vs_handcrafted@3"}
        assert -1.0 <= report["rank_correlation"][arm] <= 1.0
    trained = [line for line in said if "training on" in line]
    assert len(trained) == 3 * 2  # three arms x two folds
    with_extra = [int(line.split("training on ")[1].split()[0]) for line in trained if "+ extra" in line]
    alone = [int(line.split("training on ")[1].split()[0]) for line in trained if "+ extra" not in line]
    assert sum(with_extra) - sum(alone[:2]) == 3 * (2 - 1)  # each extra trains the one fold its source is out of
    assert "replayed 6/6 targets" in said[-1]
    said.clear()
    again = run_metafeature_data(repo / "data/export", extra, TINY, tmp_path / "out", factor=2, say=said.append)
    assert not [line for line in said if "training on" in line]  # every extractor from the cache
    assert again["methods"] == report["methods"]
