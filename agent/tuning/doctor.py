"""``tune-agent doctor``: is this installation ready to tune? One check per line, each with what to
do when it is not: the store (reachable, writable, its schema whole), the history in it, the
meta-models ``dvc repro`` builds (and which job and search space they serve), library versions,
and the threads torch would use on this machine."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
PACKAGES = ("torch", "lightning", "botorch", "gpytorch", "mlflow", "optuna", "ray", "dvc", "numpy", "scikit-learn")


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def _store_checks(tracking_uri: str | None, artifact_root: str | None) -> list[Check]:
    from agent.errors import TuneAgentError
    from agent.knowledge.mlflow_store import MlflowKnowledgeBase, _sqlite_path, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    out: list[Check] = []
    path = _sqlite_path(uri)
    if path is not None and path.exists():
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                verdict = db.execute("PRAGMA quick_check").fetchone()[0]
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                version = db.execute("SELECT version_num FROM alembic_version").fetchone() if "alembic_version" in tables else None
            whole = verdict == "ok" and {"runs", "experiments", "alembic_version"} <= tables
            out.append(Check("store schema", OK if whole else FAIL,
                             f"{path}: sqlite {verdict}, {len(tables)} tables, migration {version[0] if version else 'none'}"
                             if whole else f"{path}: sqlite says {verdict!r}; tables {sorted(tables)[:5]}... (move the file "
                             "aside; tune-agent makes a new store on next use)"))
        except sqlite3.Error as exc:
            out.append(Check("store schema", FAIL, f"{path}: {exc}"))
    elif path is not None:
        out.append(Check("store", WARN, f"{path} does not exist yet: the first study creates it"))
        return out
    if any(c.status == FAIL for c in out):
        return out
    try:
        start = time.perf_counter()
        kb = MlflowKnowledgeBase(tracking_uri, artifact_root)
        kb.open()
        studies = kb.list_studies()
        seconds = time.perf_counter() - start
        jobs: dict[str, int] = {}
        for s in studies:
            jobs[s.job] = jobs.get(s.job, 0) + 1
        what = ", ".join(f"{j}: {n}" for j, n in sorted(jobs.items())) or "no studies yet"
        out.append(Check("store reachable", OK, f"{uri} answered in {seconds:.2f} s; {len(studies)} studies ({what})"))
        if not studies:
            out.append(Check("history", WARN, "no history to warm-start from: `tune-agent bootstrap --starter` imports "
                                              "the starter history"))
        try:
            kb._check_artifact_root()  # noqa: SLF001 - the same check a study runs before it starts
            out.append(Check("artifacts writable", OK, str(kb.artifact_root or "(where the store's experiments keep them)")))
        except TuneAgentError as exc:
            out.append(Check("artifacts writable", FAIL, str(exc)))
    except TuneAgentError as exc:
        out.append(Check("store reachable", FAIL, str(exc)))
    return out


def _model_checks(models_dir: Path) -> list[Check]:
    out = []
    extractor, index = models_dir / "metafeature_extractor.pt", models_dir / "metafeature_index.json"
    if extractor.is_file() and index.is_file():
        try:
            keys = list(json.loads(index.read_text()))
            jobs = sorted({k.split("/")[1] for k in keys if k.count("/") >= 2})
            out.append(Check("meta-feature extractor", OK, f"{extractor}: {len(keys)} datasets indexed, jobs {', '.join(jobs) or '-'}"))
        except (OSError, ValueError) as exc:
            out.append(Check("meta-feature extractor", FAIL, f"{index} unreadable ({type(exc).__name__}): run `dvc repro`"))
    else:
        out.append(Check("meta-feature extractor", WARN, f"not in {models_dir}: warm start uses hand-crafted meta-features "
                                                          "until `dvc repro` trains it"))
    tnp, tnp_meta = models_dir / "tnp.pt", models_dir / "tnp.json"
    if tnp.is_file() and tnp_meta.is_file():
        try:
            meta = json.loads(tnp_meta.read_text())
            out.append(Check("transfer surrogate (TNP)", OK, f"{tnp}: job {meta.get('job', '?')}, space "
                                                              f"{str(meta.get('space_signature', meta.get('space', '?')))[:16]}"))
        except (OSError, ValueError) as exc:
            out.append(Check("transfer surrogate (TNP)", FAIL, f"{tnp_meta} unreadable ({type(exc).__name__}): run `dvc repro`"))
    else:
        out.append(Check("transfer surrogate (TNP)", WARN, f"not in {models_dir}: `--surrogate auto` uses RGPE until "
                                                            "`dvc repro` trains it"))
    return out


def _environment_checks() -> list[Check]:
    versions = []
    missing = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    out = [Check("versions", FAIL if missing else OK,
                 f"python {platform.python_version()}, " + ", ".join(versions) + (f"; missing: {', '.join(missing)}" if missing else ""))]
    import torch

    cores = os.cpu_count() or 1
    threads = torch.get_num_threads()
    gpu = "CUDA available" if torch.cuda.is_available() else "no GPU (CPU training)"
    status = OK if threads <= cores else WARN
    out.append(Check("threads", status, f"{cores} cores, torch uses {threads} intra-op threads; {gpu}; parallel workers "
                                         "pin one thread each"))
    return out


def run_doctor(tracking_uri: str | None, artifact_root: str | None, models_dir: Path) -> list[Check]:
    return _store_checks(tracking_uri, artifact_root) + _model_checks(models_dir) + _environment_checks()


def render(checks: list[Check], as_json: bool) -> str:
    if as_json:
        return json.dumps([asdict(c) for c in checks], indent=2)
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.status:4}  {c.name.ljust(width)}  {c.detail}" for c in checks)


def healthy(checks: list[Any]) -> bool:
    return all(c.status != FAIL for c in checks)
