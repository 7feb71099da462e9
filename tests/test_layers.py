"""The import-linter contracts in pyproject.toml hold: layers point one way, the benchmark reaches
surrogates only through the tuning services, mlflow, ray and optuna are imported only where their
one module is, and no package has an import cycle among its modules."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    if not exe.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.fail("lint-imports is not installed: pip install -e '.[dev]'")
        exe = Path(found)
    res = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in res.stdout


def test_help_imports_neither_numpy_nor_torch() -> None:
    """`tune-agent --help` and `start --help-all` build every option, --surrogate's and --sampler's
    choices included, from the registry's names alone (agent/registry.py): no entry is imported."""
    probe = (
        "import sys\nfrom agent.cli import main\n"
        "for args in (['--help'], ['start', '--help-all']):\n"
        "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
        "print('HEAVY', sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    )
    res = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "--surrogate" in res.stdout and "HEAVY []" in res.stdout, res.stdout[-500:] + res.stderr[-500:]
    assert "rgpe" in res.stdout and "hts-anchored" in res.stdout


def test_no_module_over_400_lines_and_no_package_over_15_percent() -> None:
    """One room per responsibility: no module grows past 400 lines as the formatter lays them out
    (ruff format spreads a long call over several lines), no package past 15 % of the package's lines."""
    root = Path(__file__).resolve().parents[1] / "agent"
    sizes = {p.relative_to(root).as_posix(): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    assert {m: n for m, n in sizes.items() if n > 400} == {}
    total = sum(sizes.values())
    packages: dict[str, int] = {}
    for module, n in sizes.items():
        if "/" in module:
            packages[module.split("/")[0]] = packages.get(module.split("/")[0], 0) + n
    assert {p: round(n / total, 3) for p, n in packages.items() if n > 0.15 * total} == {}


def test_no_function_over_60_lines_without_a_reason() -> None:
    """A function over 60 lines (from its ``def`` to its last line) says why on the line above it,
    ``# long: <reason>`` (a flat table of declarations, a class built in a closure); the rest are split."""
    import ast

    root = Path(__file__).resolve().parents[1] / "agent"
    unexplained = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                if node.end_lineno - node.lineno + 1 <= 60:
                    continue
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                above = lines[first - 2].strip() if first >= 2 else ""
                if not (above.startswith("# long:") and len(above) > len("# long: ") + 10):
                    unexplained.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert unexplained == []
