"""Learned meta-feature extractor: paper 000 Fig. 6 two-group metric, aggregators, invariances,
save/load and embedding speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import Logger

from agent.errors import DatasetError
from agent.meta.extractor_train import train_extractor
from agent.meta.siamese import DatasetSample, ExtractorConfig, ExtractorError, MetaFeatureExtractor, MetaFeatureNet


class RecordingLogger(Logger):
    """Keeps every logged metric in memory, like an MLFlowLogger would record it."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: list[tuple[int | None, dict[str, float]]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def tabular_sample(seed: int, group: str) -> DatasetSample:
    """Group A: Gaussian class blobs (labels follow the features); group B: squared
    exponential noise with labels independent of the features. Widths vary."""
    rng = np.random.default_rng(seed)
    n, width = 200, int(rng.integers(4, 12))
    if group == "A":
        k = int(rng.integers(2, 5))
        y = rng.integers(0, k, n)
        X = rng.normal(0, 3, (k, width))[y] + rng.normal(0, 1, (n, width))
    else:
        k = 2
        y = rng.integers(0, k, n)
        X = rng.exponential(1.0, (n, width)) ** 2
    return DatasetSample(f"{group}{seed}", X.astype(np.float32), y, "tabular", k, group)


def group_distances(samples: list[DatasetSample]) -> np.ndarray:
    groups = np.array([s.group for s in samples])
    return (groups[:, None] != groups[None, :]).astype(float)


def pairwise(E: np.ndarray) -> np.ndarray:
    return np.linalg.norm(E[:, None] - E[None, :], axis=-1)


@pytest.fixture(scope="module")
def two_groups() -> dict[str, Any]:
    train = [tabular_sample(i, "A") for i in range(6)] + [tabular_sample(100 + i, "B") for i in range(6)]
    logger = RecordingLogger()
    config = ExtractorConfig(aggregator="mean", steps=200, tau=48, pairs_per_step=12, log_every=10)
    extractor, history = train_extractor(train, group_distances(train), config, logger=logger)
    return {"train": train, "extractor": extractor, "history": history, "logger": logger}


def test_two_groups_training_loss_falls(two_groups: dict[str, Any]) -> None:
    history = two_groups["history"]
    assert [h["step"] for h in history] == list(range(10, 201, 10))
    train = np.array([h["train_loss"] for h in history])
    val = np.array([h["val_loss"] for h in history])
    assert np.isfinite(train).all() and np.isfinite(val).all()
    k = len(history) // 5
    assert train[-k:].mean() < train[:k].mean() / 2
    assert val[-k:].mean() < val[:k].mean() / 2
    logged = two_groups["logger"].metrics
    assert [step for step, _ in logged] == [h["step"] for h in history]
    assert all(set(metrics) == {"train_loss", "val_loss"} for _, metrics in logged)
    assert logged[-1][1]["val_loss"] == pytest.approx(history[-1]["val_loss"])


def test_two_groups_separate_on_training_and_held_out(two_groups: dict[str, Any]) -> None:
    extractor: MetaFeatureExtractor = two_groups["extractor"]
    train = two_groups["train"]
    held = [tabular_sample(500 + i, "A") for i in range(4)] + [tabular_sample(600 + i, "B") for i in range(4)]
    for samples in (train, held):
        E = extractor.embed_many(samples)
        assert E.shape == (len(samples), 16)
        D, same = pairwise(E), group_distances(samples) == 0
        off = ~np.eye(len(samples), dtype=bool)
        assert D[same & off].mean() < 0.5 * D[~same].mean()
    # every held-out dataset's nearest training dataset is from its own group
    E_train, E_held = extractor.embed_many(train), extractor.embed_many(held)
    nearest = np.linalg.norm(E_held[:, None] - E_train[None], axis=-1).argmin(axis=1)
    assert [train[j].group for j in nearest] == [s.group for s in held]
    # embeddings are in the original distance units: across-group distance near 1
    assert 0.6 < pairwise(E_train)[:6, 6:].mean() < 1.4


def digits_samples() -> list[DatasetSample]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    samples = []
    for i, classes in enumerate([(0, 1), (2, 3, 4), (5, 6, 7, 8, 9)]):
        keep = np.isin(y, classes)
        labels = np.searchsorted(np.array(classes), y[keep])
        samples.append(DatasetSample(f"digits{i}", X[keep][:80], labels[:80], "image", len(classes)))
    return samples


