"""Bad input: one line on stderr, exit code 2, no traceback, nothing written to the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_tune_agent


def _start(store, *extra: str) -> list[str]:
    args = {"--dataset": "iris", "--job": "mlp", "--trials": "2", "--epochs": "1"}
    rest = list(extra)
    for i in range(0, len(rest), 2):
        args[rest[i]] = rest[i + 1]
    args.setdefault("--tracking-uri", store.uri)
    args.setdefault("--artifact-root", store.artifacts)
    return ["start", *[x for kv in args.items() for x in kv]]


def _bad_files(tmp: Path) -> dict[str, str]:
    (tmp / "empty.csv").write_text("")
    (tmp / "nolabel.csv").write_text("a,b\n" + "\n".join(f"{i},{i * 2}" for i in range(20)))
    (tmp / "one.csv").write_text("a,label\n" + "\n".join(f"{i},x" for i in range(20)))
    (tmp / "corrupt.npz").write_bytes(b"not a zip file at all")
    np.savez(tmp / "noy.npz", X=np.zeros((20, 3)))
    return {k: str(tmp / k) for k in ("empty.csv", "nolabel.csv", "one.csv", "corrupt.npz", "noy.npz")}


BAD_JOB = "class NoSpace:\n    name = 'nospace'\n    metric = 'val_loss'\n    mode = 'min'\njob = NoSpace()\n"


@pytest.mark.parametrize(
    "case, extra, needle",
    [
        ("unknown dataset", ["--dataset", "cifar-1000"], "cifar-1000"),
        ("unknown job", ["--job", "transformer"], "transformer"),
        ("missing file", ["--dataset", "/nonexistent/data.csv"], "/nonexistent/data.csv"),
        ("empty file", ["--dataset", "@empty.csv"], "empty"),
        ("no label column", ["--dataset", "@nolabel.csv"], "label"),
        ("missing --label column", ["--dataset", "@nolabel.csv", "--label", "klass"], "klass"),
        ("single class", ["--dataset", "@one.csv"], "class"),
        ("corrupt file", ["--dataset", "@corrupt.npz"], "corrupt.npz"),
        ("npz without y", ["--dataset", "@noy.npz"], "y"),
        ("single class subset", ["--dataset", "digits?classes=3"], "class"),
        ("zero trials", ["--trials", "0"], "--trials"),
        ("negative epochs", ["--epochs", "-1"], "--epochs"),
        ("non-integer trials", ["--trials", "many"], "trials"),
        ("job without protocol", ["--job", "badjobmod:job"], "space"),
        ("job module missing", ["--job", "no_such_module_x:job"], "no_such_module_x"),
        ("cnn on tabular", ["--job", "cnn"], "tabular"),
        ("unreachable server", ["--tracking-uri", "http://127.0.0.1:9"], "http://127.0.0.1:9"),
        ("bad mode", ["--mode", "sideways"], "sideways"),
        ("negative --random-every", ["--random-every", "-1"], "--random-every"),
        ("zero --n-init", ["--n-init", "0"], "--n-init"),
        ("unknown acquisition", ["--acq", "pi"], "pi"),
        ("zero --timeout", ["--timeout", "0"], "--timeout"),
        ("negative --ask-ahead", ["--workers", "2", "--ask-ahead", "-1"], "--ask-ahead"),
        ("unreachable --ray-address", ["--workers", "2", "--ray-address", "127.0.0.1:9"], "127.0.0.1:9"),
        ("malformed --ray-address", ["--ray-address", "head-node"], "head-node"),
        ("Ray Client address without ray[client]", ["--ray-address", "ray://127.0.0.1:9"], "ray[client]"),
    ],
)
def test_bad_start_input(case, extra, needle, store, cli, tmp_path, monkeypatch) -> None:
    files = _bad_files(tmp_path)
    (tmp_path / "badjobmod.py").write_text(BAD_JOB)
    monkeypatch.syspath_prepend(str(tmp_path))
    extra = [files[x[1:]] if x.startswith("@") else x for x in extra]
    res = cli(*_start(store, *extra))
    assert res.code == 2, (case, res)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tune-agent: error:"), res.err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.err
    assert not res.out.strip(), f"bad input printed progress first: {res.out!r}"
    assert not (store.root / "mlflow.db").exists(), "bad input wrote to the store"


def test_workers_that_cannot_start_keep_the_study_and_say_how_to_resume(store, cli, monkeypatch) -> None:
    """Ray failing to start (here: not importable, as on a broken install) after the study was
    created: one line that names the study and the resume command; the study holds no trial."""
    import agent.execution.ray_start as ray_start
    from agent.errors import TuneAgentError

    def no_ray():
        raise TuneAgentError("--workers needs Ray: pip install 'ray[default]'")

    monkeypatch.setattr(ray_start, "import_ray", no_ray)
    res = cli(*_start(store, "--workers", "2", "--study-name", "no-ray"))
    assert res.code == 2, res
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "pip install 'ray[default]'" in lines[0], res.err
    assert lines[0].endswith("continue with: tune-agent resume no-ray"), lines[0]
    kb = store.kb()
    study = kb.find_study("no-ray")
    assert study is not None and kb.trials(study) == []


def test_resume_errors(store, cli, tmp_path, monkeypatch) -> None:
    res = cli("resume", "nope", "--tracking-uri", store.uri)
    assert res.code == 2 and "nope" in res.err and len(res.err.strip().splitlines()) == 1
    assert not (store.root / "mlflow.db").exists()

    (tmp_path / "evolving.py").write_text("from agent.jobs.examples import LogisticJob\njob = LogisticJob()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert (
        cli(
            "create", "--dataset", "iris", "--job", "evolving:job", "--trials", "2", "--study-name", "ev", *store.args
        ).code
        == 0
    )
    res = cli("resume", "nope", "--tracking-uri", store.uri)
    assert res.code == 2 and "no study named 'nope'" in res.err
    res = cli("resume", "ev", "--job", "mlp", "--tracking-uri", store.uri)
    assert res.code == 2 and "job" in res.err

    # The user's job changes its search space between start and resume.
    import sys

    from agent.space import Float, SearchSpace

    sys.modules["evolving"].job.space = SearchSpace([Float("lr", 1e-3, 1.0, log=True)])
    res = cli("resume", "ev", "--tracking-uri", store.uri)
    assert res.code == 2 and "different search space" in res.err
    kb = store.kb()
    assert kb.trials(kb.find_study("ev")) == []  # nothing was written by the refused resumes


def test_bad_input_in_a_fresh_process_is_one_line(tmp_path) -> None:
    res = run_tune_agent(
        "start",
        "--dataset",
        str(tmp_path / "missing.csv"),
        "--job",
        "mlp",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'm.db'}",
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "missing.csv" in res.stderr
    assert not (tmp_path / "m.db").exists()


def test_an_unwritable_artifact_root_is_one_line_and_leaves_no_study(tmp_path, cli) -> None:
    """A regular file where the artifact root's directory should be: nothing can be written there
    (a real failure, not a permission bit root would ignore)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "1",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--tracking-uri",
        uri,
        "--artifact-root",
        str(blocker / "artifacts"),
        "--study-name",
        "ro",
    )
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1
    assert "is not writable" in res.err and "--artifact-root" in res.err
    from agent.knowledge import open_knowledge_base

    assert open_knowledge_base(uri).find_study("ro") is None
