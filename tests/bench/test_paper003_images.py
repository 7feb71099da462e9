"""Paper 003's image protocol: its meta-dataset, the verdict it writes for the cnn job's space,
and (``-m slow``) the campaign end to end on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.pipeline.paper003_images import FRACTIONS, IMAGE_SOURCES, image_specs, ordered


def test_the_meta_dataset_is_five_image_sources_at_ten_stratified_fractions() -> None:
    from agent.data import load_dataset

    specs = image_specs()
    assert len(specs) == 50 and len(set(specs)) == 50
    assert FRACTIONS == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    for source in IMAGE_SOURCES:
        mine = [load_dataset(s) for s in specs if s.startswith(source + "&") or s == source]
        sizes = [d.n for d in mine]
        assert len(mine) == 10 and sizes == sorted(sizes) and len(set(sizes)) == 10
        whole = mine[-1]
        assert whole.kind in ("image", "sequence") and whole.n <= 800
        for d, f in zip(mine, FRACTIONS):  # stratified: every class keeps its share
            counts = np.bincount(d.y, minlength=whole.num_classes)
            expected = np.maximum(1, np.round(f * np.bincount(whole.y, minlength=whole.num_classes)))
            assert np.array_equal(counts, expected), d.name
    assert ordered(specs)[:5] == list(IMAGE_SOURCES)  # the whole bases first: the longest studies


def test_bars_is_learnable_and_not_trivial() -> None:
    """The synthetic source's difficulty is set: a linear model on its pixels beats chance (1/4) by
    far and stays well short of perfect."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    from agent.data import load_dataset

    d = load_dataset("bars?rows=800")
    score = cross_val_score(LogisticRegression(max_iter=500), d.X.reshape(d.n, -1), d.y, cv=3).mean()
    assert 0.4 < score < 0.95


def test_the_verdict_applies_to_its_own_job_and_space_only(tmp_path: Path) -> None:
    from agent.jobs import load_job
    from agent.knowledge.memory import InMemoryKnowledgeBase
    from agent.tuning.published import meta_models_dir, scope_of
    from agent.tuning.warm_choice import choice_scope, evaluated_choice, write_choice
    from agent.tuning.warmstart import _featurizer

    cnn, mlp = load_job("cnn"), load_job("mlp")
    models = tmp_path / "models"
    write_choice(models, {"method": "handcrafted", "why": "tables"}, scope_of("mlp", mlp.space))
    assert choice_scope(models) == f"mlp/{mlp.space.signature()}"
    assert evaluated_choice(models, scope_of("mlp", mlp.space))["method"] == "handcrafted"
    assert evaluated_choice(models, scope_of("cnn", cnn.space)) is None
    _, note = _featurizer("auto", models, scope_of("mlp", mlp.space))
    assert note.startswith("auto chose them: tables")
    _, note = _featurizer("auto", models, scope_of("cnn", cnn.space))
    assert "auto chose them" not in note

    kb = InMemoryKnowledgeBase()  # nothing published: a cnn study reads none of mlp's files
    assert meta_models_dir(kb, models, "mlp", mlp.space) == models
    other = meta_models_dir(kb, models, "cnn", cnn.space)
    assert other != models and not other.exists()

    (tmp_path / "legacy").mkdir()  # a verdict that names no scope applies to any, as before
    (tmp_path / "legacy" / "warm_start.json").write_text(json.dumps({"method": "learned", "why": "old"}))
    assert evaluated_choice(tmp_path / "legacy", scope_of("cnn", cnn.space))["method"] == "learned"
    assert meta_models_dir(kb, tmp_path / "legacy", "cnn", cnn.space) == tmp_path / "legacy"


@pytest.mark.slow
def test_the_campaign_end_to_end_on_a_real_store(store, tmp_path: Path) -> None:
    """Two image sources at two fractions, a 12-configuration design of one epoch: the bootstrap
    fills the store, the evaluation writes the report's keys, the verdict is published to the cnn
    meta-models, and a rerun trains nothing again."""
    from agent.jobs import load_job
    from agent.pipeline.paper003_images import run_paper003_images, settle_choice
    from agent.tuning.published import meta_models_dir
    from agent.tuning.warm_choice import evaluated_choice

    kb = store.kb()
    kb.open()
    lines: list[str] = []
    mf = {"steps": 20, "pairs_per_step": 4, "meta_dim": 4, "hidden": 16, "tau": 8}
    args = (kb, store.uri, store.artifacts, tmp_path / "work", mf, 1, 12, 1)
    small = ("digits?rows=100", "bars?rows=100")
    report = run_paper003_images(*args, sources=small, echo=lines.append, fractions=(0.5, 1.0))
    assert report["datasets"] == 4 and report["sources"] == ["bars", "digits"]
    assert set(report["rank_correlation"]) >= {"learned", "handcrafted"}
    for method in ("cold", "portfolio", "handcrafted", "learned"):
        assert set(report["regret"][method]) == {"1", "3", "5", "10"}
        assert all(0.0 <= v <= 1.0 for v in report["regret"][method].values())
    assert set(report["learned_vs_handcrafted"]["p_at"]) == {"1", "3", "5", "10"}
    assert report["bootstrap"]["trials"] == 48 and report["auto_choice"]["method"] in ("learned", "handcrafted")
    assert set(report["size_effect"]) == {"bars", "digits"}
    assert set(report["placing_seconds"]) == {"handcrafted", "learned", "learned:bilstm"}
    own = report["same_source_history"]  # paper 003's setting: the target's siblings are history
    assert own["protocol"].startswith("leave-one-dataset-out") and set(own["regret"]["learned"]) == {
        "1",
        "3",
        "5",
        "10",
    }

    published = settle_choice(kb, report, tmp_path / "work", tmp_path / "models", mf, echo=lines.append)
    assert published["version"] is not None
    cnn = load_job("cnn")
    fetched = meta_models_dir(kb, tmp_path / "elsewhere", "cnn", cnn.space)  # another folder: from the store
    assert evaluated_choice(fetched, published["scope"])["method"] == report["auto_choice"]["method"]

    again = run_paper003_images(*args, sources=small, echo=lines.append, fractions=(0.5, 1.0))
    assert again["bootstrap"]["invocations"] == 2 and again["bootstrap"]["trials"] == 48
    assert again["regret"] == report["regret"]
