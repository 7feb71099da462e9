"""The benchmark journals' code fingerprint: code changes re-run, docstrings and comments do not."""

from __future__ import annotations

import json
from pathlib import Path

from agent.bench.fingerprint import PACKAGE, engine_fingerprint, run_key, source_fingerprint

MODULE = '''"""A module."""


def f(x):
    """Doubles."""
    return 2 * x  # twice
'''


def _fingerprint(tmp_path: Path, text: str) -> str:
    (tmp_path / "m.py").write_text(text)
    return source_fingerprint([tmp_path / "m.py"], tmp_path)


def test_docstrings_comments_and_layout_do_not_count_code_does(tmp_path: Path) -> None:
    base = _fingerprint(tmp_path, MODULE)
    reworded = MODULE.replace("A module.", "Another module, reworded.").replace("Doubles.", "x times 2.")
    relaid = reworded.replace("# twice", "# two times").replace("return 2 * x", "return (2 *\n            x)")
    assert _fingerprint(tmp_path, relaid) == base
    assert _fingerprint(tmp_path, MODULE.replace("2 * x", "3 * x")) != base
    # a function whose only statement was its docstring still parses to something stable
    assert _fingerprint(tmp_path, 'def g():\n    """Only a docstring."""\n') == _fingerprint(
        tmp_path, "def g():\n    pass\n"
    )


def test_engine_fingerprint_covers_the_sampler_not_the_cli() -> None:
    from agent.bench import fingerprint

    files = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")]
    engine = [f for f in files if not fingerprint._is_presentation(f)]
    assert "samplers/bo.py" in engine and "samplers/acquisition.py" in engine and "surrogates/gp.py" in engine
    assert not any(f.startswith(("cli/", "bench/")) for f in engine)
    assert engine_fingerprint("bench/transfer.py") != engine_fingerprint("bench/hts_pairs.py")


def test_run_key_names_settings_and_code() -> None:
    a = run_key("bench/transfer.py", {"method": "gp", "budget": 30})
    assert a == run_key("bench/transfer.py", {"budget": 30, "method": "gp"})
    assert a != run_key("bench/transfer.py", {"method": "gp", "budget": 20})
    assert len(a) == 16 and json.dumps(a)


def test_bench_fingerprint_prints_what_a_transfer_report_names(cli) -> None:
    res = cli("bench", "fingerprint")
    assert res.code == 0 and res.out.strip() == engine_fingerprint("bench/transfer.py")
    assert len(res.out.strip()) == 16


def test_a_benchmark_run_imports_none_of_the_code_its_fingerprint_leaves_out(tmp_path: Path) -> None:
    """The Ray modules are left out of the fingerprint as code a benchmark never runs: a batch
    benchmark (simulated workers) in a fresh process imports neither them nor Ray."""
    import subprocess
    import sys

    from agent.bench import fingerprint

    toy = Path(__file__).resolve().parent / "fixtures" / "yahpo_toy"
    script = f"""
import atexit, json, sys
names = lambda: sorted(m for m in sys.modules if m == "ray" or m.startswith("agent."))
atexit.register(lambda: print("MODULES", json.dumps(names())))
from agent.cli import bench_main
bench_main(["lcbench", "--scenario", {str(toy)!r}, "--target", "cost", "--minimize", "--fidelity", "repl=5",
      "--tasks", "2", "--seeds", "1", "--budget", "4", "--workers", "1", "--methods", "gp", "--batch", "2",
      "--out", {str(tmp_path)!r}])
"""
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("MODULES ")]
    loaded = set(json.loads(line.removeprefix("MODULES ")))
    assert "agent.execution.workers" in loaded and "agent.samplers.bo" in loaded  # the engine it did run
    left_out = {"agent." + p.removesuffix(".py").replace("/", ".") for p in fingerprint.NOT_BENCHMARKED}
    assert not loaded & (left_out | {"ray"}), loaded & (left_out | {"ray"})
