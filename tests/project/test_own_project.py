"""A Lightning project that was not written for tune-agent, tuned as it is: ``--model/--data/--space``
and its LightningCLI script, on real sqlite stores, real Lightning training and real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_tune_agent
from tests.project.project_files import write_project

LIGHTNING_NOISE = ("GPU available", "TPU available", "Tip:", "litlogger", "`Trainer.fit` stopped", "INFO:")


def _finished(store, name: str) -> list:
    kb = store.kb()
    return [t for t in kb.trials(kb.find_study(name)) if t.state == "ok"]


def _study_name(out: str) -> str:
    found = re.search(r"starting study (\S+):", out)
    assert found, out
    return found.group(1)


def test_module_and_datamodule_as_they_are(store, tmp_path, cli, monkeypatch) -> None:
    """The issue's first style end to end: a fresh process tunes the classes with no Lightning line and
    keeps models; `best --register` registers one that mlflow.pytorch loads; a study of the same model
    and space on the project's other DataModule starts from the first one's history."""
    project = write_project(tmp_path / "proj")
    res = run_tune_agent(
        "start",
        "--model", "tinyproj.model:Net",
        "--data", "tinyproj.data:WineData",
        "--space", "space.yaml",
        "--metric", "val_loss",
        "--trials", "4",
        "--epochs", "2",
        *store.args,
        cwd=project,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    text = res.stdout + res.stderr
    assert "model not kept" not in text, text
    for noise in LIGHTNING_NOISE:
        assert noise not in text, (noise, text)
    assert "data sample: drawing up to 2000 rows of WineData's training loader" in res.stdout
    name = _study_name(res.stdout)
    trials = _finished(store, name)
    assert len(trials) == 4 and all(t.value is not None and t.value > 0 for t in trials)
    assert all({"model.lr", "data.batch_size"} <= set(t.config) for t in trials)
    record = store.kb().find_study(name)
    assert record.job == "tinyproj.model.Net" and record.dataset == "WineData"

    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    reg = cli("best", name, "--register", "wine-net", "--tracking-uri", store.uri)
    assert reg.code == 0, reg.err
    assert '"source": "kept"' in reg.out
    import torch

    import mlflow

    mlflow.set_tracking_uri(store.uri)
    model = mlflow.pytorch.load_model("models:/wine-net/latest")
    assert type(model).__name__ == "Net"
    assert tuple(model(torch.zeros(5, 13)).shape) == (5, 3)
    served = mlflow.pyfunc.load_model("models:/wine-net/latest")  # forward takes one tensor: a pyfunc too
    assert served.metadata.signature is not None

    second = cli(  # several objectives, as with any job: the metrics the module logs and its size
        "start", "--model", "tinyproj.model:Net", "--data", "tinyproj.data:IrisData", "--space", "space.yaml",
        "--metric", "val_loss:min", "--metric", "n_params:min", "--trials", "2", "--epochs", "1", *store.args,
    )  # fmt: skip
    assert second.code == 0, second.err
    warm = next(line for line in second.out.splitlines() if line.startswith("warm start"))
    assert "WineData" in warm, second.out
    assert "starting cold" not in warm
    assert len(_finished(store, _study_name(second.out))) == 2


def test_lightning_cli_project_as_it_is(store, tmp_path, cli, monkeypatch) -> None:
    """The second style: each trial runs the user's own `main.py fit --config base.yaml` with the
    trial's overrides, in its own process; the study records each trial's metric and keeps models."""
    project = write_project(tmp_path / "proj")
    monkeypatch.chdir(project)
    res = cli(
        "start", "--cli", "main.py", "--config", "base.yaml", "--space", "space.yaml",
        "--trials", "3", "--epochs", "1", *store.args,
    )  # fmt: skip
    assert res.code == 0, res.err
    text = res.out + res.err
    assert "probing main.py" in res.out and "model not kept" not in text
    for noise in LIGHTNING_NOISE:
        assert noise not in text, (noise, text)
    name = _study_name(res.out)
    trials = _finished(store, name)
    assert len(trials) == 3 and all(t.value is not None for t in trials)
    kb = store.kb()
    record = kb.find_study(name)
    assert record.job == "tinyproj.model.Net" and record.dataset == "WineData"
    assert any(kb.kept_model_uri(t) for t in trials)
    assert not list(project.glob("lightning_logs")) and not (project / "checkpoints").exists()


@pytest.mark.slow  # about 30 s: the default suite stays under its bound (the bad-input cases cover the refusals)
def test_a_failing_script_is_a_failed_trial_and_the_study_goes_on(store, tmp_path, cli, monkeypatch) -> None:
    """Also the fallback where no script server forks the trials: each runs in a fresh Python."""
    monkeypatch.setenv("TUNE_AGENT_SCRIPT_SERVER", "0")
    project = write_project(tmp_path / "proj")
    model = project / "tinyproj" / "model.py"
    # the user's code fails for this part of the space: wide hidden layers raise
    guard = "        if hidden > 40:\n            raise ValueError('too wide for this box')\n"
    model.write_text(
        model.read_text().replace("        super().__init__()\n", "        super().__init__()\n" + guard, 1)
    )
    (project / "space.yaml").write_text("model.hidden: {type: int, low: 48, high: 64}\n")
    monkeypatch.chdir(project)
    res = cli(
        "start", "--cli", "main.py", "--config", "base.yaml", "--space", "space.yaml", "--trials", "2",
        "--epochs", "1", *store.args,
    )  # fmt: skip
    assert res.code in (0, 1), res.err
    kb = store.kb()
    trials = kb.trials(kb.find_study(_study_name(res.out)))
    assert len(trials) == 2 and all(t.state == "failed" for t in trials), [(t.state, t.reason) for t in trials]
    assert all("ValueError: too wide for this box" in t.reason for t in trials), [t.reason for t in trials]


MODEL = ["--model", "tinyproj.model:Net"]
WINE = ["--data", "tinyproj.data:WineData"]
SPACE = ["--space", "space.yaml"]


@pytest.mark.parametrize(
    "case, args, needle",
    [
        ("not a LightningModule", ["--model", "tinyproj.data:WineData", *WINE, *SPACE], "not a LightningModule"),
        ("not a DataModule", [*MODEL, "--data", "tinyproj.model:Net", *SPACE], "not a LightningDataModule"),
        ("missing class", ["--model", "tinyproj.model:Nett", *WINE, *SPACE], "Nett"),
        ("space key not an argument", [*MODEL, *WINE, "--space", "typo.yaml"], "did you mean model.lr"),
        ("unreadable YAML", [*MODEL, *WINE, "--space", "broken.yaml"], "not valid YAML"),
        ("no --space", [*MODEL, *WINE], "--space"),
        (
            "script that does not import",
            ["--cli", "broken_main.py", "--config", "base.yaml", *SPACE],
            "ModuleNotFoundError",
        ),
        ("LightningCLI config without --cli", ["--config", "base.yaml", *SPACE], "--cli main.py"),
        ("owned Trainer argument", [*MODEL, *WINE, *SPACE, "--trainer", "max_epochs=3"], "--epochs"),
        ("project and built-in job", [*MODEL, *WINE, *SPACE, "--job", "mlp"], "--job"),
    ],
)
def test_bad_project_input_is_one_line(case, args, needle, store, tmp_path, cli, monkeypatch) -> None:
    project = write_project(tmp_path / "proj")
    (project / "typo.yaml").write_text("model.lrr: {type: float, low: 0.001, high: 0.1}\n")
    (project / "broken.yaml").write_text("model.lr: {type: float, low: 0.001\n")
    (project / "broken_main.py").write_text("import tinyproj.nowhere\n")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    res = cli("start", *args, "--trials", "2", "--epochs", "1", *store.args)
    assert res.code == 2, (case, res)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune-agent: error:"), (case, res.err)
    assert needle in lines[0], (case, lines[0])
    assert not (store.root / "mlflow.db").exists(), f"{case}: bad input wrote to the store"


def test_space_from_a_signature(tmp_path) -> None:
    """`tune-agent space --from` prints a starter file that reads back as a space."""
    project = write_project(tmp_path / "proj")
    env = dict(os.environ, PYTHONPATH=str(project))
    exe = Path(sys.executable).with_name("tune-agent")
    done = subprocess.run(
        [str(exe), "space", "--from", "tinyproj.model:Net"],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import yaml

    from agent.project.space_file import parse_space

    parsed = parse_space(yaml.safe_load(done.stdout))
    assert {"model.lr", "model.hidden", "model.num_classes"} <= set(parsed.space.names)
    assert parsed.space["model.lr"].log


@pytest.mark.slow  # about a minute for both styles
@pytest.mark.parametrize("style", ["module", "cli"])
def test_a_created_project_study_resumes_from_its_stored_spec(style, store, tmp_path, cli, monkeypatch) -> None:
    """`resume` rebuilds the job from what the study stored (the classes, the space, the script and
    its configs): no probe of the script again, and the study's dataset is the one it started with."""
    project = write_project(tmp_path / "proj")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    if style == "module":
        source = ["--model", "tinyproj.model:Net", "--data", "tinyproj.data:WineData"]
    else:
        source = ["--cli", "main.py", "--config", "base.yaml"]
    made = cli("create", *source, "--space", "space.yaml", "--trials", "2", "--epochs", "1",
               "--study-name", f"later-{style}", *store.args)  # fmt: skip
    assert made.code == 0, made.err
    monkeypatch.chdir(tmp_path)  # resumed from another folder: the spec holds absolute paths
    res = cli("resume", f"later-{style}", "--tracking-uri", store.uri)
    assert res.code == 0, res.err
    assert "probing" not in res.out
    assert len(_finished(store, f"later-{style}")) == 2


@pytest.mark.slow  # two fresh processes on the example: about 40 s
def test_the_readme_project_commands_run_as_written_on_the_example(store, tmp_path) -> None:
    """README's two commands on examples/lightning_project, in a copy of it, as written but for a
    smaller budget and the test's store: both styles tune the example as it is."""
    import shutil

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Your own Lightning project") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).strip().splitlines()
    assert block[0] == "cd examples/lightning_project"
    example = Path(__file__).resolve().parents[2] / "examples" / "lightning_project"
    folder = tmp_path / "lightning_project"
    shutil.copytree(example, folder, ignore=shutil.ignore_patterns("mlflow", "models", "report", "__pycache__"))
    for line in block[1:]:
        words = line.split()
        assert words[0] == "../../.venv/bin/tune-agent" and words[1] == "start"
        args = words[2:]
        args[args.index("--trials") + 1], args[args.index("--epochs") + 1] = "2", "1"
        res = run_tune_agent("start", *args, *store.args, cwd=folder)
        assert res.returncode == 0, (line, res.stderr[-2000:])
        assert "model not kept" not in res.stdout + res.stderr
        assert len(_finished(store, _study_name(res.stdout))) == 2
