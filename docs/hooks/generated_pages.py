"""MkDocs hook: pages made from files at build time, so a figure on the site cannot drift from its file.

- ``benchmarks.md``: one section per ``metrics/*.json``, with its command, engine fingerprint, the
  date of the commit that last wrote it, its protocol and its figures (scalars, and tables of
  per-method or per-arm numbers).
- ``changelog.md``: ``CHANGELOG.md`` as it is.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
SKIP_KEYS = {"command", "engine", "baseline_engine", "protocol", "environment", "runs", "config"}


def _committed(path: Path) -> str:
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", str(path.relative_to(ROOT))], cwd=ROOT,
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or "not committed"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value)[:80].replace("|", "/") + "`"
    return str(value).replace("|", "/").replace("\n", " ")


def _table(rows: dict[str, dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows.values():
        columns += [c for c in row if c not in columns and not isinstance(row[c], (dict, list))]
    if not columns:
        return []
    lines = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for name, row in rows.items()]
    return lines + [""]


def _section(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"## {path.stem}", "", f"`{path.name}` could not be read: {exc}", ""]
    lines = [f"## {path.stem}", "", f"File `metrics/{path.name}`, last committed {_committed(path)}."]
    if not isinstance(data, dict):
        return lines + ["", f"A {type(data).__name__} of {len(data)} entries.", ""]
    if data.get("command"):
        lines += ["", f"Command: `{_cell(data['command'])}`"]
    for key in ("engine", "baseline_engine"):
        if data.get(key):
            lines += ["", f"{key.replace('_', ' ').capitalize()}: `{data[key]}`"]
    lines.append("")
    scalars = {k: v for k, v in data.items() if k not in SKIP_KEYS and not isinstance(v, (dict, list))}
    if scalars:
        lines += ["| figure | value |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in scalars.items()] + [""]
    for key, value in data.items():
        if key in SKIP_KEYS or not isinstance(value, dict) or not value:
            continue
        if all(isinstance(v, dict) for v in value.values()):
            lines += [f"**{key}**", ""] + _table(value)
        elif all(not isinstance(v, (dict, list)) for v in value.values()):
            lines += [f"**{key}**", "", "| | value |", "|---|---|"]
            lines += [f"| {k} | {_cell(v)} |" for k, v in value.items()] + [""]
    if data.get("protocol"):
        lines += [f"*Protocol:* {_cell(data['protocol'])}", ""]
    return lines


def benchmarks_page() -> str:
    lines = ["# Benchmarks", "",
             "Generated at build time from every file in `metrics/` (docs/hooks/generated_pages.py): what is "
             "here is what the file says. Each file names the command that wrote it and the engine fingerprint "
             "(`tune-agent bench fingerprint`) of the code that ran.", ""]
    for path in sorted((ROOT / "metrics").glob("*.json")):
        lines += _section(path)
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "benchmarks.md", content=benchmarks_page()))
    changelog = (ROOT / "CHANGELOG.md").read_text()
    files.append(File.generated(config, "changelog.md", content=changelog))
    return files
