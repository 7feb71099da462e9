"""Every fault path a user can walk into is one line and exit code 2, with nothing written.

Each case runs one command through the real entry point against a real sqlite store (with a small
history where the case needs one), and asserts: exit code 2, at most two lines on stderr, no
traceback, the line names the cause, and the store holds exactly what it held before. The disk
cases use a real small tmpfs (full) and a tmpfs remounted read-only; they are skipped, with the
reason, where this process may not mount.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Env:
    tmp: Path
    store: Path
    artifacts: Path
    models: Path
    mounts: list[Path] = field(default_factory=list)

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.store}"


def _history(env: Env) -> None:
    """Six studies of the starter history in the store: enough for a warm start to look for neighbours."""
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.starter import import_starter, read_starter, write_starter

    header, entries = read_starter(REPO / "agent" / "knowledge" / "starters" / "mlp.npz")
    write_starter(env.tmp / "six.npz", header["job"], header["space"], entries[:6])
    import_starter(open_knowledge_base(env.uri, str(env.artifacts)), env.tmp / "six.npz")
    from agent.knowledge.mlflow.store_file import _dispose_engine

    _dispose_engine(env.uri)  # no connection left open on the file (a read-only remount needs none)


def _mount(env: Env, name: str, size: str) -> Path:
    path = env.tmp / name
    path.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode}): the disk cases need one")
    env.mounts.append(path)
    return path


def _fill(path: Path) -> None:
    with open(path / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass


def full_store_disk(env: Env) -> None:
    disk = _mount(env, "full", "64k")
    env.store = disk / "m.db"


def full_artifact_disk(env: Env) -> None:
    disk = _mount(env, "fullart", "256k")
    _fill(disk)
    env.artifacts = disk / "art"


def read_only_store(env: Env) -> None:
    disk = _mount(env, "ro", "16m")
    env.store, env.artifacts = disk / "m.db", disk / "art"
    _history(env)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)


def history(env: Env) -> None:
    _history(env)


def corrupt_extractor(env: Env) -> None:
    _history(env)
    env.models.mkdir()
    (env.models / "metafeature_extractor.pt").write_bytes(b"\x80\x02garbage, not a torch file")


def corrupt_index(env: Env) -> None:
    import shutil

    _history(env)
    env.models.mkdir()
    built = REPO / "models" / "metafeature_extractor.pt"
    if not built.exists():
        from agent.meta.siamese import ExtractorConfig, MetaFeatureExtractor, MetaFeatureNet

        config = ExtractorConfig()
        MetaFeatureExtractor(MetaFeatureNet(config), config, 1.0).save(env.models / "metafeature_extractor.pt")
    else:
        shutil.copy(built, env.models / "metafeature_extractor.pt")
    (env.models / "metafeature_index.json").write_text('{"cut": [1.0, 2.')


def corrupt_tnp(env: Env) -> None:
    import json

    from agent.jobs import load_job

    _history(env)
    env.models.mkdir()
    (env.models / "tnp.pt").write_bytes(b"PK\x03\x04 not a whole archive")
    (env.models / "tnp.json").write_text(
        json.dumps({"job": "mlp", "space_signature": load_job("mlp").space.signature(), "sources": 6})
    )


def artifact_conflict(env: Env) -> None:
    """A study of mlp made with one artifact root: the job's experiment keeps its artifacts there."""
    from agent.cli import main

    with pytest.raises(SystemExit) as made:
        main(
            [
                "create",
                "--dataset",
                "iris",
                "--job",
                "mlp",
                "--trials",
                "2",
                "--warm-start",
                "none",
                "--study-name",
                "first",
                "--tracking-uri",
                env.uri,
                "--artifact-root",
                str(env.tmp / "first-root"),
            ]
        )
        raise SystemExit(0)
    assert made.value.code in (0, None)


def bad_files(env: Env) -> None:
    (env.tmp / "garbage.npz").write_bytes(b"this is not an archive")
    (env.tmp / "cont.csv").write_text("a,b,y\n" + "\n".join(f"{i},{i * 2},{i / 7:.4f}" for i in range(40)))
    (env.tmp / "notmap.yaml").write_text("- just\n- a list\n")
    (env.tmp / "unknown.yaml").write_text("trials: 3\nspeed: fast\n")
    (env.tmp / "params.yaml").write_text("export: [1, 2]\n")
    (env.tmp / "afile").write_text("x")
    (env.tmp / "store.db").write_bytes(b"not a sqlite database at all" * 100)
    np.savez(env.tmp / "empty.npz", nothing=np.zeros(3))


