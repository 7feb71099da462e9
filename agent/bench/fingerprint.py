"""The code behind a benchmark's journalled runs, as one short hash.

A benchmark journal reuses a finished run when its key matches. Besides the protocol, the key
carries :func:`engine_fingerprint`: a hash of every engine module's syntax tree with docstrings
dropped, so a change of code re-runs (a hand-bumped revision alone would let a sampler change that
forgot the bump reuse stale runs), while comments, docstrings and layout do not.

Left out as presentation, not behaviour: the command line, the benchmarks other than the one
asking, progress lines, reports and ``doctor``. Left out as code a journalled benchmark never runs:
Ray's start and the Ray executor (a benchmark's trials run in its own process;
``tests/bench/test_fingerprint.py`` checks that a benchmark study does not import them).
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # agent/
PRESENTATION = (
    "cli",
    "bench",
    "examples",
    "ops",
    "warm",
    "execution/progress.py",
    "tuning/report.py",
    "tuning/report_front.py",
    "tuning/report_store.py",
)
NOT_BENCHMARKED = (
    "execution/ray_start.py",
    "execution/ray_workers.py",  # a study on Ray; benchmarks run none
    "execution/trial_process.py",
)  # a training job's trial process; a benchmark job is a lookup here


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def source_fingerprint(files: Iterable[Path], root: Path) -> str:
    """sha256 over each file's path (relative to ``root``) and its docstring-free syntax tree."""
    digest = hashlib.sha256()
    for path in sorted(Path(f) for f in files):
        tree = _without_docstrings(ast.parse(path.read_text(), filename=str(path)))
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(ast.dump(tree).encode() + b"\0")
    return digest.hexdigest()[:16]


def _is_presentation(rel: str) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in PRESENTATION + NOT_BENCHMARKED)


@cache
def engine_fingerprint(bench_module: str) -> str:
    """The engine's modules plus ``bench_module`` (e.g. ``"bench/transfer.py"``, relative to the package)."""
    files = [p for p in PACKAGE.rglob("*.py") if not _is_presentation(p.relative_to(PACKAGE).as_posix())]
    return source_fingerprint([*files, PACKAGE / bench_module], PACKAGE)


def run_key(bench_module: str, settings: Mapping[str, Any]) -> str:
    """A journal key: ``settings`` (what the protocol fixes) and the engine's fingerprint."""
    blob = json.dumps({**settings, "code": engine_fingerprint(bench_module)}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


ENVIRONMENT_PACKAGES = ("torch", "botorch", "gpytorch", "linear_operator", "scipy", "numpy", "optuna", "onnxruntime")


def environment() -> dict[str, str]:
    """What a report's figures also depend on besides the engine: the numerical libraries' versions
    and the CPU. The same engine can give different lcbench curves on two machines or library
    versions, while on one its runs repeat exactly; reports name these so a comparison can tell."""
    import platform
    from importlib import metadata

    env = {"python": platform.python_version(), "machine": platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                env["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    for name in ENVIRONMENT_PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = "missing"
    return env


def journal_rows(path: Path | None) -> Iterator[dict[str, Any]]:
    """The rows of a JSON-lines journal, skipping a line cut short by an interruption."""
    if path is None or not path.exists():
        return
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def end_journal_line(path: Path | None) -> None:
    """Ends a journal's last line if an interruption cut it, so it cannot swallow the next row."""
    if path is not None and path.exists() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def read_journal(path: Path, key: str, name: str) -> dict[tuple[str, int, str], dict[str, Any]]:
    """The runs a JSON-lines journal holds under ``key``: ``(row[name], seed, method) -> result``.
    Lines of other settings or code, and a line cut short by an interruption, are skipped."""
    done: dict[tuple[str, int, str], dict[str, Any]] = {}
    for row in journal_rows(path):
        try:
            if row.get("key") == key:
                done[(row[name], int(row["seed"]), row["method"])] = row["result"]
        except (ValueError, KeyError, TypeError):
            continue
    return done


__all__ = ("engine_fingerprint", "environment", "journal_rows", "read_journal", "run_key", "source_fingerprint")
