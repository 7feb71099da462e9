"""What only the in-memory backend promises (the shared contract is in test_contract.py), and how
``open_knowledge_base`` picks a backend."""

from __future__ import annotations

import copy
import json
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.errors import StoreError
from agent.knowledge import open_knowledge_base
from agent.knowledge.memory import InMemoryKnowledgeBase
from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
from agent.knowledge.records import TRIAL_OK
from tests.knowledge.test_contract import new_study


@pytest.fixture
def kb() -> InMemoryKnowledgeBase:
    store = open_knowledge_base("memory://unit")
    assert isinstance(store, InMemoryKnowledgeBase)
    return store


# -- open_knowledge_base -------------------------------------------------------------------------
def test_memory_uris_open_a_new_empty_store_each_time() -> None:
    first, second = open_knowledge_base("memory:"), open_knowledge_base("memory://bench")
    assert isinstance(first, InMemoryKnowledgeBase) and isinstance(second, InMemoryKnowledgeBase)
    assert (first.tracking_uri, second.tracking_uri) == ("memory:", "memory://bench")
    new_study(first, "j")
    assert open_knowledge_base("memory:").list_studies() == []


def test_mlflow_uris_and_paths_open_mlflow_without_creating_the_store(tmp_path: Path, monkeypatch) -> None:
    uri = f"sqlite:///{tmp_path / 'a.db'}"
    kb = open_knowledge_base(uri, str(tmp_path / "art"))
    assert isinstance(kb, MlflowKnowledgeBase) and kb.tracking_uri == uri and kb.artifact_root == str(tmp_path / "art")
    for folder in (
        str(tmp_path / "runs"),
        (tmp_path / "runs").as_uri(),
    ):  # MLflow's file store: refused, with what to use
        with pytest.raises(StoreError, match="folder store.*sqlite:///"):
            open_knowledge_base(folder)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'env.db'}")
    assert open_knowledge_base(None).tracking_uri == f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "memory://from-env")
    assert isinstance(open_knowledge_base(None), InMemoryKnowledgeBase)
    assert list(tmp_path.iterdir()) == []


def test_unknown_schemes_are_one_line_store_errors() -> None:
    with pytest.raises(StoreError) as err:
        open_knowledge_base("foo://x")
    assert "'foo'" in str(err.value) and "memory:" in str(err.value) and "\n" not in str(err.value)


