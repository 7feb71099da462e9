"""``tune-agent doctor``: is this installation ready to tune? One check per line, each with what to
do when it is not: the store (reachable, writable, its schema whole), the history in it, the
meta-models ``dvc repro`` builds (and which job and search space they serve), library versions,
the threads torch would use on this machine and, with ``--ray-address``, the Ray cluster a study
would run its trials on (its nodes, their resources, and whether each has what a trial needs)."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from agent.ops.checks import FAIL, OK, WARN, Check
from agent.ops.ray_checks import ray_checks

PACKAGES = ("torch", "lightning", "botorch", "gpytorch", "mlflow", "optuna", "ray", "dvc", "numpy", "scikit-learn")


def _store_checks(tracking_uri: str | None, artifact_root: str | None, listed: list[Any] | None = None) -> list[Check]:
    """The store's checks; ``listed`` gets the studies it listed, for the checks that read them too."""
    from agent.errors import TuneAgentError
    from agent.knowledge import open_knowledge_base, resolve_tracking_uri, sqlite_path

    uri = resolve_tracking_uri(tracking_uri)
    out: list[Check] = []
    path = sqlite_path(uri)
    if path is not None and path.exists():
        out.append(_schema_check(path))
    elif path is not None:
        out.append(Check("store", WARN, f"{path} does not exist yet: the first study creates it"))
        return out
    if any(c.status == FAIL for c in out):
        return out
    try:
        start = time.perf_counter()
        kb = open_knowledge_base(tracking_uri, artifact_root, fast_reads=True)  # reads only: no MLflow import on sqlite
        kb.open()
        studies = kb.list_studies()
        if listed is not None:
            listed.extend(studies)
        seconds = time.perf_counter() - start
        jobs: dict[str, int] = {}
        for s in studies:
            jobs[s.job] = jobs.get(s.job, 0) + 1
        what = ", ".join(f"{j}: {n}" for j, n in sorted(jobs.items())) or "no studies yet"
        out.append(Check("store reachable", OK, f"{uri} answered in {seconds:.2f} s; {len(studies)} studies ({what})"))
        if not studies:
            out.append(
                Check(
                    "history",
                    WARN,
                    "no history to warm-start from: `tune-agent bootstrap starter` imports the starter history",
                )
            )
        out.append(_artifacts_check(kb))
        out.append(_scratch_check(getattr(kb, "artifact_root", None), studies))
    except TuneAgentError as exc:
        out.append(Check("store reachable", FAIL, str(exc)))
    return out


def _scratch_check(artifact_root: str | None, studies: list[Any]) -> Check:
    """The trial scratch (checkpoints of killed trials) kept for studies that can resume, and what
    is left of studies that never will (finished, or gone from the store): named for removal."""
    from agent.tuning.scratch import scratch_root

    root = scratch_root(artifact_root)
    if root == scratch_root(None):  # shared by every store without a local artifact root: not this store's alone
        return Check("trial scratch", OK, f"under {root}, shared with other stores: not checked")
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not folders:
        return Check("trial scratch", OK, f"no checkpoints of killed trials under {root}")
    status = {s.study_id: s.status for s in studies}

    def megabytes(paths: list[Path]) -> float:
        return sum(f.stat().st_size for p in paths for f in p.rglob("*") if f.is_file()) / 1e6

    stale = [p for p in folders if status.get(p.name) in (None, "finished")]
    kept = [p for p in folders if p not in stale]
    said = f"{len(kept)} resumable studies' checkpoints ({megabytes(kept):.1f} MB) under {root}"
    if not stale:
        return Check("trial scratch", OK, said)
    names = " ".join(str(p) for p in stale[:3]) + (" ..." if len(stale) > 3 else "")
    return Check(
        "trial scratch",
        WARN,
        f"{len(stale)} folder(s) of studies that will not resume (finished or gone), {megabytes(stale):.1f} MB: "
        f"remove them (rm -r {names}); {said}",
    )


