"""MkDocs hook: pages made from files at build time, so a figure on the site cannot drift from its file.

- ``benchmarks/figures.md``: one section per ``metrics/*.json`` (``## <file stem>``), with the command that
  writes it, the engine fingerprint of the code that ran, the date of the commit that last wrote
  it, its protocol and its figures; then the past baselines of ``metrics/history/*.json``, by date.
- ``changelog.md``: ``CHANGELOG.md`` as it is.
- In any page, a line ``<!-- metrics: STEM -->`` (or ``<!-- metrics: STEM key,key -->`` for some of
  the file's figures only) becomes that file's figures in a box, with the same command, engine and
  date and a link to the file's section of ``benchmarks/figures.md``. An unknown file fails the build.
"""

from __future__ import annotations

import json
import posixpath
import re
import subprocess
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "metrics"
HISTORY = METRICS / "history"
PROVENANCE = {"command", "engine", "baseline_engine", "protocol", "environment", "code"}
MARKER = re.compile(r"^<!-- metrics: ([\w.-]+)(?: ([\w@+ ,.-]+?))? -->$", re.M)
DATED = re.compile(r"_(\d{4}-\d{2}-\d{2})$")
MAX_ROWS = 60

# The command that writes each file that does not record its own (`command` in the file wins).
COMMANDS = {
    "arc": "tune-agent-bench arc --bo-seeds 5",
    "faults": "tune-agent-bench faults",
    "faults_mid_epoch": "tune-agent-bench faults --mid-epoch --studies 10",
    "hts_pairs": "tune-agent-bench hts --tracking-uri sqlite:///STARTER_STORE",
    "hts_pairs_m10": "tune-agent-bench hts --tracking-uri sqlite:///STARTER_STORE --n-init 10",
    "lcbench": "tune-agent-bench lcbench",
    "lcbench_batch4": "tune-agent-bench lcbench --methods gp,tpe --batch 4",
    "lcbench_batch4_ahead1": "tune-agent-bench lcbench --methods gp --batch 4 --ask-ahead 1 --seeds 3",
    "lcbench_batch4_ahead1_check": "tune-agent-bench lcbench --methods gp --batch 4 --ask-ahead 1 --seeds 3 "
    "--tag check",
    "lcbench_batch4_believer": "tune-agent-bench lcbench --methods gp --batch 4 --pending believer",
    "lcbench_batch4_liar": "tune-agent-bench lcbench --methods tpe --batch 4 --pending liar",
    "lcbench_hts": "tune-agent-bench lcbench --methods random,hts --tag hts",
    "lcbench_scale": "tune-agent-bench scale --sizes 100,300 --methods gp,rgpe,tnp --out metrics/lcbench_scale.json",
    "lcbench_shuffled": "tune-agent-bench lcbench --control shuffled --methods gp,rgpe,tnp",
    "metafeature_data": "tune-agent-bench metafeature-data --export HISTORY_EXPORT --extra EXTRA_EXPORT",
    "neighbour_sanity": "tune-agent-bench neighbours --sanity",
    "parallel": "tune-agent-bench parallel --workers 1,2 --ask-ahead 0,1",
    "parallel_16core": "tune-agent-bench parallel --workers 1,4,8 --out metrics/parallel_16core.json",
    "parallel_16core_e60": "tune-agent-bench parallel --workers 1,4 --epochs 60 --out metrics/parallel_16core_e60.json",
    "parallel_e100": "tune-agent-bench parallel --workers 1,2 --epochs 100 --out metrics/parallel_e100.json",
    "parallel_process": "tune-agent-bench parallel --process --workers 1,2 --out metrics/parallel_process.json",
    "parallel_wait": "tune-agent-bench parallel --epochs 2 --wait 1 --workers 1,4 --ask-ahead 0,1 "
    "--out metrics/parallel_wait.json",
    "parallel_wait_e10": "tune-agent-bench parallel --epochs 10 --wait 1 --workers 1,4 "
    "--out metrics/parallel_wait_e10.json",
    "parallel_wait_process": "tune-agent-bench parallel --process --epochs 2 --wait 1 --workers 1,4 "
    "--out metrics/parallel_wait_process.json",
    "pruning": "tune-agent-bench pruning --seeds 2 --pruners none,asha",
    "ray_share_overhead": "PYTHONPATH=<code> python scripts/ray_share_overhead.py",
    "reading_commands": "tune-agent-bench reading --tracking-uri sqlite:///STARTER_STORE --study bootstrap-mlp-digits "
    "--baseline DIR",
    "reading_commands_2026-11-27": "tune-agent-bench reading --tracking-uri sqlite:///STARTER_STORE "
    "--study bootstrap-mlp-digits --baseline DIR",
    "reading_commands_warm": "tune-agent-bench reading --tracking-uri sqlite:///STARTER_STORE "
    "--study bootstrap-mlp-digits --warm-process",
    "server": "tune-agent-bench server",
    "sources": "tune-agent-bench sources",
    "sources_mixed": "tune-agent-bench sources --scenario DIR --target 0 --sizes 120,1200,10000 "
    "--out metrics/sources_mixed.json",
    "train_metafeatures": "dvc repro (stage train-metafeatures: tune-agent meta train)",
    "train_transfer": "dvc repro (stage train-transfer: tune-agent meta train-transfer)",
    "warmstart": "dvc repro (stage evaluate: tune-agent evaluate)",
    "warmstart_e2e": "tune-agent-bench warmstart --tracking-uri sqlite:///STARTER_STORE",
    "warmstart_e2e_2026-11-27": "tune-agent-bench warmstart --tracking-uri sqlite:///STARTER_STORE",
}

