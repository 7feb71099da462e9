"""The tracking server goes down mid-study: the agent says so within seconds, keeps what it could
not write, and ends with every trial and epoch logged once the server is back; when it stays down,
one line names the server and the resume command (exit 2)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 60  # a trial lasts a few seconds, so the server dies during one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(exe), "server", "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}",
                             "--artifacts-destination", str(tmp / "server-art"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("mlflow server did not come up")


def _agent(url: str, name: str, trials: int, epochs: int = EPOCHS, **env: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | env
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "start", "--dataset", "wine", "--job",
                             "agent.jobs.examples:logistic", "--trials", str(trials), "--epochs", str(epochs),
                             "--warm-start", "none", "--study-name", name, "--tracking-uri", url],
                            cwd=REPO, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read(stream, lines: list[str]) -> threading.Thread:  # noqa: ANN001
    t = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    t.start()
    return t


def _wait_for(lines: list[str], text: str, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if any(text in line for line in lines):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not seen in {timeout} s: {lines[-5:]}")


def test_server_killed_and_restarted_mid_study_loses_nothing(tmp_path: Path) -> None:
    from agent.knowledge.base import TRIAL_OK
    from agent.knowledge.mlflow_store import MlflowKnowledgeBase

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _server(tmp_path, port)
    agent = _agent(url, "outage", trials=3)
    out: list[str] = []
    err: list[str] = []
    readers = [_read(agent.stdout, out), _read(agent.stderr, err)]
    try:
        _wait_for(out, "trial 2/3", 240)
        os.killpg(server.pid, signal.SIGKILL)  # mid-trial: its epochs and its end find no server
        server.wait()
        # the first notice: "... unreachable: keeping this trial's epoch metrics ..." while the trial
        # trains, or "... unreachable, retrying (1/7) ..." at the next store call
        seen = _wait_for(err, "unreachable", 30)
        assert seen <= 10, f"first notice after {seen:.1f} s"
        # stay down until a store call has had to retry: a server that restarts quickly (about 7 s)
        # could otherwise be back before the trial ends, and the retry path would go untested
        _wait_for(err, "retrying (1/7)", 90)
        server = _server(tmp_path, port)  # same store, same port
        assert agent.wait(timeout=240) == 0, "".join(err)[-2000:]
    finally:
        if agent.poll() is None:
            agent.kill()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    for r in readers:
        r.join(timeout=10)
    assert "Traceback" not in "".join(err)
    assert any("unreachable, retrying (1/7)" in line for line in err)
    # read back from the server's own store: the rows the server serves, without a third start
    from mlflow import MlflowClient

    store = f"sqlite:///{tmp_path / 'server.db'}"
    kb = MlflowKnowledgeBase(store)
    study = kb.find_study("outage")
    assert study is not None and study.status == "finished"
    trials = kb.trials(study)
    assert sorted(t.number for t in trials) == [0, 1, 2]  # each once, none lost or duplicated
    assert all(t.state == TRIAL_OK for t in trials), [(t.number, t.state, t.reason) for t in trials]
    client = MlflowClient(store)
    for t in trials:  # every epoch of every trial reached the store, the outage's included
        steps = {m.step for m in client.get_metric_history(t.trial_id, "val_loss")}
        assert len(steps) == EPOCHS, (t.number, len(steps))
    # and nothing else: no second run of a creation whose answer the outage lost, none left RUNNING
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 4, [(r.info.run_name, r.info.status) for r in runs]


def test_server_that_stays_down_ends_in_one_line_naming_resume(tmp_path: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _server(tmp_path, port)
    agent = _agent(url, "gone", trials=4, epochs=10, TUNE_AGENT_STORE_RETRIES="1")
    out: list[str] = []
    err: list[str] = []
    readers = [_read(agent.stdout, out), _read(agent.stderr, err)]
    try:
        _wait_for(out, "trial 2/4", 240)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
        assert agent.wait(timeout=120) == 2
    finally:
        if agent.poll() is None:
            agent.kill()
    for r in readers:
        r.join(timeout=10)
    errors = [line for line in err if line.startswith("tune-agent: error")]
    assert len(errors) == 1, "".join(err)[-2000:]
    assert url in errors[0] and "tune-agent resume gone" in errors[0]
    assert "Traceback" not in "".join(err)


def test_epoch_metrics_are_kept_while_the_server_is_unreachable(capsys) -> None:  # noqa: ANN001
    """Training does not stop or fail for the store: a trial's logger keeps what it cannot write."""
    from agent.knowledge.base import StudyRecord, TrialRecord
    from agent.knowledge.mlflow_store import MlflowKnowledgeBase

    kb = MlflowKnowledgeBase.__new__(MlflowKnowledgeBase)  # no server to check at construction: none runs
    kb._tracking_uri, kb.artifact_root, kb._root_given, kb._client_instance = f"http://127.0.0.1:{_free_port()}", None, False, None
    kb.__dict__["_experiments"] = {"s": "1"}
    study = StudyRecord("s", "S", "job", "wine", "fp", "sig", "running", {})
    logger = kb.trial_logger(study, TrialRecord("r", 0, "running", {"lr": 0.1}, None, "init:sobol"))
    for epoch in range(3):
        logger.log_metrics({"val_loss": 1.0 / (epoch + 1)}, epoch)
    kept = [(m.key, m.value, m.step) for _, (batch,) in logger._pending for m in batch]
    assert kept == [("val_loss", 1.0, 0), ("val_loss", 0.5, 1), ("val_loss", 1 / 3, 2)]
    assert capsys.readouterr().err.count("unreachable: keeping this trial's epoch metrics") == 1