START = ("start", "--dataset", "iris", "--job", "mlp", "--trials", "2", "--epochs", "1")
S = ("--tracking-uri", "{uri}")
A = ("--artifact-root", "{art}")

CASES: list[tuple[str, tuple[str, ...], str, Callable[[Env], None] | None]] = [
    # where the store is
    ("file: URI", (*START, "--tracking-uri", "file://{tmp}/mlruns"), "folder store", None),
    ("plain folder URI", (*START, "--tracking-uri", "{tmp}/mlruns"), "folder store", None),
    ("unknown scheme", (*START, "--tracking-uri", "ftp://host/store"), "'ftp'", None),
    ("store folder missing", (*START, "--tracking-uri", "sqlite:///{tmp}/no/such/m.db"), "does not exist", None),
    ("store file not sqlite", (*START, "--tracking-uri", "sqlite:///{tmp}/store.db"), "cannot be opened", bad_files),
    ("unreachable server", (*START, "--tracking-uri", "http://127.0.0.1:9"), "http://127.0.0.1:9", None),
    ("store on a full disk", (*START, *S), "disk is full", full_store_disk),
    ("artifacts on a full disk", (*START, "--warm-start", "none", *S, *A), "disk is full", full_artifact_disk),
    ("read-only store", (*START, "--warm-start", "none", *S), "read-only", read_only_store),
    ("read-only store, resume", ("resume", "bootstrap-mlp-digits", *S), "read-only", read_only_store),
    (
        "artifact root taken",
        (*START, *S, "--artifact-root", "{tmp}/second-root"),
        "already keeps its artifacts",
        artifact_conflict,
    ),
    ("artifact root is a file", (*START, *S, "--artifact-root", "{tmp}/afile/art"), "not writable", bad_files),
    # model files the pipeline wrote
    (
        "corrupt extractor",
        (*START, "--warm-start", "learned", "--models-dir", "{models}", *S, *A),
        "metafeature_extractor.pt",
        corrupt_extractor,
    ),
    (
        "corrupt extractor index",
        (*START, "--warm-start", "learned", "--models-dir", "{models}", *S, *A),
        "metafeature_index.json",
        corrupt_index,
    ),
    (
        "corrupt TNP",
        (*START, "--warm-start", "none", "--surrogate", "tnp", "--models-dir", "{models}", *S, *A),
        "tnp.pt",
        corrupt_tnp,
    ),
    # options of a study
    ("metric the job never logs", (*START, "--metric", "nosuch", *S, *A), "logs val_loss", None),
    ("--val-fraction above 1", (*START, "--val-fraction", "1.5", *S), "--val-fraction", None),
    ("--time-limit 0", (*START, "--time-limit", "0", *S), "--time-limit", None),
    ("--k 0", (*START, "--k", "0", *S), "--k", None),
    ("--source without hts", (*START, "--source", "other", *S), "--source", None),
    ("unknown --surrogate", (*START, "--surrogate", "forest", *S), "forest", None),
    ("--workers 0", (*START, "--workers", "0", *S), "--workers", None),
    ("--ray-working-dir in one process", (*START, "--ray-working-dir", "{tmp}", *S), "--ray-working-dir", None),
    ("--gpus-per-trial above 1", (*START, "--gpus-per-trial", "2", *S), "--gpus-per-trial", None),
    ("continuous label", ("start", "--dataset", "{tmp}/cont.csv", "--label", "y", "--job", "mlp", *S), "y", bad_files),
    (
        "--drop of a missing column",
        ("start", "--dataset", "{tmp}/cont.csv", "--label", "a", "--drop", "zz", "--job", "mlp", *S),
        "zz",
        bad_files,
    ),
    ("npz without X", ("start", "--dataset", "{tmp}/empty.npz", "--job", "mlp", *S), "empty.npz", bad_files),
    ("--config missing", (*START, "--config", "{tmp}/none.yaml", *S), "--config", None),
    ("--config not a mapping", (*START, "--config", "{tmp}/notmap.yaml", *S), "mapping", bad_files),
    ("--config unknown key", (*START, "--config", "{tmp}/unknown.yaml", *S), "speed", bad_files),
    ("existing study name", (*START, "--study-name", "bootstrap-mlp-digits", *S, *A), "already exists", history),
    # other commands
    ("resume unknown study", ("resume", "nope", *S), "nope", history),
    ("resume with another job", ("resume", "bootstrap-mlp-digits", "--job", "cnn", *S), "job", history),
    ("ask unknown study", ("ask", "nope", *S), "nope", history),
    ("tell both value and failed", ("tell", "nope", "1", "--value", "1", "--failed", "x", *S), "exactly one", history),
    ("tell trial 0", ("tell", "bootstrap-mlp-digits", "0", "--value", "1", *S), "numbered from 1", history),
    ("best unknown study", ("best", "nope", *S), "nope", history),
    ("report unknown study", ("report", "nope", "--out", "{tmp}/r", *S), "nope", history),
    ("starter not an archive", ("bootstrap", "starter", "{tmp}/garbage.npz", *S), "not a starter file", bad_files),
    ("starter missing", ("bootstrap", "starter", "{tmp}/missing.npz", *S), "not found", None),
    ("bootstrap train --configs 0", ("bootstrap", "train", "--configs", "0", *S), "--configs", None),
    ("clean a non-starter", ("bootstrap", "clean", "{tmp}/garbage.npz"), "not a starter file", bad_files),
    (
        "import without its space file",
        ("import", "{tmp}/cont.csv", "--space", "{tmp}/none.json", "--job-name", "j", *S),
        "none.json",
        bad_files,
    ),
    (
        "import a table without task/value",
        ("import", "{tmp}/cont.csv", "--space", "{tmp}/space.json", "--job-name", "j", *S),
        "task",
        lambda env: (bad_files(env), (env.tmp / "space.json").write_text('{"params": []}')),
    ),
    ("neighbors of a missing file", ("neighbors", "--dataset", "{tmp}/none.csv", *S), "none.csv", None),
    ("server on a file", ("server", "--data-dir", "{tmp}/afile/data"), "--data-dir", bad_files),
    ("ui of a server URI", ("ui", "--tracking-uri", "http://127.0.0.1:9"), "127.0.0.1:9", None),
    ("bench bad --fidelity", ("bench", "lcbench", "--fidelity", "epoch", "--out", "{tmp}/b"), "--fidelity", None),
    (
        "meta params not stages",
        ("meta", "train", "--params", "{tmp}/params.yaml", "--models-dir", "{models}", *S),
        "--params",
        bad_files,
    ),
    (
        "sanity of a missing starter",
        ("bench", "neighbours", "--sanity", "{tmp}/none.npz", "--out", "{tmp}/b"),
        "not found",
        None,
    ),
]


