"""The knowledge-base contract (agent/knowledge/base.py), checked against every backend.

As Optuna's storage suite does, each test takes ``kb``, parametrised over the backends: the
in-memory store, MLflow on a sqlite file (a fresh copy of a migrated empty database per test), and
MLflow behind a real ``mlflow server``. The server boots in the background when the module starts
and is shared by its tests, so every test works under its own job name (``job``) and reads back only
what it wrote. Checks that do not depend on the transport (``local_only``) skip the server. A backend
added to ``BACKENDS`` gets the whole suite.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config import StudySettings
from agent.errors import StoreError
from agent.knowledge import open_knowledge_base
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import COUNTED_STATES, TRIAL_FAILED, TRIAL_KILLED, TRIAL_OK, TRIAL_RUNNING, StudyRecord

BACKENDS = ["memory", "sqlite", "server"]
LOCAL = ["memory", "sqlite"]
SERVER_START_S = 60
SPACE = [
    {"kind": "float", "name": "lr", "low": 1e-4, "high": 0.1, "log": True},
    {"kind": "int", "name": "layers", "low": 1, "high": 5, "log": False},
]


# -- backends ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def empty_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow database with its schema in place: copying it spares each test the migrations."""
    from mlflow import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wants_server(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(item, "callspec", None) is not None and item.callspec.params.get("backend") == "server"
        for item in request.session.items
        if item.module is request.module
    )


