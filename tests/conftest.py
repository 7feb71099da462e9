"""Shared fixtures: a real sqlite MLflow store in a temp dir and an in-process CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The tracking servers the tests start run as the product's do (agent.ops.team_server): without
# MLflow 3's GenAI job runner, whose worker processes would compete for the cores
os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
# Studies here train in the test's process: a trial process (agent/execution/trial_process.py, the
# product's default) costs each study its own Lightning import, seconds that hundreds of tiny studies
# would add to the suite. tests/tuning/test_trial_process.py and README's quickstart test run it.
os.environ.setdefault("TUNE_AGENT_TRIAL_PROCESS", "0")
# Commands run by the console script here are fresh processes, and none leaves a warm process behind
# (agent/warm/process.py, the product's default); tests/test_warm_process.py runs one of its own.
os.environ.setdefault("TUNE_AGENT_DAEMON", "0")
# Published meta-models are fetched into a cache of the test session's own, never ~/.cache/tune-agent;
# each test then gets a folder of its own (_private_meta_model_cache)
os.environ.setdefault("TUNE_AGENT_CACHE", tempfile.mkdtemp(prefix="tune-agent-test-cache-"))

# The files whose tests take minutes (servers, Ray, studies in subprocesses, `dvc repro`), longest
# first. They are collected before the rest, so that `-n 2 --dist loadfile`, which hands out files
# in collection order, starts them early and fills the end with short files; collected in path
# order, tests/tuning/test_parallel.py (about 3 minutes) came last and ran alone.
HEAVY_FIRST = (
    "tuning/test_parallel.py",
    "meta/test_warmstart_pipeline.py",
    "knowledge/test_outage.py",
    "test_resume_and_server.py",
    "project/test_own_project.py",
    "knowledge/test_team_server.py",
    "bench/test_one_engine.py",
    "test_user_facing.py",
    "test_surrogate_choice.py",
    "bench/test_any_scenario.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    tests = Path(__file__).resolve().parent

    def order(item: pytest.Item) -> int:
        try:
            return rank.get(Path(item.fspath).resolve().relative_to(tests).as_posix(), len(rank))
        except ValueError:  # a file outside tests/
            return len(rank)

    items.sort(key=order)  # stable: each file's own order is kept


@pytest.fixture(scope="session", autouse=True)
def _repo_models_untouched():
    """Studies in tests that keep the default ``--models-dir models`` store their source models in
    the repository's ``models/``; the file is removed again unless it was there before."""
    path = REPO / "models" / "source_models.jsonl"
    existed = path.exists()
    yield
    if not existed:
        path.unlink(missing_ok=True)


@dataclass
class Store:
    root: Path

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def artifacts(self) -> str:
        return str(self.root / "art")

    @property
    def args(self) -> list[str]:
        return ["--tracking-uri", self.uri, "--artifact-root", self.artifacts]

    def kb(self):
        from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

        return MlflowKnowledgeBase(self.uri, self.artifacts)


@pytest.fixture(autouse=True)
def _private_meta_model_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test fetches published meta-models into a cache of its own, never the user's
    ``~/.cache/tune-agent`` (agent/knowledge/meta_cache.py)."""
    folder = tmp_path_factory.mktemp("meta-cache")
    folder.chmod(0o700)
    monkeypatch.setenv("TUNE_AGENT_CACHE", str(folder))
    return folder


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return Store(tmp_path)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Runs ``tune-agent ARGS`` in this process through the real entry point (``bench ARGS``:
    ``tune-agent-bench ARGS``)."""
    from agent.cli import bench_main, main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            if args and args[0] == "bench":
                bench_main(list(args[1:]))
            else:
                main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def run_tune_agent(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the installed console script in a fresh process."""
    env = dict(os.environ)
    env.pop("MLFLOW_TRACKING_URI", None)
    exe = Path(sys.executable).with_name("tune-agent")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
