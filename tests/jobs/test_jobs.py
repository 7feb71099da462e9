"""Tests for agent.jobs: loading jobs, the protocol checks, and real (tiny) fits of each job."""

from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer, load_digits

from agent.errors import JobError
from agent.jobs import ArrayDataModule, CNNJob, MLPJob, job_names, load_job
from agent.jobs.cnn import conv_filters
from agent.jobs.examples import LogisticJob
from agent.jobs.mlp import MAX_DROPOUT, funnel_shape
from agent.space import SearchSpace

torch.set_num_threads(1)
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*"),  # lightning-internal deprecation
]
METRICS = ("train_loss", "train_acc", "val_loss", "val_acc")


@dataclass
class FakeDataset:
    """Stand-in with the fields of agent.data's Dataset."""

    name: str
    kind: str
    X: np.ndarray
    y: np.ndarray
    source: str = "test"

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def feature_shape(self) -> tuple:
        return tuple(self.X.shape[1:])


def digits() -> FakeDataset:
    d = load_digits()
    X = (d.images / 16.0).astype(np.float32)[:, None, :, :]
    return FakeDataset("digits", "image", X, d.target.astype(np.int64))


def waves(n: int = 300, length: int = 40) -> FakeDataset:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, size=n)
    t = np.linspace(0, 1, length)
    X = np.sin(2 * np.pi * (y[:, None] + 1) * t[None, :]) + 0.1 * rng.normal(size=(n, length))
    X = ((X + 1.5) / 3.0).astype(np.float32)[:, None, :]
    return FakeDataset("waves", "sequence", X, y.astype(np.int64))


def cancer() -> FakeDataset:
    d = load_breast_cancer()
    X, y = d.data.astype(np.float32), d.target.astype(np.int64)
    return FakeDataset("breast_cancer", "tabular", X, y)


def split(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    cut = int(0.8 * n)
    return perm[:cut], perm[cut:]


def fit(model: pl.LightningModule, data: pl.LightningDataModule) -> pl.Trainer:
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_train_batches=2,
        limit_val_batches=2,
    )
    trainer.fit(model, datamodule=data)
    return trainer


def assert_metrics(trainer: pl.Trainer) -> None:
    metrics = trainer.callback_metrics
    for key in METRICS:
        assert key in metrics, key
        assert math.isfinite(float(metrics[key]))
    for key in ("train_acc", "val_acc"):
        assert 0.0 <= float(metrics[key]) <= 1.0


def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return name


# -- load_job ------------------------------------------------------------------------------------
def test_builtins_load() -> None:
    assert job_names()[:3] == ("cnn", "mlp", "mlp-arch")
    cnn, mlp = load_job("cnn"), load_job("mlp")
    assert isinstance(cnn, CNNJob) and isinstance(mlp, MLPJob)
    assert cnn.space.names == ["lr_log10", "decay_log10", "batch_size", "conv_layers", "fc_layers", "dropout"]
    assert mlp.space["batch_size"].log and mlp.space["max_units"].log
    for job in (cnn, mlp):
        assert (job.metric, job.mode) == ("val_loss", "min")


def test_unknown_name_lists_builtins() -> None:
    with pytest.raises(JobError, match="cnn, mlp"):
        load_job("resnet")


@pytest.mark.parametrize("spec", ["agent.jobs.examples:logistic", "agent.jobs.examples:LogisticJob"])
def test_example_loads(spec: str) -> None:
    job = load_job(spec)
    assert isinstance(job, LogisticJob)
    assert isinstance(job.space, SearchSpace) and job.space.has_conditions


def test_factory_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = write_module(
        tmp_path,
        monkeypatch,
        "userjob_factory",
        """
        from agent.jobs.examples import LogisticJob
        def make():
            return LogisticJob()
    """,
    )
    assert isinstance(load_job(f"{mod}:make"), LogisticJob)


