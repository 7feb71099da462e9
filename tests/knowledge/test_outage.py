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

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
EPOCHS = 60  # a trial lasts a few seconds, so the server dies during one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server(tmp: Path, port: int) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp / 'server.db'}",
            "--artifacts-destination",
            str(tmp / "server-art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("mlflow server did not come up")


class _Server:
    """One `mlflow server` on a sqlite store, shared by this file's tests (each start costs 7 to
    13 s of a busy machine); a test may kill it, and the next one that needs it starts it again on
    the same store and port."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.port = tmp, _free_port()
        self.proc = _server(tmp, self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def store(self) -> str:
        return f"sqlite:///{self.tmp / 'server.db'}"

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def up(self) -> _Server:
        if self.proc.poll() is not None:
            self.proc = _server(self.tmp, self.port)  # same store, same port
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    server = _Server(tmp_path_factory.mktemp("server"))
    yield server
    server.stop()


@pytest.fixture
def server(shared: _Server) -> _Server:
    return shared.up()


def _runs_of(client, name: str) -> list[tuple[str, str]]:
    """(run name, status) of every run in the server's store whose name is study ``name``'s."""
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return sorted(
        (r.info.run_name, r.info.status)
        for r in runs
        if r.info.run_name == name or r.info.run_name.startswith(f"{name}/")
    )


def _agent(url: str, name: str, trials: int, epochs: int = EPOCHS, **env: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")} | env
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            "wine",
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            str(trials),
            "--epochs",
            str(epochs),
            "--warm-start",
            "none",
            "--study-name",
            name,
            "--tracking-uri",
            url,
        ],
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read(stream, lines: list[str]) -> threading.Thread:
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


def test_server_killed_and_restarted_mid_study_loses_nothing(server: _Server) -> None:
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.records import TRIAL_OK

    agent = _agent(server.url, "outage", trials=3)
    out: list[str] = []
    err: list[str] = []
    readers = [_read(agent.stdout, out), _read(agent.stderr, err)]
    try:
        _wait_for(out, "trial 2/3", 240)
        server.kill()  # mid-trial: its epochs and its end find no server
        # the first notice: "... unreachable: keeping this trial's epoch metrics ..." while the trial
        # trains, or "... unreachable, retrying (1/7) ..." at the next store call
        _wait_for(err, "unreachable", 30)  # said while it waits (how soon: tune-agent-bench server)
        # stay down until a store call has had to retry: a server that restarts quickly (about 7 s)
        # could otherwise be back before the trial ends, and the retry path would go untested
        _wait_for(err, "retrying (1/7)", 90)
        server.up()  # same store, same port
        assert agent.wait(timeout=240) == 0, "".join(err)[-2000:]
    finally:
        if agent.poll() is None:
            agent.kill()
    for r in readers:
        r.join(timeout=10)
    assert "Traceback" not in "".join(err)
    assert any("unreachable, retrying (1/7)" in line for line in err)
    # read back from the server's own store: the rows the server serves
    from mlflow import MlflowClient

    store = server.store
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
    assert _runs_of(client, "outage") == [("outage", "FINISHED")] + [
        (f"outage/trial-{n}", "FINISHED") for n in (1, 2, 3)
    ]


def test_epoch_metrics_are_kept_while_the_server_is_unreachable(capsys) -> None:
    """Training does not stop or fail for the store: a trial's logger keeps what it cannot write."""
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.records import StudyRecord, TrialRecord

    kb = MlflowKnowledgeBase.__new__(MlflowKnowledgeBase)  # no server to check at construction: none runs
    kb._tracking_uri, kb.artifact_root, kb._root_given, kb._client_instance = (
        f"http://127.0.0.1:{_free_port()}",
        None,
        False,
        None,
    )
    kb.__dict__["_experiments"] = {"s": "1"}
    study = StudyRecord("s", "S", "job", "wine", "fp", "sig", "running", {})
    logger = kb.trial_logger(study, TrialRecord("r", 0, "running", {"lr": 0.1}, None, "init:sobol"))
    for epoch in range(3):
        logger.log_metrics({"val_loss": 1.0 / (epoch + 1)}, epoch)
    kept = [(m.key, m.value, m.step) for _, (batch,) in logger._pending for m in batch]
    assert kept == [("val_loss", 1.0, 0), ("val_loss", 0.5, 1), ("val_loss", 1 / 3, 2)]
    assert capsys.readouterr().err.count("unreachable: keeping this trial's epoch metrics") == 1


class _LosingProxy:
    """A TCP proxy in front of the server that loses answers: the request reaches the server, its
    answer comes back and the client is cut off without it (the server did the work, the client
    never heard: a server killed, a network cut between the two). It loses the first answer to a
    request holding each of ``targets`` and, with ``every`` N, every Nth other API answer."""

    def __init__(self, upstream: int, targets: list[bytes], every: int = 0) -> None:
        self.upstream, self.left, self.every = upstream, list(targets), every
        self.lost: list[bytes] = []  # the request line of each answer lost
        self._seen = 0
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

    def _lose(self, data: bytes) -> bool:
        if b"/api/2.0/mlflow" not in data:  # a body's later part, or the health check
            return False
        with self._lock:
            hit = next((t for t in self.left if t in data), None)
            if hit is not None:
                self.left.remove(hit)
                return True
            self._seen += 1
            return bool(self.every) and self._seen % self.every == 0

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream))
        cut: list[bytes] = []

        def to_server() -> None:
            try:
                while data := client.recv(65536):
                    if self._lose(data):
                        cut.append(data.split(b"\r\n", 1)[0])
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=to_server, daemon=True).start()
        try:
            while data := upstream.recv(65536):
                if cut:  # the answer has come: the work is done; the client never gets it
                    self.lost.append(cut[0])
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