# What each past baseline (metrics/history/) is a baseline of.
BASELINES = {
    "reading_commands_2026-11-27": "the reading commands (`best`, `history`, `neighbors`, `report`) in fresh "
    "processes, each against the code before the sqlite reads.",
    "startup_warm_2026-11-27": "time to the first trial, warm against cold, with the trials trained in the "
    "study's own process.",
    "startup_2026-11-28": "time to the first output and the first trial (iris, cold) in a fresh process, "
    "without the warm process.",
    "startup_warm_2026-11-28": "time to the first trial, warm against cold, in fresh processes with the "
    "trial process, without the warm process.",
    "warmstart_e2e_2026-11-27": "the end-to-end warm-start benchmark with all ten methods (learned "
    "meta-features and the TNP included) on a 240-dataset history that still held copies of held-out tables.",
}


def _committed(path: Path) -> str:
    """The date of the last commit that added or changed ``path`` (a pure rename does not count)."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--follow", "--diff-filter=AMC", "--", str(path.relative_to(ROOT))],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=20,
        )
        found = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    dated = DATED.search(path.stem)
    return found or (dated.group(1) if dated else "not committed")


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _plain(value: Any) -> bool:
    """A scalar, or a list of scalars: what one table cell shows."""
    return _scalar(value) or (isinstance(value, list) and all(_scalar(v) for v in value))


def _cell(value: Any) -> str:
    if isinstance(value, list) and all(_scalar(v) for v in value):
        text = ", ".join(_number(v) for v in value).replace("|", "/")
        return (text[:120] + " ...") if len(text) > 120 else text
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value)[:80].replace("|", "/") + "`"
    return _number(value).replace("|", "/").replace("\n", " ")


def _order(columns: list[str]) -> list[str]:
    """Columns in first-seen order, except that ``name@N`` columns of one name follow their N."""
    groups: list[str] = []
    for column in columns:
        group = column.split("@")[0]
        if group not in groups:
            groups.append(group)

    def key(column: str) -> tuple[int, float]:
        name, _, at = column.partition("@")
        return groups.index(name), float(at) if at.replace(".", "", 1).isdigit() else -1.0

    return sorted(columns, key=key)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row's cells: its scalars and lists of scalars, and those of its dict values as ``key.inner``."""
    cells: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            cells.update({f"{key}.{k}": v for k, v in value.items() if _plain(v)})
        elif _plain(value):
            cells[key] = value
    return cells


def _rows(rows: dict[str, dict[str, Any]]) -> list[str]:
    flat = {name: _flat(row) for name, row in rows.items()}
    columns: list[str] = []
    for row in flat.values():
        columns += [c for c in row if c not in columns]
    if not columns:
        return []
    columns = _order(columns)
    lines = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for name, row in flat.items()]
    return lines + [""]


