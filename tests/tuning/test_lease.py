"""One runner per study: the lease refuses a second live runner (or lets it join within the budget),
and a dead runner's lease is taken over; two `resume`s of one study at once keep its budget."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.errors import StudyBusyError
from agent.tuning.lease import TAG, Holder, StudyLease

JOB = "agent.jobs.examples:logistic"


def _created(cli, store, name: str, trials: int = 4) -> None:
    res = cli("create", "--dataset", "iris", "--job", JOB, "--trials", str(trials), "--epochs", "2",
              "--warm-start", "none", "--study-name", name, *store.args)  # fmt: skip
    assert res.code == 0, res.err


def _study(store, name: str):
    from agent.tuning.service import open_study

    study, _ = open_study(name, kb=store.kb(), with_sampler=False)
    return study


def _hold(study, holder: Holder) -> None:
    study.kb.set_study_tags(study.record, {TAG: holder.text()})


def test_a_live_holder_is_refused_or_joined_and_a_dead_one_taken_over(store, cli) -> None:
    _created(cli, store, "leased")
    study = _study(store, "leased")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _hold(study, Holder(socket.gethostname(), sleeper.pid, "theirs", time.time(), generation=1))
        with pytest.raises(StudyBusyError, match=rf"being run by pid {sleeper.pid} on {socket.gethostname()}"):
            StudyLease(study).acquire()
        said: list[str] = []
        joined = StudyLease(study, said.append)
        assert joined.acquire(join=True) is True and "joining it" in said[0]
        assert json.loads(study.kb.study_tags(study.record)[TAG])["token"] == "theirs"  # a joiner takes nothing
    finally:
        sleeper.kill()
        sleeper.wait()
    # the holder's process is gone from this host: its lease is dead at once, the next generation taken
    lease = StudyLease(study)
    assert lease.acquire() is False and lease.holder.generation == 2
    assert json.loads(study.kb.study_tags(study.record)[TAG])["token"] == lease.holder.token
    lease.release()  # given back: dead, and the next taker takes the generation after it
    assert Holder.read(study.kb.study_tags(study.record)[TAG]).released
    with StudyLease(study) as after:
        assert after.acquire() is False and after.holder.generation == 3
    # another host: alive while refreshed, dead after the TTL
    _hold(study, Holder("elsewhere", 1, "remote", time.time(), generation=3))
    with pytest.raises(StudyBusyError, match="elsewhere"):
        StudyLease(study).acquire()
    _hold(study, Holder("elsewhere", 1, "remote", time.time() - 3600, generation=3))
    with StudyLease(study) as taken:  # the remote holder is stale: the generation after its
        assert taken.acquire() is False and taken.holder.generation == 4
    # two takers of one generation: the store lets one claim it, the other is refused
    study.kb.claim_study_value(study.record, "lease.6", json.dumps({"host": "h", "pid": 1, "token": "t"}))
    _hold(study, Holder("elsewhere", 1, "remote", time.time() - 3600, generation=5))
    with pytest.raises(StudyBusyError, match="pid 1 on h"):
        StudyLease(study).acquire()


def _resume(store, name: str, *extra: str) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("tune-agent")
    return subprocess.Popen(
        [str(exe), "resume", name, *extra, "--tracking-uri", store.uri, "--artifact-root", store.artifacts],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("join", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_two_resumes_at_once_keep_the_budget(join, store, cli) -> None:
    _created(cli, store, "twice", trials=4)
    extra = ("--join",) if join else ()
    runs = [_resume(store, "twice", *extra), _resume(store, "twice", *extra)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in runs]
    codes = sorted(code for code, _, _ in results)
    assert codes[0] == 0, results
    if not join and codes == [0, 2]:  # the second came while the first ran: refused in one line
        refused = next(err for code, _, err in results if code == 2)
        assert "is being run by pid" in refused and len(refused.strip().splitlines()) == 1, refused
    elif not join:  # the second took the lease only once the first had ended (a busy machine): nothing left
        assert codes == [0, 0] and any("already has all 4 trials" in out for _, out, _ in results), results
    kb = store.kb()
    trials = kb.trials(kb.find_study("twice"))
    finished = [t for t in trials if t.state == "ok"]
    assert len(finished) == 4, [(t.number, t.state) for t in trials]
    assert sorted(t.number for t in finished) == [0, 1, 2, 3]
    configs = [json.dumps(dict(t.config), sort_keys=True) for t in finished]
    assert len(set(configs)) == len(configs)
    assert not [t for t in trials if t.state == "running"]