class _LosingProxy:
    """A TCP proxy in front of the server that, for the first request whose bytes hold each of
    ``targets``, lets the request reach the server, waits for its answer and then cuts the client
    off without it: the server did the work, the client never heard (a server killed, a network
    cut between the two)."""

    def __init__(self, upstream: int, targets: list[bytes]) -> None:
        self.upstream, self.left = upstream, list(targets)
        self.lost = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        cut = threading.Event()

        def to_server() -> None:
            try:
                while data := client.recv(65536):
                    with self._lock:
                        hit = next((t for t in self.left if t in data), None)
                        if hit is not None:
                            self.left.remove(hit)
                            cut.set()
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=to_server, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                if cut.is_set():  # the answer has come: the run exists; the client never gets it
                    self.lost += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        for s in (client, upstream):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._sock.close()


def test_a_run_whose_answer_was_lost_is_created_once(tmp_path: Path) -> None:
    """The server creates a study's run, a trial's, and a registered model's version, and each
    time the answer is lost: the agent's retry finds what it made instead of making a second (a
    duplicate trial that would stay RUNNING in the UI, a second model version)."""
    import numpy as np
    import torch
    from mlflow import MlflowClient

    from agent.knowledge.mlflow_store import MlflowKnowledgeBase

    port = _free_port()
    server = _server(tmp_path, port)
    proxy = _LosingProxy(port, [b"/runs/create", b"/runs/create", b"/model-versions/create"])
    try:
        kb = MlflowKnowledgeBase(f"http://127.0.0.1:{proxy.port}")
        settings = {"job_name": "lost", "dataset_name": "wine", "fingerprint": "f" * 16, "space_signature": "s",
                    "mode": "min", "metric": "val_loss", "seed": 0}
        study = kb.create_study("lost-answer", settings, [], {"kind": "tabular"}, None, "")
        trial = kb.start_trial(study, 0, {"lr": 0.01}, "init:sobol")
        kb.finish_trial(study, trial, 0.5, "ok")
        example = np.zeros((2, 3), dtype=np.float32)
        version = kb.register_model(study, trial, torch.nn.Linear(3, 2), example, np.zeros((2, 2), dtype=np.float32),
                                    "lost-model", {"tune_agent.study": "lost-answer"})
        assert proxy.lost == 3  # every creation lost its answer
        client = MlflowClient(f"http://127.0.0.1:{port}")
        (exp,) = [e for e in client.search_experiments() if e.name == "tune-agent/lost"]
        runs = client.search_runs([exp.experiment_id])
        assert sorted(r.info.run_name for r in runs) == ["lost-answer", "lost-answer/trial-1"]
        assert {r.info.run_id for r in runs} == {study.study_id, trial.trial_id}
        assert [t.state for t in kb.trials(study)] == ["ok"]
        assert version == "1" and [v.version for v in client.search_model_versions("name = 'lost-model'")] == ["1"]
    finally:
        proxy.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
