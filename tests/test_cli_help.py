"""A command line a user can hold in their head: `tune-agent --help` lists the product's commands
(the benchmarks are `tune-agent-bench`), `start --help` the options most studies set and one line
naming the others, `--help-all` every option with its help."""

from __future__ import annotations

import re


def test_start_help_shows_the_common_options_and_names_the_rest(cli) -> None:
    short = cli("start", "--help")
    assert short.code == 0
    head, more = short.out.split("more options (--help-all shows them)")
    rows = set(re.findall(r"^  (--[a-z-]+)", head, re.M))
    assert {"--dataset", "--job", "--model", "--space", "--trials", "--study-name", "--help-all"} <= rows
    assert "--acq" not in rows and "--ray-address" not in rows
    assert len(rows) <= 20 and len(short.out.splitlines()) <= 40  # one screen
    assert "--acq" in more and "--ray-address" in more
    full = cli("start", "--help-all")
    assert full.code == 0 and "more options" not in full.out
    assert re.search(r"^  --acq ", full.out, re.M) and re.search(r"^  --ray-address ", full.out, re.M)
    assert len(re.findall(r"^  --", full.out, re.M)) > len(re.findall(r"^  --", head, re.M))


def test_the_product_help_lists_no_benchmark_and_the_benchmarks_have_their_own(cli) -> None:
    product = cli("--help")
    assert product.code == 0 and not re.search(r"^  bench\b", product.out, re.M)
    commands = product.out.split("Commands:")[1]
    assert len(re.findall(r"^  [a-z]", commands, re.M)) <= 20 and len(product.out.splitlines()) <= 40
    bench = cli("bench", "--help")
    assert bench.code == 0 and "tune-agent-bench" in bench.out and re.search(r"^  lcbench ", bench.out, re.M)