def _schema_check(path: Path) -> Check:
    """The embedded store's file at ``path``: sqlite's own check, and the tables MLflow makes."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = (
                db.execute("SELECT version_num FROM alembic_version").fetchone()
                if "alembic_version" in tables
                else None
            )
    except sqlite3.Error as exc:
        return Check("store schema", FAIL, f"{path}: {exc}")
    whole = verdict == "ok" and {"runs", "experiments", "alembic_version"} <= tables
    return Check(
        "store schema",
        OK if whole else FAIL,
        f"{path}: sqlite {verdict}, {len(tables)} tables, migration {version[0] if version else 'none'}"
        if whole
        else f"{path}: sqlite says {verdict!r}; tables {sorted(tables)[:5]}... (move the file "
        "aside; tune-agent makes a new store on next use)",
    )


def _artifacts_check(kb: Any) -> Check:
    """Whether the artifact root of ``kb`` (the MLflow backend: the root and its write check are its
    own, not the knowledge-base interface's) takes files."""
    from agent.errors import TuneAgentError

    try:
        kb._check_artifact_root()
        return Check("artifacts writable", OK, str(kb.artifact_root or "(where the store's experiments keep them)"))
    except TuneAgentError as exc:
        return Check("artifacts writable", FAIL, str(exc))


def _source_model_checks(
    studies: list[Any], models_dir: Path, tracking_uri: str | None, artifact_root: str | None
) -> list[Check]:
    """How much of the history (``studies``, as the store check listed them) a study loads instead
    of fitting: the store's published source models (fetched into the cache) and models_dir's own."""
    from agent.errors import TuneAgentError
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.meta_cache import CHUNKS, fetch
    from agent.tuning.source_models import coverage

    try:
        kb = open_knowledge_base(tracking_uri, artifact_root, fast_reads=True)
        scopes = sorted({f"{s.job}/{s.space_signature}" for s in studies})
        published = [p for scope in scopes for p in fetch(kb, scope).paths(CHUNKS)]
        stored, total = coverage(studies, models_dir, published)
    except TuneAgentError as exc:
        return [Check("source models", FAIL, str(exc))]
    if total == 0:
        return []
    where = f"the store's published meta-models and {models_dir}" if published else str(models_dir)
    if stored == total:
        return [
            Check("source models", OK, f"all {total} historical datasets stored in {where}: studies fit no source GP")
        ]
    return [
        Check(
            "source models",
            WARN,
            f"{stored} of {total} historical datasets stored in {where}: a transfer "
            "surrogate fits the rest at its start; `tune-agent meta publish` "
            "(or `dvc repro`) fits and publishes them once",
        )
    ]


def _model_checks(models_dir: Path) -> list[Check]:
    out = []
    extractor, index = models_dir / "metafeature_extractor.pt", models_dir / "metafeature_index.json"
    if extractor.is_file() and index.is_file():
        try:
            keys = list(json.loads(index.read_text()))
            jobs = sorted({k.split("/")[1] for k in keys if k.count("/") >= 2})
            out.append(
                Check(
                    "meta-feature extractor",
                    OK,
                    f"{extractor}: {len(keys)} datasets indexed, jobs {', '.join(jobs) or '-'}",
                )
            )
        except (OSError, ValueError) as exc:
            out.append(
                Check("meta-feature extractor", FAIL, f"{index} unreadable ({type(exc).__name__}): run `dvc repro`")
            )
    else:
        out.append(
            Check(
                "meta-feature extractor",
                WARN,
                f"not in {models_dir}: warm start uses hand-crafted meta-features until `dvc repro` trains it",
            )
        )
    tnp, tnp_meta = models_dir / "tnp.pt", models_dir / "tnp.json"
    if tnp.is_file() and tnp_meta.is_file():
        try:
            meta = json.loads(tnp_meta.read_text())
            out.append(
                Check(
                    "transfer surrogate (TNP)",
                    OK,
                    f"{tnp}: job {meta.get('job', '?')}, space "
                    f"{str(meta.get('space_signature', meta.get('space', '?')))[:16]}",
                )
            )
        except (OSError, ValueError) as exc:
            out.append(
                Check(
                    "transfer surrogate (TNP)", FAIL, f"{tnp_meta} unreadable ({type(exc).__name__}): run `dvc repro`"
                )
            )
    else:
        out.append(
            Check(
                "transfer surrogate (TNP)",
                WARN,
                f"not in {models_dir}: `--surrogate auto` uses RGPE until `dvc repro` trains it",
            )
        )
    return out


# What torch itself says about threads and CUDA, asked in a child process started before the other
# checks (importing torch takes 1.7-1.9 s here, more than all the others) and kept in a small cache
# file keyed by what decides the answer, so a second ``doctor`` answers at once.
_PROBE = (
    "import json, torch; print(json.dumps({'threads': torch.get_num_threads(), "
    "'cuda': bool(torch.cuda.is_available()), 'devices': torch.cuda.device_count() if "
    "torch.cuda.is_available() else 0}))"
)
_PROBE_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TORCH_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
)