def sequence_samples() -> list[DatasetSample]:
    out = []
    for i in range(3):
        rng = np.random.default_rng(i)
        y = rng.integers(0, 3, 50)
        t = np.linspace(0, 1, 40)
        X = np.sin(2 * np.pi * (y[:, None] + 1 + i) * t) + 0.1 * rng.normal(size=(50, 40))
        out.append(DatasetSample(f"seq{i}", X[:, None, :].astype(np.float32), y, "sequence", 3))
    return out


@pytest.mark.parametrize("aggregator", ["mean", "bilstm", "attention"])
def test_each_aggregator_trains_on_images_and_sequences(aggregator: str) -> None:
    samples = digits_samples() + sequence_samples()
    rng = np.random.default_rng(0)
    d = rng.uniform(0.5, 2.0, (6, 6))
    d = np.triu(d, 1) + np.triu(d, 1).T
    config = ExtractorConfig(aggregator=aggregator, steps=4, tau=16, pairs_per_step=4, log_every=2, meta_dim=8)
    extractor, history = train_extractor(samples, d, config)
    assert [h["step"] for h in history] == [2, 4]
    assert all(np.isfinite(h["train_loss"]) for h in history)
    E = extractor.embed_many(samples)
    assert E.shape == (6, 8) and np.isfinite(E).all()


@pytest.mark.parametrize("aggregator", ["mean", "attention"])
def test_mean_and_attention_are_permutation_invariant(aggregator: str) -> None:
    torch.manual_seed(0)
    net = MetaFeatureNet(ExtractorConfig(aggregator=aggregator)).eval()
    image = digits_samples()[1]
    table = tabular_sample(3, "A")
    with torch.no_grad():
        for s in (image, table):
            x, y = torch.as_tensor(s.X[:64]), torch.as_tensor(s.y[:64])
            perm = torch.randperm(len(y))
            torch.testing.assert_close(net(x[perm], y[perm], s.kind), net(x, y, s.kind), atol=1e-5, rtol=0)
        # the tabular wing ignores feature order as well
        x, y = torch.as_tensor(table.X[:64]), torch.as_tensor(table.y[:64])
        cols = torch.randperm(x.shape[1])
        torch.testing.assert_close(net(x[:, cols], y, "tabular"), net(x, y, "tabular"), atol=1e-5, rtol=0)


@pytest.mark.parametrize("aggregator", ["mean", "bilstm"])
def test_save_load_round_trip_and_embed_speed(aggregator: str, tmp_path: Path) -> None:
    samples = [tabular_sample(i, "A") for i in range(3)]
    config = ExtractorConfig(aggregator=aggregator, steps=2, tau=16, pairs_per_step=2, log_every=1)
    extractor, _ = train_extractor(samples, group_distances(samples) + 1 - np.eye(3), config)
    rng = np.random.default_rng(1)
    mnist_like = DatasetSample(
        "m", rng.random((256, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 256), "image", 10
    )
    path = tmp_path / "extractor.pt"
    extractor.save(path)
    loaded = MetaFeatureExtractor.load(path)
    assert loaded.scale == extractor.scale and loaded.config == extractor.config
    for s in (*samples, mnist_like):
        np.testing.assert_array_equal(
            loaded.embed(s.X, s.y, s.kind, s.num_classes), extractor.embed(s.X, s.y, s.kind, s.num_classes)
        )


def test_bad_inputs_raise_project_errors(tmp_path: Path) -> None:
    samples = [tabular_sample(i, "A") for i in range(3)]
    with pytest.raises(ExtractorError):
        ExtractorConfig(aggregator="max")
    with pytest.raises(ExtractorError):
        train_extractor(samples, np.array([[0, 1, 2], [1, 0, 1], [0, 1, 0]]), ExtractorConfig(steps=1))
    with pytest.raises(ExtractorError):
        train_extractor(samples[:1], np.zeros((1, 1)), ExtractorConfig(steps=1))
    bad = DatasetSample("bad", samples[0].X, samples[0].y, "graph", 2)
    with pytest.raises(DatasetError):
        train_extractor([bad, samples[1]], np.ones((2, 2)) - np.eye(2), ExtractorConfig(steps=1))
    with pytest.raises(ExtractorError):
        MetaFeatureExtractor.load(tmp_path / "missing.pt")
