"""No silent phase: a study's log speaks while a trial starts, trains and ends; `tune-agent ui`
says when it answers and stops on Ctrl-C; the silence benchmark measures gaps between lines and
grows the starter history into datasets of their own."""

from __future__ import annotations

import io
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from agent.execution.progress import ProgressReporter
from agent.tuning import heartbeat


def _wait_for(lines: list[str] | io.StringIO, text: str) -> None:
    deadline = time.perf_counter() + 60  # a guard against hanging, not a speed bound
    while text not in (lines.getvalue() if isinstance(lines, io.StringIO) else "\n".join(lines)):
        assert time.perf_counter() < deadline, lines
        time.sleep(0.05)


def test_a_log_hears_which_trial_runs_and_its_epoch(monkeypatch) -> None:
    """In a log (no live display), the reporter names what runs: a trial starting, its epochs, its
    end; a line follows after EVERY seconds of silence, and none once the study is closed."""
    monkeypatch.setattr(heartbeat, "EVERY", 0.2)
    monkeypatch.setattr(heartbeat.Heartbeat.__init__, "__defaults__", (0.2,))
    out = io.StringIO()
    reporter = ProgressReporter(stream=out, rich=False)
    reporter.metric = "val_loss"
    reporter.phase("trial 1 starting: its data, model and Trainer", True, "t0")
    _wait_for(out, "  still trial 1 starting")
    reporter.epoch_done(0, 1, 3, {"val_loss": 0.5})
    _wait_for(out, "  still trial 1 training (epoch 1/3 done val_loss=0.5)")
    reporter.epoch_done(0, 3, 3, {"val_loss": 0.25})
    _wait_for(out, "  still trial 1 finishing: its model kept, its run closed (epoch 3/3 done val_loss=0.25)")
    reporter.line("  trial 1 done")
    reporter.close()
    said = out.getvalue()
    time.sleep(0.5)
    assert out.getvalue() == said  # closed: quiet


def test_a_patient_phase_keeps_its_clock_across_epochs() -> None:
    """The epochs of one trial are one phase: its seconds run on (the key), so after a minute of
    training the heartbeat speaks every 30 s, not every 1.5."""
    lines: list[str] = []
    beat = heartbeat.Heartbeat(lines.append)
    beat.phase("trial 1 training (epoch 1/9 done)", True, "t0")
    since = beat.since
    beat.phase("trial 1 training (epoch 2/9 done)", True, "t0")
    assert beat.since == since and beat.patient
    beat.phase("trial 2 starting", False, "t1")
    assert beat.since > since and not beat.patient


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ui_says_when_it_answers_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`tune-agent ui` runs MLflow's UI as its child: a line at once, its output relayed, a line
    when it answers; Ctrl-C to the command alone stops both, exit 0."""
    port = _port()
    exe = str(Path(sys.executable).with_name("tune-agent"))
    env = {"TUNE_AGENT_DAEMON": "0", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    proc = subprocess.Popen(
        [exe, "ui", "--port", str(port), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line.rstrip())
            if "answers on" in line:
                break
        assert lines[0] == f"MLflow UI on http://127.0.0.1:{port}: starting it", lines
        assert lines[-1] == f"MLflow UI answers on http://127.0.0.1:{port} (Ctrl-C stops it)", lines
        assert not any("DeprecationWarning" in line for line in lines), lines
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    try:  # MLflow's UI went with it: nothing answers on its port
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        raise AssertionError(f"something still listens on port {port}")
    except ConnectionRefusedError:
        pass


def test_line_gaps_finds_the_longest_silence_and_the_line_before_it(tmp_path: Path) -> None:
    from agent.bench.silence import line_gaps

    script = "import time\nprint('a', flush=True)\ntime.sleep(0.6)\nprint('b', flush=True)\n"
    run = line_gaps([sys.executable, "-c", script], tmp_path, {"PATH": "/usr/bin:/bin"})
    assert run["exit"] == 0 and run["lines"] == 2
    assert run["after"] == "a" and run["longest_gap_s"] >= 0.6
    waits = (  # the handler only sets a flag: a print inside it could land inside the print of 'ready'
        "import time, signal\nstop = []\nsignal.signal(signal.SIGINT, lambda *a: stop.append(1))\n"
        "print('ready', flush=True)\nwhile not stop:\n    time.sleep(0.05)\nprint('stopping', flush=True)\n"
    )
    run = line_gaps([sys.executable, "-c", waits], tmp_path, {"PATH": "/usr/bin:/bin"}, ready=b"ready")
    assert run["exit"] == 0 and run["lines"] == 2  # Ctrl-C sent once it was ready; it said so and ended


def test_copied_starter_makes_each_copy_a_dataset_of_its_own(tmp_path: Path) -> None:
    from agent.bench.silence import copied_starter
    from agent.knowledge.starter import read_starter
    from agent.meta.handcrafted import is_current

    made = copied_starter(tmp_path / "h.npz", copies=2)
    _, entries = read_starter(tmp_path / "h.npz")
    assert made["studies"] == len(entries) and len(entries) % 2 == 0
    half = len(entries) // 2
    for a, b in ((entries[0], entries[half]), (entries[1], entries[half + 1])):
        assert b["name"] == a["name"] + "~1"
        assert b["settings"]["dataset_name"] != a["settings"]["dataset_name"]
        assert b["settings"]["fingerprint"] != a["settings"]["fingerprint"]
        assert b["values"] != a["values"] and len(b["values"]) == len(a["values"])
    assert len({e["settings"]["fingerprint"] for e in entries}) == len(entries)
    assert all(is_current(e["metafeatures"]) for e in entries)  # a copy's meta-features read as current