def test_importing_and_using_it_loads_neither_mlflow_nor_lightning() -> None:
    code = (
        "import sys; from agent.knowledge import open_knowledge_base; kb = open_knowledge_base('memory:'); "
        "from tests.knowledge.test_contract import new_study; s = new_study(kb, 'j'); "
        "kb.finish_trial(s, kb.start_trial(s, 0, {'lr': 0.1}, 'x'), 1.0, 'ok'); "
        "print(sorted(m for m in ('mlflow', 'lightning', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    assert out.strip() == "[]"


# -- records -------------------------------------------------------------------------------------
def test_records_are_read_only_and_travel(kb: InMemoryKnowledgeBase) -> None:
    study = new_study(kb, "j")
    trial = kb.finish_trial(study, kb.start_trial(study, 0, {"lr": 0.1}, "x"), 1.0, TRIAL_OK, metrics={"a": 2.0})
    for mapping in (trial.config, trial.extra, study.settings, study.tags, study.params):
        with pytest.raises(TypeError):
            mapping["x"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(trial)) == trial and copy.deepcopy(study) == study
    assert json.loads(json.dumps(trial.config)) == {"lr": 0.1}
    mutable = dict(trial.config)
    mutable["lr"] = 0.5
    assert kb.trials(study)[0].config == {"lr": 0.1}


def test_dataset_sample_is_the_stores_own_copy(kb: InMemoryKnowledgeBase) -> None:
    import numpy as np

    X, y = np.zeros((3, 2)), np.array([0, 1, 0])
    study = new_study(kb, "j", sample=(X, y))
    X[0, 0] = 9.0
    got = kb.load_dataset_sample(study.study_id)
    assert got is not None and got[0][0, 0] == 0.0
    got[0][0, 0] = 7.0
    assert kb.load_dataset_sample(study.study_id)[0][0, 0] == 0.0  # type: ignore[index]


def test_figures_are_kept_as_png_bytes(kb: InMemoryKnowledgeBase) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = new_study(kb, "j")
    fig = plt.figure(figsize=(1, 1))
    kb.log_study_figure(study, fig, "trace.png")
    plt.close(fig)
    assert (kb.study_figure(study, "trace.png") or b"").startswith(b"\x89PNG")
    assert kb.study_figure(study, "other.png") is None


def test_model_runs_keep_params_metrics_and_artifact_bytes(kb: InMemoryKnowledgeBase, tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text("{}")
    run_id, logger = kb.start_model_run("extractor", {"steps": 5}, "d")
    logger.log_metrics({"train_loss": 0.5}, step=3)
    kb.finish_model_run(run_id, {"score": 1.0, "nan": float("nan")}, [str(tmp_path / "index.json")])
    run = kb.model_run(run_id)
    assert (run.kind, dict(run.params), dict(run.metrics)) == (
        "extractor",
        {"steps": "5"},
        {"train_loss": 0.5, "score": 1.0},
    )
    assert dict(run.artifacts) == {"model/index.json": b"{}"} and run.finished


# -- Lightning ------------------------------------------------------------------------------------
def test_trial_logger_records_every_epoch_of_a_real_trainer(kb: InMemoryKnowledgeBase) -> None:
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(pl.LightningModule):
        def __init__(self, lr: float, width: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Sequential(torch.nn.Linear(2, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))

        def training_step(self, batch, _):
            return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch, _):
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=8)
    study = new_study(kb, "j")
    trial = kb.start_trial(study, 0, {"lr": 0.1}, "sobol")
    trainer = pl.Trainer(
        max_epochs=3,
        logger=kb.trial_logger(study, trial),
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(Tiny(lr=0.1), data, data)
    history = kb.metric_history(trial, "val_loss")
    assert [step for step, _ in history] == [1, 3, 5]  # one per epoch, at the optimiser's step
    assert kb.trials(study)[0].extra["val_loss"] == history[-1][1]
    assert kb.trial_params(trial) == {"width": "4"}  # lr is the trial's own configuration


# -- concurrency and scale -----------------------------------------------------------------------
def test_threads_share_a_store(kb: InMemoryKnowledgeBase) -> None:
    study = new_study(kb, "j")

    def work(offset: int) -> None:
        for n in range(offset, offset + 200):
            kb.finish_trial(study, kb.start_trial(study, n, {"lr": 0.1}, "x"), float(n), TRIAL_OK)

    threads = [threading.Thread(target=work, args=(k * 200,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trials = kb.trials(study)
    assert [t.number for t in trials] == list(range(1600)) and len({t.trial_id for t in trials}) == 1600
    assert all(t.state == TRIAL_OK and t.value == t.number for t in trials)


def _five_thousand_trials(kb: InMemoryKnowledgeBase) -> float:
    study = new_study(kb, "j")
    start = time.perf_counter()
    for n in range(5000):
        trial = kb.start_trial(study, n, {"lr": 0.1, "layers": 2}, "bo")
        kb.finish_trial(study, trial, 0.5, TRIAL_OK, duration=1.0, metrics={"val_acc": 0.9})
        if n % 50 == 0:
            kb.trials(study)
    seconds = time.perf_counter() - start
    assert len(kb.trials(study)) == 5000
    return seconds


def test_thousands_of_trials_are_kept(kb: InMemoryKnowledgeBase) -> None:
    _five_thousand_trials(kb)


@pytest.mark.slow
def test_thousands_of_trials_stay_cheap(kb: InMemoryKnowledgeBase) -> None:
    """A speed figure: a benchmark (``-m slow``), not a default test a busy CI machine could fail."""
    assert _five_thousand_trials(kb) < 5.0  # about 0.1 s on a laptop
