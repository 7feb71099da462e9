"""The ``tune-agent`` command line (:mod:`agent.cli.main`): commands only, each a thin layer over a
service; ``tune-agent-bench`` (:func:`~agent.cli.main.bench_main`) holds the benchmarks."""

from agent.cli.main import bench_main, main

__all__ = ["bench_main", "main"]
