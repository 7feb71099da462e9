"""Your project from Python: ``agent.create_study(model=..., data=..., space=...)``, and your own
training loop with ``TuneAgentCallback`` keeping models as ``tune-agent start`` does."""

from __future__ import annotations

import pytest

from tests.project.project_files import write_project


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = write_project(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.chdir(root)
    return root


def test_create_study_of_your_classes(project, store) -> None:
    from tinyproj.data import WineData  # the test's project, written into a temporary folder

    import agent

    study = agent.create_study(
        "api-wine",
        model="tinyproj.model:Net",
        data=WineData,
        space=project / "space.yaml",
        trainer={"gradient_clip_val": 1.0},
        trials=2,
        epochs=1,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )
    study.optimize()
    assert [t.state for t in study.trials] == ["ok", "ok"]
    assert study.best_value > 0 and "model.lr" in study.best_params
    assert store.kb().find_study("api-wine").dataset == "WineData"


def test_create_study_refuses_a_class_of_the_script_itself(project, store) -> None:
    import agent
    from agent.errors import StudyError

    Local = type("Local", (), {"__module__": "__main__"})
    with pytest.raises(StudyError, match="defined in the script itself"):
        agent.create_study(model=Local, space={"model.lr": {"type": "float", "low": 0.001, "high": 0.1}})


def test_own_loop_keeps_models(project, store) -> None:
    """The objective builds the user's classes itself; the callback saves the trained module and
    the study keeps the best ones on their runs, loadable with mlflow.pytorch."""
    import lightning.pytorch as pl
    import torch
    from tinyproj.data import WineData
    from tinyproj.model import Net

    import agent
    import mlflow
    from agent.lightning import TuneAgentCallback
    from agent.project.space_file import arguments

    study = agent.create_study(
        "own-loop",
        model=Net,
        data=WineData,
        space=project / "space.yaml",
        trials=3,
        epochs=2,
        keep_models=2,
        tracking_uri=store.uri,
        artifact_root=store.artifacts,
    )

    def objective(trial):
        model, data = Net(**arguments(trial.params, "model")), WineData(**arguments(trial.params, "data"))
        trainer = pl.Trainer(
            max_epochs=2, callbacks=[TuneAgentCallback(trial)], logger=trial.logger(), enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False,
        )  # fmt: skip
        trainer.fit(model, datamodule=data)

    study.optimize(objective)
    kb = store.kb()
    record = kb.find_study("own-loop")
    trials = [t for t in kb.trials(record) if t.state == "ok"]
    assert len(trials) == 3
    kept = [t for t in trials if kb.kept_model_uri(t)]
    assert len(kept) == 2  # the best two; the third was pushed out or never saved
    best = min(trials, key=lambda t: t.value)
    assert best in kept
    mlflow.set_tracking_uri(store.uri)
    model = mlflow.pytorch.load_model(kb.kept_model_uri(best))
    assert tuple(model(torch.zeros(4, 13)).shape) == (4, 3)