BAD_JOBS = {
    "no_space": "class J:\n    name='j'; metric='val_loss'; mode='min'\n"
    "    def check_dataset(self, d): pass\n    def build(self, *a): pass\njob = J()\n",
    "bad_mode": "from agent.jobs.examples import LogisticJob\n"
    "class J(LogisticJob):\n    mode = 'maximise'\njob = J()\n",
    "not_callable_build": "from agent.jobs.examples import LogisticJob\n"
    "class J(LogisticJob):\n    build = 3\njob = J()\n",
    "import_fails": "raise RuntimeError('broken\\nuser module')\n",
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_protocol_failures(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = write_module(tmp_path, monkeypatch, f"userjob_{case}", BAD_JOBS[case])
    with pytest.raises(JobError) as info:
        load_job(f"{mod}:job")
    assert "\n" not in str(info.value)
    expected = {
        "no_space": "'space'",
        "bad_mode": "'mode'",
        "not_callable_build": "'build'",
        "import_fails": "RuntimeError",
    }[case]
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("no_such_package_xyz.jobs:job", "cannot import module"),
        ("agent.jobs.examples:missing", "has no attribute 'missing'"),
        ("agent.jobs.examples:", "package.module:attr"),
    ],
)
def test_import_failures(spec: str, expected: str) -> None:
    with pytest.raises(JobError, match=expected) as info:
        load_job(spec)
    assert "\n" not in str(info.value)


# -- cnn -----------------------------------------------------------------------------------------
def cnn_config(conv_layers: int, **overrides: float) -> dict:
    config = {
        "lr_log10": -3.0,
        "decay_log10": -4.0,
        "batch_size": 100,
        "conv_layers": conv_layers,
        "fc_layers": 2,
        "dropout": 0.3,
    }
    config.update(overrides)
    return config


def test_conv_filters_rise_and_fall() -> None:
    assert conv_filters(1) == [32]
    assert conv_filters(5) == [32, 64, 128, 64, 32]
    assert conv_filters(9) == [32, 64, 128, 256, 512, 256, 128, 64, 32]


def test_cnn_rejects_tabular() -> None:
    with pytest.raises(JobError) as info:
        CNNJob().check_dataset(cancer())
    assert str(info.value) == (
        "job 'cnn' needs image or sequence data; dataset breast_cancer is tabular (use --job mlp)"
    )


@pytest.mark.parametrize("make_data", [digits, waves], ids=["digits", "sequence"])
@pytest.mark.parametrize("conv_layers", [1, 9])
def test_cnn_fits(make_data, conv_layers: int) -> None:
    dataset = make_data()
    job = CNNJob()
    job.check_dataset(dataset)
    train_idx, val_idx = split(dataset.n)
    model, data = job.build(cnn_config(conv_layers), dataset, train_idx, val_idx, seed=0)
    assert model.hparams.conv_layers == conv_layers
    trainer = fit(model, data)
    assert_metrics(trainer)


def test_cnn_lr_decays_per_step() -> None:
    dataset = digits()
    model, data = CNNJob().build(cnn_config(1, lr_log10=-2.0, decay_log10=-4.0), dataset, *split(dataset.n), seed=0)
    trainer = fit(model, data)
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert lr == pytest.approx(1e-2 * math.exp(-1e-4 * 2), rel=1e-9)
    assert lr < 1e-2
    # and the schedule follows lr_t = lr * exp(-decay * t) step after step
    config = model.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert config["lr_scheduler"]["interval"] == "step"
    lrs = []
    for _ in range(5):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    assert all(a > b for a, b in zip(lrs, lrs[1:]))
    assert lrs[-1] == pytest.approx(1e-2 * math.exp(-1e-4 * 5), rel=1e-9)


# -- mlp -----------------------------------------------------------------------------------------
def mlp_config(**overrides: float) -> dict:
    config = {
        "batch_size": 32,
        "learning_rate": 1e-2,
        "momentum": 0.9,
        "weight_decay": 1e-4,
        "num_layers": 3,
        "max_units": 512,
        "max_dropout": 0.6,
    }
    config.update(overrides)
    return config