def test_a_study_whose_answers_are_lost_logs_everything_once(server: _Server) -> None:
    """A whole study through a connection that loses answers: the study's and the first trial's
    creation, its dataset input's, and every 6th other API call (epoch metrics, params, tags, artifacts, searches);
    then a model registration whose version's creation loses its answer. Every retry finds what its lost answer made:
    each trial once and OK with all its epochs, no second run left RUNNING, one model version."""
    import numpy as np
    import torch

    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.records import TRIAL_OK
    from mlflow import MlflowClient

    port = server.port
    proxy = _LosingProxy(port, [b"/runs/create", b"/runs/create", b"/runs/log-inputs"], every=6)
    try:
        agent = _agent(f"http://127.0.0.1:{proxy.port}", "lossy", trials=3, epochs=5)
        out, err = agent.communicate(timeout=240)
        assert agent.returncode == 0, err[-2000:]
        assert "Traceback" not in err
        creations = [line for line in proxy.lost if b"/runs/create" in line]
        assert len(creations) >= 2 and any(b"log-inputs" in line for line in proxy.lost), proxy.lost

        kb = MlflowKnowledgeBase(f"http://127.0.0.1:{proxy.port}")
        study = kb.find_study("lossy")
        assert study is not None and study.status == "finished"
        trials = kb.trials(study)
        assert sorted(t.number for t in trials) == [0, 1, 2]
        assert all(t.state == TRIAL_OK for t in trials), [(t.number, t.state, t.reason) for t in trials]
        # Registering is one store call of a dozen requests, retried whole: with every 6th answer
        # lost, every try would lose one. Here only the version's creation loses its answer.
        proxy.every = 0
        proxy.left.append(b"/model-versions/create")
        example = np.zeros((2, 3), dtype=np.float32)
        version = kb.register_model(
            study,
            trials[0],
            torch.nn.Linear(3, 2),
            example,
            np.zeros((2, 2), dtype=np.float32),
            "lossy-model",
            {"tune_agent.study": "lossy"},
        )
        assert any(b"/model-versions/create" in line for line in proxy.lost)
        # a meta-model run's Lightning logger: its writes are retried too (MLflow's own retries are off)
        run_id, logger = kb.start_model_run("lossy-meta", {"steps": 2}, "a meta-model run")
        proxy.every = 3  # a write is one request (two with the logger's first look at its run)
        for step in range(4):
            logger.log_metrics({"loss": 1.0 / (step + 1)}, step)
        logger.finalize("success")
        proxy.every = 0

        client = MlflowClient(f"http://127.0.0.1:{port}")  # the server itself, past the proxy
        assert _runs_of(client, "lossy") == [("lossy", "FINISHED")] + [
            (f"lossy/trial-{n}", "FINISHED") for n in (1, 2, 3)
        ]
        for t in trials:
            assert len(client.get_metric_history(t.trial_id, "val_loss")) == 5, t.number  # each epoch once
        assert len(client.get_run(study.study_id).inputs.dataset_inputs) == 1  # its dataset logged once
        assert [m.step for m in client.get_metric_history(run_id, "loss")] == [0, 1, 2, 3]
        assert client.get_run(run_id).info.status == "FINISHED"
        assert version == "1" and [v.version for v in client.search_model_versions("name = 'lossy-model'")] == ["1"]
    finally:
        proxy.close()


def test_a_cut_answer_is_an_unreachable_server_and_a_5xx_a_server_error() -> None:
    """What MLflow raises when the answer is cut mid-body (urllib3's IncompleteRead inside
    requests' ChunkedEncodingError) is retried as an outage; a refusal is not."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR, PERMISSION_DENIED, TEMPORARILY_UNAVAILABLE

    from agent.knowledge.mlflow.retry import server_error, unreachable

    url = "http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch"
    cut = MlflowException(
        f"API request to {url} failed with exception ('Connection broken: IncompleteRead(0 bytes "
        "read, 52 more expected)', IncompleteRead(0 bytes read, 52 more expected))"
    )
    reset = MlflowException(
        f"API request to {url} failed with exception ('Connection aborted.', "
        "ConnectionResetError(104, 'Connection reset by peer'))"
    )
    assert unreachable(cut) and unreachable(reset)
    busy = MlflowException(
        "API request to endpoint /api/2.0/mlflow/runs/create failed with error code 503 != 200",
        error_code=TEMPORARILY_UNAVAILABLE,
    )
    internal = MlflowException("database is locked", error_code=INTERNAL_ERROR)
    refused = MlflowException("API request failed with error code 403 != 200", error_code=PERMISSION_DENIED)
    assert server_error(busy) and server_error(internal)
    assert not unreachable(refused) and not server_error(refused)


def test_server_that_stays_down_ends_in_one_line_naming_resume(server: _Server) -> None:
    """Last in this file: it leaves the shared server down."""
    url = server.url
    agent = _agent(url, "gone", trials=4, epochs=10, TUNE_AGENT_STORE_RETRIES="1")
    out: list[str] = []
    err: list[str] = []
    readers = [_read(agent.stdout, out), _read(agent.stderr, err)]
    try:
        _wait_for(out, "trial 2/4", 240)
        server.kill()
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
    # one outage is waited out once: later calls in it do not each retry again (21 lines once)
    assert sum("retrying (" in line for line in err) <= 1, "".join(err)[-2000:]