@pytest.fixture(scope="module", autouse=True)
def server_process(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Starts ``mlflow server`` (own sqlite store and artifacts, free local port) when the module
    begins, so it boots while the other backends are tested; ``mlflow_server`` waits for it."""
    if not _wants_server(request):
        yield None
        return
    root = tmp_path_factory.mktemp("server")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'server.db'}",
            "--artifacts-destination",
            str(root / "art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    yield proc, f"http://127.0.0.1:{port}", time.time() + SERVER_START_S
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=1)
    except subprocess.TimeoutExpired:  # a graceful shutdown waits on idle keep-alive connections
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def mlflow_server(server_process: Any) -> str:
    """The server's URL once it answers ``/health``; skips the server's tests if it never does."""
    import requests

    proc, url, deadline = server_process
    while True:
        try:
            if requests.get(url + "/health", timeout=2).ok:
                return url
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.time() > deadline:
            pytest.skip(f"mlflow server did not answer on {url} within {SERVER_START_S} s")
        time.sleep(0.25)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend's name; module-scoped so that pytest runs the tests backend by backend."""
    return request.param


@pytest.fixture
def kb(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> KnowledgeBase:
    """A fresh store (the server's: a shared one, see the module docstring)."""
    if backend == "memory":
        return open_knowledge_base("memory://contract")
    if backend == "sqlite":
        shutil.copy(request.getfixturevalue("empty_sqlite"), tmp_path / "mlflow.db")
        return open_knowledge_base(f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "art"))
    return open_knowledge_base(request.getfixturevalue("mlflow_server"))


local_only = pytest.mark.parametrize("backend", LOCAL, indirect=True)  # transport-independent checks


@pytest.fixture
def job() -> str:
    """A job name no other test uses: the namespace of one test's studies in a shared store."""
    return f"job-{uuid.uuid4().hex[:10]}"


def settings(job: str, dataset: str = "iris", **over: Any) -> dict[str, Any]:
    return StudySettings(
        job="mlp",
        job_name=job,
        dataset=dataset,
        dataset_name=dataset,
        fingerprint=f"fp-{dataset}",
        space_signature="sig",
        metric="val_loss",
        mode="min",
        trials=4,
        **over,
    ).to_dict()


def new_study(
    kb: KnowledgeBase,
    job: str,
    name: str = "s",
    dataset: str = "iris",
    sample: tuple[Any, Any] | None = None,
    **over: Any,
) -> StudyRecord:
    summary = {"source": dataset, "kind": "tabular", "n": 150, "ratio": 0.25, "label": None}
    return kb.create_study(f"{job}-{name}", settings(job, dataset, **over), SPACE, summary, sample, "a test study")


def mine(kb: KnowledgeBase, job: str) -> list[StudyRecord]:
    return [s for s in kb.list_studies() if s.job == job]


def same_record(a: Any, b: Any, ignore: tuple[str, ...] = ()) -> None:
    for f in fields(a):
        if f.name not in ignore:
            assert getattr(a, f.name) == getattr(b, f.name), f.name


# -- studies -------------------------------------------------------------------------------------
@local_only
def test_tracking_uri_names_the_store(kb: KnowledgeBase) -> None:
    assert kb.tracking_uri.split(":")[0] in ("memory", "sqlite", "http")


def test_open_is_idempotent_and_leaves_the_store_usable(kb: KnowledgeBase) -> None:
    kb.open()
    kb.open()
    assert kb.find_study("never-created") is None


def test_create_find_and_list_studies(kb: KnowledgeBase, job: str) -> None:
    first = new_study(kb, job, "a")
    second = new_study(kb, job, "b", dataset="wine")
    assert (first.name, first.job, first.dataset, first.fingerprint) == (f"{job}-a", job, "iris", "fp-iris")
    assert first.status == "created" and first.best_value is None and first.best_config is None
    assert first.settings == {k: settings(job)[k] for k in sorted(settings(job))}
    assert list(first.settings) == sorted(first.settings)  # JSON with sorted keys
    assert first.tags["kind"] == "study" and first.tags["objective"] == "min val_loss"
    assert first.params["study.trials"] == "4" and first.params["dataset.n"] == "150"
    assert kb.dataset_summary(first) == {"source": "iris", "kind": "tabular", "n": 150, "ratio": 0.25, "label": "None"}
    same_record(kb.find_study(f"{job}-a"), first)
    assert kb.find_study(f"{job}-missing") is None
    assert [s.study_id for s in mine(kb, job)] == [first.study_id, second.study_id]  # oldest first


@local_only
def test_create_study_of_an_existing_name_adds_a_newer_study(kb: KnowledgeBase, job: str) -> None:
    old = new_study(kb, job, "same", seed=1)
    new = new_study(kb, job, "same", seed=2)
    assert old.study_id != new.study_id
    found = kb.find_study(f"{job}-same")
    assert found is not None and found.study_id == new.study_id and found.settings["seed"] == 2
    assert [s.study_id for s in mine(kb, job)] == [old.study_id, new.study_id]


def test_update_study_sets_status_and_best(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    running = kb.update_study(study, "running")
    assert running.status == "running" and running.best_value is None
    best = kb.update_study(running, "finished", 0.25, {"lr": 0.01, "layers": 3})
    assert (best.status, best.best_value, best.best_config) == ("finished", 0.25, {"layers": 3, "lr": 0.01})
    kept = kb.update_study(best, "interrupted")
    assert (kept.status, kept.best_value, kept.best_config) == ("interrupted", 0.25, {"layers": 3, "lr": 0.01})
    same_record(kb.find_study(study.name), kept)
    assert study.status == "created"  # records are snapshots


def test_study_tags_round_trip(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    kb.set_study_tags(study, {"note": "plain text", "metafeatures": {"b": 2.0, "a": None}, "neighbours": ["x", "y"]})
    kb.set_study_tags(study, {"note": "overwritten"})
    tags = kb.study_tags(study)
    assert tags["note"] == "overwritten"
    assert tags["metafeatures"] == '{"a": null, "b": 2.0}' and tags["neighbours"] == '["x", "y"]'
    assert tags["kind"] == "study" and tags["status"] == "created"
    assert kb.find_study(study.name).tags == tags  # type: ignore[union-attr]
    assert "note" not in study.tags


def test_a_claimed_value_is_written_once(kb: KnowledgeBase, job: str) -> None:
    """The study's lease rests on this: the first claim of a key wins, every later one reads it."""
    study = new_study(kb, job)
    assert kb.claim_study_value(study, "lease.1", "first") == "first"
    assert kb.claim_study_value(study, "lease.1", "second") == "first"
    assert kb.claim_study_value(study, "lease.1", "first") == "first"
    assert kb.claim_study_value(study, "lease.2", "second") == "second"


def test_a_tag_longer_than_the_store_keeps_round_trips_whole(kb: KnowledgeBase, job: str) -> None:
    """A study's plan over a large history runs past MLflow's 8000-character tag limit."""
    study = new_study(kb, job)
    plan = {"source_keys": [f"{i:016x}/mlp/{'s' * 16}" for i in range(700)]}  # ~26,000 characters
    kb.set_study_tags(study, {"surrogate_plan": plan, "short": "x"})
    tags = kb.study_tags(study)
    assert json.loads(tags["surrogate_plan"]) == plan and tags["short"] == "x"
    assert not any(".part-" in k for k in tags)
    assert json.loads(kb.find_study(study.name).tags["surrogate_plan"]) == plan  # type: ignore[union-attr]
    kb.set_study_tags(study, {"surrogate_plan": "short now"})
    assert kb.study_tags(study)["surrogate_plan"] == "short now"


def test_dataset_sample_round_trip(kb: KnowledgeBase, job: str) -> None:
    X = np.arange(15, dtype=np.float32).reshape(5, 3)
    y = np.array([0, 1, 0, 2, 1])
    with_sample = new_study(kb, job, "with", sample=(X, y))
    without = new_study(kb, job, "without")
    got = kb.load_dataset_sample(with_sample.study_id)
    assert got is not None
    assert got[0].dtype == X.dtype and np.array_equal(got[0], X) and np.array_equal(got[1], y)
    assert kb.load_dataset_sample(without.study_id) is None
    assert kb.load_dataset_sample("0" * 32) is None


@local_only
def test_log_study_figure_accepts_a_matplotlib_figure(kb: KnowledgeBase, job: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = new_study(kb, job)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    kb.log_study_figure(study, fig, "trace.png")
    kb.log_study_figure(study, fig, "trace.png")  # replacing is fine
    plt.close(fig)
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / "trace.png"
        assert kb.fetch_study_file(study, "trace.png", target)
        assert target.read_bytes().startswith(b"\x89PNG")  # the figure, as a PNG


# -- trials --------------------------------------------------------------------------------------
def test_trial_states_and_what_counts(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    started = [kb.start_trial(study, n, {"lr": 0.01 * (n + 1), "layers": n + 1}, "sobol") for n in range(4)]
    assert [(t.state, t.value, t.origin) for t in started] == [(TRIAL_RUNNING, None, "sobol")] * 4
    assert started[1].config == {"lr": 0.02, "layers": 2} and list(started[1].config) == ["lr", "layers"]
    ok = kb.finish_trial(study, started[0], 0.5, TRIAL_OK, duration=1.5, metrics={"val_acc": 0.8})
    assert (ok.state, ok.value, ok.duration, dict(ok.extra)) == (TRIAL_OK, 0.5, 1.5, {"val_acc": 0.8})
    failed = kb.finish_trial(study, started[1], None, TRIAL_FAILED, "diverged: val_loss is nan")
    assert (failed.state, failed.value, failed.reason) == (TRIAL_FAILED, None, "diverged: val_loss is nan")
    killed = kb.finish_trial(study, started[2], None, TRIAL_KILLED, "time limit")
    assert killed.state == TRIAL_KILLED
    trials = kb.trials(study)
    assert [t.state for t in trials] == [TRIAL_OK, TRIAL_FAILED, TRIAL_KILLED, TRIAL_RUNNING]
    assert sum(t.state in COUNTED_STATES for t in trials) == 2
    closed = kb.close_running_trials(study, "process died")
    assert [(t.trial_id, t.state, t.reason) for t in closed] == [(started[3].trial_id, TRIAL_KILLED, "process died")]
    assert kb.close_running_trials(study, "again") == []
    assert [t.state for t in kb.trials(study)] == [TRIAL_OK, TRIAL_FAILED, TRIAL_KILLED, TRIAL_KILLED]


@local_only
def test_finish_trial_keeps_only_finite_values(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    trial = kb.start_trial(study, 0, {"lr": 0.1, "layers": 1}, "random")
    done = kb.finish_trial(study, trial, math.nan, TRIAL_OK, duration=math.inf, metrics={"a": 1.0, "b": -math.inf})
    assert (done.value, done.duration, dict(done.extra)) == (None, None, {"a": 1.0})
    config = kb.start_trial(study, 1, {"lr": np.float64(0.5), "layers": np.int64(3)}, "random").config
    assert config == {"lr": 0.5, "layers": "3"}  # through JSON, as MLflow keeps it


def test_trials_come_back_by_number_then_start_order(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    two = kb.start_trial(study, 2, {"lr": 0.1}, "sobol")
    zero = kb.start_trial(study, 0, {"lr": 0.2}, "sobol")
    one = kb.start_trial(study, 1, {"lr": 0.3}, "sobol")
    kb.finish_trial(study, zero, None, TRIAL_KILLED, "killed")
    time.sleep(0.005)  # MLflow orders starts by its 1 ms clock
    again = kb.start_trial(study, 0, {"lr": 0.4}, "bo")
    got = [(t.number, t.trial_id) for t in kb.trials(study)]
    assert got == [(0, zero.trial_id), (0, again.trial_id), (1, one.trial_id), (2, two.trial_id)]


def test_trial_logger_writes_metrics(kb: KnowledgeBase, job: str) -> None:
    from lightning.pytorch.loggers.logger import Logger

    study = new_study(kb, job)
    trial = kb.start_trial(study, 0, {"lr": 0.1, "layers": 2}, "sobol")
    logger = kb.trial_logger(study, trial)
    assert isinstance(logger, Logger)
    logger.log_hyperparams({"lr": 0.1, "layers": 2, "batch_size": 16})
    logger.log_metrics({"val_loss": 0.9, "train_loss": 1.0}, step=1)
    logger.log_metrics({"val_loss": 0.7}, step=2)
    logger.finalize("success")
    running = kb.trials(study)[0]
    assert running.state == TRIAL_RUNNING
    assert dict(running.extra) == {"val_loss": 0.7, "train_loss": 1.0}
    # finish_trial's metrics are logged at step 0: the value of the highest step stays latest.
    done = kb.finish_trial(study, running, 0.7, TRIAL_OK, metrics={"val_loss": 0.75, "final_val_acc": 0.6})
    assert dict(done.extra) == {"val_loss": 0.7, "train_loss": 1.0, "final_val_acc": 0.6}


@pytest.mark.parametrize("backend", ["sqlite", "server"], indirect=True)
def test_trial_logger_writes_epoch_metrics_in_batches(kb: KnowledgeBase, job: str) -> None:
    """The first epoch is written at once (the UI shows a live curve); later ones are gathered into
    one write a second at most, and training's end writes the rest: every step is in the store."""
    from mlflow import MlflowClient

    study = new_study(kb, job)
    trial = kb.start_trial(study, 0, {"lr": 0.1, "layers": 2}, "sobol")
    logger = kb.trial_logger(study, trial)
    client, sizes = logger.experiment, []
    real = client.log_batch
    client.log_batch = lambda run_id, metrics=(), **kw: (
        metrics and sizes.append(len(metrics)),
        real(run_id, metrics=metrics, **kw),
    )[1]
    logger.log_hyperparams(
        {"lr": 0.1, "layers": 2, "batch_size": 16}
    )  # params written first do not hold the first epoch back
    for step in range(200):
        logger.log_metrics({"val_loss": 1.0 / (step + 1), "train_loss": 2.0 / (step + 1)}, step=step)
    assert sizes[0] == 2 and sum(sizes) < 400  # the first epoch alone; the rest still gathered
    logger.finalize("success")
    assert sum(sizes) == 400 and len(sizes) <= 3, sizes
    history = MlflowClient(kb.tracking_uri).get_metric_history(trial.trial_id, "val_loss")
    assert sorted(m.step for m in history) == list(range(200))
    assert dict(kb.trials(study)[0].extra)["val_loss"] == pytest.approx(1 / 200)


def test_unknown_ids_raise_store_error(kb: KnowledgeBase, job: str) -> None:
    study = new_study(kb, job)
    trial = kb.start_trial(study, 0, {"lr": 0.1}, "sobol")
    ghost = replace(study, study_id="0" * 32)
    for call in (
        lambda: kb.trials(ghost),
        lambda: kb.start_trial(ghost, 0, {}, "x"),
        lambda: kb.study_tags(ghost),
        lambda: kb.update_study(ghost, "running"),
        lambda: kb.set_study_tags(ghost, {"a": "b"}),
        lambda: kb.finish_trial(study, replace(trial, trial_id="0" * 32), 1.0, TRIAL_OK),
    ):
        with pytest.raises(StoreError):
            call()


# -- imported evaluations and history ------------------------------------------------------------
def _history_view(history: list[Any]) -> list[tuple[Any, ...]]:
    """HistoricalDataset contents without the backend's study ids."""
    return [
        (
            h.key,
            h.name,
            h.source,
            h.kind,
            h.job,
            h.space_signature,
            h.fingerprint,
            h.metric,
            h.mode,
            h.studies,
            dict(h.summary),
            [(dict(e.config), e.value, e.val_error) for e in h.evaluations],
            h.sample,
            None if h.metafeatures is None else {k: repr(v) for k, v in h.metafeatures.items()},
        )  # nan == nan
        for h in history
    ]


def test_import_evaluations_reads_back_as_in_every_backend(kb: KnowledgeBase, job: str) -> None:
    import pandas as pd

    from agent.knowledge.history import load_history
    from agent.knowledge.importer import import_table
    from agent.space import SearchSpace

    space = SearchSpace.from_dict(SPACE)
    rng = np.random.default_rng(0)
    table = pd.DataFrame(
        [
            {
                "task": task,
                "lr": float(10 ** rng.uniform(-4, -1)),
                "layers": int(rng.integers(1, 6)),
                "value": float(rng.random()),
            }
            for task in ("b", "a")
            for _ in range(3)
        ]
    )
    reference = open_knowledge_base("memory:")
    for store in (kb, reference):
        assert import_table(store, table, space, job, "acc", "max")["rows"] == 6
        store.set_study_tags(store.find_study(f"import-{job}-a"), {"metafeatures": {"n": 3.0, "skew": None}})
    record = kb.find_study(f"import-{job}-b")
    best_b = table[table.task == "b"].sort_values("value").iloc[-1]  # mode max: the highest value
    assert record is not None and record.status == "finished" and record.best_value == best_b["value"]
    assert record.best_config is not None and record.best_config["lr"] == best_b["lr"]
    assert [(t.number, t.state, t.origin) for t in kb.trials(record)] == [(n, TRIAL_OK, "import") for n in range(3)]
    got = load_history(kb, job=job)
    assert _history_view(got) == _history_view(load_history(reference, job=job))
    a = got[0]
    assert (a.name, a.kind, a.source, a.mode, a.studies, a.sample) == (
        "a",
        "external",
        "a",
        "max",
        (f"import-{job}-a",),
        None,
    )
    assert [e.value for e in a.evaluations] == list(table[table.task == "a"]["value"])
    assert a.metafeatures is not None and a.metafeatures["n"] == 3.0 and math.isnan(a.metafeatures["skew"])


def test_imported_studies_carry_a_dataset_summary_sample_and_gaps(kb: KnowledgeBase, job: str) -> None:
    """A starter history's import: real summaries and samples, missing values, the same records
    from every backend (the MLflow one keeps the rows inline on the study run)."""
    from agent.knowledge.history import load_history

    reference = open_knowledge_base("memory:")
    configs = [{"lr": 0.001 * (i + 1), "layers": i + 1} for i in range(4)]
    values = [0.5, None, float("nan"), 0.7]
    sample = (np.arange(12, dtype=np.float32).reshape(6, 2), np.array([0, 1, 0, 1, 0, 1]))
    summary = {"source": "r:carData", "kind": "tabular", "num_classes": 2, "name": "r:carData/Wells"}
    for store in (kb, reference):
        store.import_evaluations(
            f"starter-{job}-w", settings(job, "r:carData/Wells"), SPACE, configs, values, "starter", summary, sample
        )
    record = kb.find_study(f"starter-{job}-w")
    assert record.status == "finished" and kb.dataset_summary(record)["source"] == "r:carData"
    trials = kb.trials(record)
    assert [(t.number, t.state, t.origin, t.value) for t in trials] == [
        (0, TRIAL_OK, "import", 0.5),
        (1, TRIAL_OK, "import", None),
        (2, TRIAL_OK, "import", None),
        (3, TRIAL_OK, "import", 0.7),
    ]
    assert [dict(t.config) for t in trials] == configs
    X, y = kb.load_dataset_sample(record.study_id)
    np.testing.assert_array_equal(X, sample[0])
    mine, theirs = (load_history(store, job=job, with_samples=False) for store in (kb, reference))
    assert _history_view(mine) == _history_view(theirs)
    assert [e.value for e in mine[0].evaluations if e.value is not None] == [0.5, 0.7]


# -- meta-model runs -----------------------------------------------------------------------------
def test_model_runs_are_not_studies(kb: KnowledgeBase, job: str, tmp_path: Path) -> None:
    from lightning.pytorch.loggers.logger import Logger

    study = new_study(kb, job)
    run_id, logger = kb.start_model_run("metafeature-extractor", {"steps": 10, "datasets": 3}, "a test model")
    assert isinstance(run_id, str) and isinstance(logger, Logger)
    logger.log_metrics({"train_loss": 0.5}, step=1)
    (tmp_path / "model.onnx").write_bytes(b"weights")
    with pytest.raises(StoreError):
        kb.finish_model_run(run_id, {"x": 1.0}, [str(tmp_path / "missing.onnx")])
    kb.finish_model_run(run_id, {"final_train_loss": 0.4, "final_val_loss": math.nan}, [str(tmp_path / "model.onnx")])
    assert run_id not in {s.study_id for s in kb.list_studies()}
    assert [s.study_id for s in mine(kb, job)] == [study.study_id]


def test_the_contract_is_split_as_mlflow_splits_its_stores(tmp_path: Path) -> None:
    """Studies and trials, meta-models, kept models with the registry: every store is a
    KnowledgeBase and a MetaModelStore; only one that keeps artifacts keeps models, and registering
    a best model on another is refused in one line."""
    from agent.errors import StoreError
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.stores import KeptModels, MetaModelStore, kept_models

    memory = open_knowledge_base("memory:")
    mlflow = open_knowledge_base(f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path / "artifacts"))
    for kb in (memory, mlflow):
        assert isinstance(kb, KnowledgeBase) and isinstance(kb, MetaModelStore)
    assert kept_models(memory) is None and isinstance(kept_models(mlflow), KeptModels)
    memory.open()
    memory.check_artifact_root("mlp")  # nothing to prepare, no root to refuse
    from types import SimpleNamespace

    from agent.ops.models import register_best

    record = new_study(memory, "mlp")
    trial = memory.finish_trial(record, memory.start_trial(record, 0, {"lr": 0.1}, "init"), 1.0, TRIAL_OK)
    study = SimpleNamespace(kb=memory, record=record, name=record.name, trials=lambda: [trial])
    with pytest.raises(StoreError, match="has no model registry"):
        register_best(study, lambda: (None, None, None), "m", 1)