def _values(items: dict[str, Any]) -> list[str]:
    return ["| figure | value |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in items.items()] + [""]


def _figure(name: str, value: Any, depth: int = 0) -> list[str]:
    """Markdown for one figure of a file: a table where its shape allows one."""
    label = [f"**{name}**", ""]
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            if len(value) > MAX_ROWS:
                return label + [f"{len(value)} entries, in the file.", ""]
            table = _rows({str(i): v for i, v in enumerate(value, 1)})
            return label + table if table else []
        return label + [_cell(value), ""] if value else []
    if not isinstance(value, dict) or not value:
        return []
    if all(isinstance(v, dict) for v in value.values()):
        table = _rows(value)
        return label + table if table else []
    plain = {k: v for k, v in value.items() if _plain(v)}
    lines = label + _values(plain) if plain else []
    if depth < 2:
        for key, inner in value.items():
            if key not in plain:
                lines += _figure(f"{name}.{key}", inner, depth + 1)
    return lines


def _provenance(path: Path, data: dict[str, Any]) -> list[str]:
    command = data.get("command") or COMMANDS.get(path.stem)
    said = "" if data.get("command") or not command else " (the command that writes this file; it does not record it)"
    lines = [f"Command: `{_cell(command)}`{said}" if command else "Command: not recorded in the file"]
    engine = data.get("engine")
    lines.append(f"Engine fingerprint: `{engine}`" if engine else "Engine fingerprint: not recorded in the file")
    if data.get("baseline_engine"):
        lines.append(f"Baseline engine fingerprint: `{data['baseline_engine']}`")
    if isinstance(data.get("code"), str):
        lines.append(f"Code: {_cell(data['code'])}")
    lines.append(f"Last committed: {_committed(path)}")
    environment = data.get("environment")
    if isinstance(environment, dict) and environment:
        lines.append("Environment: " + ", ".join(f"{k} {_cell(v)}" for k, v in environment.items()))
    return [line + "  " for line in lines[:-1]] + lines[-1:] + [""]


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PluginError(f"{path.relative_to(ROOT)} could not be read: {exc}") from exc


def _body(path: Path, data: Any, keys: list[str] | None = None) -> list[str]:
    """A file's provenance, then its figures (``keys`` only, when given), then its protocol."""
    if not isinstance(data, dict):
        return [f"A {type(data).__name__} of {len(data)} entries.", ""]
    lines = _provenance(path, data)
    wanted = {k: v for k, v in data.items() if k not in PROVENANCE and (keys is None or k in keys)}
    scalars = {k: v for k, v in wanted.items() if _scalar(v)}
    if scalars:
        lines += _values(scalars)
    for key, value in wanted.items():
        if not _scalar(value):
            lines += _figure(key, value)
    if data.get("protocol") and keys is None:
        lines += [f"*Protocol:* {_cell(data['protocol'])}", ""]
    return lines


def _section(path: Path, level: str = "##") -> list[str]:
    lines = [f"{level} {path.stem}", "", f"File `{path.relative_to(ROOT)}`.", ""]
    if path.parent == HISTORY and path.stem in BASELINES:
        lines += [f"A baseline of {BASELINES[path.stem]}", ""]
    return lines + _body(path, _read(path))


def _dated(path: Path) -> tuple[str, str]:
    return _committed(path), path.stem


def benchmarks_page() -> str:
    lines = [
        "# Every figure",
        "",
        "Generated at build time from every file in `metrics/` (`docs/hooks/generated_pages.py`): what is "
        "here is what the file says. Each section names the command that writes its file, the engine "
        "fingerprint (`tune-agent-bench fingerprint`) of the code that ran where the file records it, and "
        "the date of the commit that last wrote it. The benchmark pages say what each measurement "
        "means.",
        "",
    ]
    for path in sorted(METRICS.glob("*.json")):
        lines += _section(path)
    past = sorted(HISTORY.glob("*.json"), key=_dated)
    if past:
        lines += [
            "## Past baselines",
            "",
            "Files kept in `metrics/history/` as baselines that later measurements were compared with, "
            "by date. The product behaves as the current files above show, not as these.",
            "",
        ]
        for path in past:
            lines += _section(path, "###")
    return "\n".join(lines) + "\n"


def _box(match: re.Match[str], src_uri: str) -> str:
    stem, keys = match.group(1), match.group(2)
    path = next((p for p in (METRICS / f"{stem}.json", HISTORY / f"{stem}.json") if p.is_file()), None)
    if path is None:
        raise PluginError(f"{src_uri}: '{match.group(0)}' names no file metrics/{stem}.json")
    wanted = [k.strip() for k in keys.split(",")] if keys else None
    data = _read(path)
    missing = [k for k in wanted or [] if not isinstance(data, dict) or k not in data]
    if missing:
        raise PluginError(f"{src_uri}: metrics/{stem}.json has no {', '.join(missing)}")
    link = posixpath.relpath("benchmarks/figures.md", posixpath.dirname(src_uri) or ".")
    body = _body(path, data, wanted) + [f"[Every figure of `{path.name}`]({link}#{stem.lower()})"]
    title = f"{path.relative_to(ROOT)}" + (f": {', '.join(wanted)}" if wanted else "")
    indented = [("    " + line) if line.strip() else "" for line in body]
    return "\n".join([f'!!! abstract "{title}"', "", *indented]) + "\n"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "benchmarks/figures.md", content=benchmarks_page()))
    changelog = (ROOT / "CHANGELOG.md").read_text()
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return MARKER.sub(lambda match: _box(match, page.file.src_uri), markdown)