def _snapshot(env: Env) -> object:
    from agent.knowledge import open_knowledge_base

    if not env.store.exists():
        return None
    return sorted((s.name, s.status) for s in open_knowledge_base(env.uri).list_studies())


@pytest.mark.parametrize("case, args, needle, setup", CASES, ids=[c[0] for c in CASES])
def test_fault_path_is_one_line_exit_2_and_writes_nothing(
    case, args, needle, setup, cli, tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    env = Env(tmp_path, tmp_path / "m.db", tmp_path / "art", tmp_path / "models")
    try:
        if setup is not None:
            setup(env)
        before = _snapshot(env)
        argv = [a.format(tmp=tmp_path, uri=env.uri, art=env.artifacts, models=env.models) for a in args]
        res = cli(*argv)
        lines = res.err.strip().splitlines()
        assert res.code == 2, (case, res.code, res.err[-1500:])
        assert 1 <= len(lines) <= 2 and "Traceback" not in res.err, res.err[-1500:]
        assert needle in res.err, (needle, res.err)
        if not any(m in env.store.parents for m in env.mounts) or setup is not read_only_store:
            assert _snapshot(env) == before, "the store changed"
    finally:
        for mount in reversed(env.mounts):
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_there_are_at_least_forty_fault_paths() -> None:
    assert len(CASES) >= 40