def test_funnel_shape() -> None:
    widths, rates = funnel_shape(3, 512, 2, 0.6)
    assert widths == [512, 342, 172]
    assert rates == pytest.approx([0.0, 0.3, 0.6])
    widths, rates = funnel_shape(1, 64, 10, 1.0)
    assert widths == [64] and rates == [MAX_DROPOUT]
    _, rates = funnel_shape(5, 1024, 10, 1.0)
    assert rates[0] == 0.0 and rates[-1] == MAX_DROPOUT and rates == sorted(rates)


def test_mlp_trains_on_breast_cancer() -> None:
    dataset = cancer()
    MLPJob().check_dataset(dataset)
    model, data = MLPJob().build(mlp_config(), dataset, *split(dataset.n), seed=0)
    linears = [m for m in model.net.modules() if isinstance(m, torch.nn.Linear)]
    dropouts = [m for m in model.net.modules() if isinstance(m, torch.nn.Dropout)]
    assert [m.out_features for m in linears] == [512, 342, 172, 2]
    assert linears[0].in_features == 30
    assert [m.p for m in dropouts] == pytest.approx([0.0, 0.3, 0.6])
    trainer = fit(model, data)
    assert_metrics(trainer)
    X_train = data.train_set.tensors[0].numpy()
    assert np.allclose(X_train.mean(axis=0), 0.0, atol=1e-4)
    assert np.allclose(X_train.std(axis=0), 1.0, atol=1e-3)


def test_mlp_flattens_images_without_standardising() -> None:
    dataset = digits()
    model, data = MLPJob().build(mlp_config(num_layers=1), dataset, *split(dataset.n), seed=0)
    assert not data.standardise
    assert_metrics(fit(model, data))
    assert float(data.train_set.tensors[0].min()) >= 0.0


# -- ArrayDataModule -----------------------------------------------------------------------------
def test_datamodule_clips_and_seeds() -> None:
    X = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20) % 2
    train_idx, val_idx = np.arange(15), np.arange(15, 20)
    dm = ArrayDataModule(X, y, train_idx, val_idx, batch_size=400, seed=3)
    dm.setup("fit")
    assert dm.batch_size == 15
    assert dm.val_dataloader().batch_size == 5
    first = [b[1].tolist() for b in dm.train_dataloader()]
    again = ArrayDataModule(X, y, train_idx, val_idx, batch_size=400, seed=3)
    again.setup("fit")
    assert [b[1].tolist() for b in again.train_dataloader()] == first
    odd = ArrayDataModule(X, y, np.arange(15), val_idx, batch_size=7)
    odd.setup("fit")
    assert [len(b[1]) for b in odd.train_dataloader()] == [7, 7]  # no singleton batch


# -- example job ---------------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_example_job_trains(optimizer: str) -> None:
    job = load_job("agent.jobs.examples:logistic")
    config = {"lr": 0.05, "weight_decay": 1e-4, "optimizer": optimizer}
    if optimizer == "sgd":
        config["momentum"] = 0.9
    job.space.validate(config)
    dataset = cancer()
    job.check_dataset(dataset)
    model, data = job.build(config, dataset, *split(dataset.n), seed=1)
    assert model.hparams.momentum == (0.9 if optimizer == "sgd" else None)
    assert_metrics(fit(model, data))
    expected = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    assert isinstance(model.configure_optimizers(), expected)


def test_example_space_drops_inactive_momentum() -> None:
    space = load_job("agent.jobs.examples:logistic").space
    adam = space.decode([0.5, 0.5, 0.9, 0.5])
    sgd = space.decode([0.5, 0.5, 0.1, 0.5])
    assert adam["optimizer"] == "adam" and "momentum" not in adam
    assert sgd["optimizer"] == "sgd" and "momentum" in sgd


def test_loading_a_builtin_job_imports_neither_torch_nor_lightning() -> None:
    """A job's name, metric and space are read without Lightning (about 4 s to import): `neighbors`,
    `ask`, `tell` and a refused configuration never pay for it; the first trial's `build` does."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom agent.jobs import job_names, load_job\n"
        "jobs = [load_job(name) for name in job_names()]\n"
        "assert all(job.space.names for job in jobs)\n"
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
