"""The documentation matches the code where a check can say so: every page has a place of its own on
the site, the commands and options the user guide names exist, and the layers the architecture page
lists are the import-linter contract's."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GENERATED = ("benchmarks/figures.md", "changelog.md")  # made by docs/hooks/generated_pages.py


def test_every_page_reaches_the_site_under_its_own_path() -> None:
    from mkdocs.structure.files import File

    pages = [p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.parts]
    pages += list(GENERATED)
    dest = {}
    for page in pages:
        where = File(page, str(DOCS), "/site", use_directory_urls=True).dest_uri
        assert where not in dest, f"{page} and {dest.get(where)} both become {where}"
        dest[where] = page
    nav = (REPO / "mkdocs.yml").read_text()
    missing = [p for p in pages if p not in nav and not p.startswith(("index.md",))]
    assert missing == [], f"pages in no nav entry: {missing}"


def _commands(bench: bool = False) -> dict[str, object]:
    """Every command path (``start``, ``server user add``) and its click command; ``bench``: those
    of ``tune-agent-bench``."""
    import click

    from agent.cli.bench import bench as bench_group
    from agent.cli.main import cli

    found: dict[str, object] = {}

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            path = f"{prefix} {name}".strip()
            found[path] = command
            if isinstance(command, click.Group):
                walk(command, path)

    walk(bench_group if bench else cli, "")
    return found


def test_commands_and_options_the_guide_names_exist() -> None:
    """`tune-agent CMD ... --option` in the user guide, the README and the index, and
    `tune-agent-bench CMD ... --option` there and on the benchmarks pages: the command exists and so
    does each option written after it on the line."""
    guide = [REPO / "README.md", DOCS / "index.md", *sorted((DOCS / "guide").glob("*.md"))]
    problems = _unknown("tune-agent", _commands(), guide)
    problems += _unknown("tune-agent-bench", _commands(bench=True), guide + sorted((DOCS / "benchmarks").glob("*.md")))
    assert problems == []


def _unknown(program: str, commands: dict[str, object], texts: list[Path]) -> list[str]:
    """Where ``texts`` name a command of ``program`` that does not exist, or an option it lacks."""
    import click

    problems = []
    pattern = r"(?:^|[/\s])" + re.escape(program) + r" ((?:[a-z][a-z0-9-]*)(?: [a-z][a-z0-9-]*)*)((?: [^|#]*)?)"
    for path in texts:
        for line in _code(path.read_text()):
            for found in re.finditer(pattern, line):
                words = found.group(1).split()
                command = None
                for n in range(len(words), 0, -1):  # the longest known command path
                    if " ".join(words[:n]) in commands:
                        command = commands[" ".join(words[:n])]
                        break
                if command is None:
                    problems.append(f"{path.name}: no command `{program} {' '.join(words[:2])}`")
                    continue
                options = [p for p in getattr(command, "params", []) if isinstance(p, click.Option)]
                known = {o for p in options for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", found.group(2) or ""):
                    if option in known:
                        continue
                    problems.append(f"{path.name}: `{program} {' '.join(words)}` has no {option}")
    return problems


def _code(text: str) -> list[str]:
    """The lines of fenced code blocks and the inline code spans of a Markdown text."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append(line.split("  #")[0])
        else:
            out += re.findall(r"`([^`]+)`", line)
    return out


def test_the_architecture_page_lists_the_contract_s_layers() -> None:
    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    packages = {name.strip().removeprefix("agent.") for layer in contract["layers"] for name in layer.split("|")}
    page = (DOCS / "concepts" / "architecture.md").read_text()
    table = [line for line in page.splitlines() if line.startswith("|")]
    named = set(
        re.findall(r"`([a-z_]+)(?:/|\.py)`", " ".join(row.split("|")[2] for row in table if row.count("|") > 3))
    )
    assert packages - named == set(), f"layers the page does not place: {packages - named}"