def _probe_key() -> str:
    """What torch's answer depends on: this interpreter, torch's version, the threading variables,
    the CPUs this process may use and the GPU device files."""
    import glob
    import hashlib
    import sys

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [
        sys.executable,
        torch_version,
        os.cpu_count(),
        affinity,
        sorted(glob.glob("/dev/nvidia*")),
        [os.environ.get(k) for k in _PROBE_ENV],
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _probe_cache() -> Path:
    from agent.knowledge.study_cache import user_cache_dir

    return user_cache_dir() / "torch_probe.json"


class TorchProbe:
    """torch's thread count and CUDA, from the cache when its key matches, else from a child
    process started here and read in :meth:`result` (so it runs beside the store checks)."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self.key, self.cached, self._proc = _probe_key(), None, None
        try:
            saved = json.loads(_probe_cache().read_text())
            if saved.get("key") == self.key:
                self.cached = saved["answer"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if self.cached is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )

    def result(self, timeout: float = 120.0) -> tuple[dict[str, Any] | None, str]:
        """(torch's answer or None, why not / where it came from)."""
        import subprocess

        if self.cached is not None:
            return self.cached, "cached"
        assert self._proc is not None
        try:
            out, err = self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            return None, f"importing torch took over {timeout:g} s"
        if self._proc.returncode != 0:
            lines = (err or "").strip().splitlines()
            return None, lines[-1] if lines else f"exit {self._proc.returncode}"
        try:
            answer = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None, f"unexpected answer {out.strip()[:80]!r}"
        try:
            path = _probe_cache()
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": self.key, "answer": answer}))
            tmp.replace(path)
        except OSError:
            pass  # an unwritable cache only means the next doctor asks torch again
        return answer, "asked torch"


def _environment_checks(probe: TorchProbe | None = None) -> list[Check]:
    versions = []
    missing = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    out = [
        Check(
            "versions",
            FAIL if missing else OK,
            f"python {platform.python_version()}, "
            + ", ".join(versions)
            + (f"; missing: {', '.join(missing)}" if missing else ""),
        )
    ]
    answer, how = (probe or TorchProbe()).result()
    if answer is None:
        out.append(Check("threads", FAIL, f"torch could not be asked: {how}"))
        return out
    cores = os.cpu_count() or 1
    threads = int(answer["threads"])
    gpu = f"CUDA available ({answer.get('devices', 0)} device(s))" if answer["cuda"] else "no GPU (CPU training)"
    status = OK if threads <= cores else WARN
    out.append(
        Check(
            "threads",
            status,
            f"{cores} cores, torch uses {threads} intra-op threads; {gpu}; Ray workers "
            "train on --cpus-per-trial threads each",
        )
    )
    return out


def run_doctor(
    tracking_uri: str | None,
    artifact_root: str | None,
    models_dir: Path,
    ray_address: str | None = None,
    job: str | None = None,
    working_dir: str | None = None,
    resources: Any = None,
) -> list[Check]:
    probe = TorchProbe()  # torch's import runs in a child beside the store checks
    studies: list[Any] = []
    checks = _store_checks(tracking_uri, artifact_root, studies)  # the store is opened and listed once
    if any(c.name == "store reachable" and c.status == OK for c in checks):
        checks += _source_model_checks(studies, models_dir, tracking_uri, artifact_root)
    from agent.warm.process import describe

    warm_ok, warm = describe()
    checks += (
        _model_checks(models_dir) + _environment_checks(probe) + [Check("warm process", OK if warm_ok else WARN, warm)]
    )
    return checks + (
        ray_checks(ray_address, job=job, working_dir=working_dir, resources=resources) if ray_address else []
    )


def render(checks: list[Check], as_json: bool) -> str:
    if as_json:
        return json.dumps([asdict(c) for c in checks], indent=2)
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.status:4}  {c.name.ljust(width)}  {c.detail}" for c in checks)


def healthy(checks: list[Any]) -> bool:
    return all(c.status != FAIL for c in checks)
