"""The import-linter contracts in pyproject.toml hold: layers point one way, and the benchmark
reaches surrogates only through the tuning services."""

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
    assert "Contracts: 2 kept, 0 broken." in res.stdout
