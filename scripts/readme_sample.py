"""Regenerates README's sample output of "Tune a job" from a real run of the command it shows.

Runs the README's `tune-agent start ...` as written, piped, in a new empty folder (the embedded
store is made there), keeps the lines before the trials, the first two trials, the last trial's
result and the closing lines, and writes them into README's sample block, followed by a line that
says where and when the output was made. ``--check`` prints the new block instead of writing it.

    .venv/bin/python scripts/readme_sample.py
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
NOTE = re.compile(r"\n\(Real output of that command[^\n]*(?:\n[^\n]+)*?\)\n")


def sample_lines(out: str, shown_trials: int = 2) -> list[str]:
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if line.startswith("trial 1/"))
    last = max(i for i, line in enumerate(lines) if re.match(r"  trial \d+ done", line))
    cut = next((i for i, line in enumerate(lines) if line.startswith(f"trial {shown_trials + 1}/")), last)
    return lines[:cut] + (["..."] if cut < last else []) + lines[last:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print the block, leave README as it is")
    args = parser.parse_args()
    text = README.read_text()
    section = text.index("## Tune a job")
    command = re.search(r"```bash\n(.*?)```", text[section:], re.S)
    words = command.group(1).strip().split()
    exe = Path(sys.executable).with_name("tune-agent")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TUNE_AGENT_"))}
    env["TUNE_AGENT_DAEMON"] = "0"  # a first command, fresh, and no warm process left behind
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([str(exe), *words[1:]], cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"readme_sample: the README command failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    block = "\n".join(sample_lines(done.stdout))
    start = section + command.end()
    sample = re.search(r"```\n(.*?)```\n", text[start:], re.S)
    when = datetime.date.today().isoformat()
    note = (f"\n(Real output of that command, piped, in a new empty folder on {when}, made by "
            f"`scripts/readme_sample.py`; trials 3 to the last but one are left out.)\n")
    if args.check:
        print(block + note)
        return
    a, b = start + sample.start(1), start + sample.end(1)
    rest = text[start + sample.end():]
    rest = NOTE.sub(note, rest, count=1) if NOTE.match(rest) else note + rest
    README.write_text(text[:a] + block + "\n" + text[b:start + sample.end()] + rest)
    print(block + note)


if __name__ == "__main__":
    main()
