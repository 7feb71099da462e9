"""A prepared study launched: its executor made, the study run to its end, and every way it can
stop carrying what the user does next (``tune-agent resume NAME``) as the error's hint.

``start`` and ``resume`` (:mod:`agent.cli.study`) call :func:`run_prepared` once the study is in
the store; :func:`reopen` is the resume half (a stored study, its data, trials a dead process left
running closed as killed). Ray's start can begin early, on a background thread, to overlap the
imports and the preparation (:func:`start_workers_early`); :func:`abandoning` stops it again when
what follows fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.errors import StoreError, StoreUnwritableError, StudyInterrupted, TuneAgentError, WorkersLostError
from agent.execution.resources import ExecutionSettings


def start_workers_early(execution: ExecutionSettings, job_spec: str | None, fork: bool = False) -> Any:
    """Ray's start begun now (:class:`agent.execution.ray_start.RayStart`) for a study on Ray; for one
    trial at a time here, the trial process started now
    (:class:`agent.execution.trial_process.TrialProcess`; ``fork``: it may be a fork of this
    process, a command the warm process forked); None for a benchmark job or with
    ``TUNE_AGENT_TRIAL_PROCESS=0``."""
    from agent.execution.ray_start import start_workers_early as begin

    started = begin(execution.workers, execution.ray_address, job_spec, execution.resources, execution.working_dir)
    if started is not None:
        return started
    from agent.execution import trial_process
    from agent.jobs.registry import YAHPO_PREFIX
    from agent.project.spec import CLI_PREFIX

    if (job_spec or "").strip().startswith(CLI_PREFIX):  # its trials are forks of a script server: begun now
        from agent.execution.cli_trial import script_server

        script_server()
        return None
    # a benchmark job's trials are lookups: they train nowhere
    if trial_process.wanted() and not (job_spec or "").strip().startswith(YAHPO_PREFIX):
        return trial_process.TrialProcess(fork=fork)  # imports torch and Lightning while this process prepares
    return None


@contextlib.contextmanager
def abandoning(early: Any) -> Iterator[None]:
    """Stops a Ray instance begun early when what follows fails (bad input, a missing study)."""
    try:
        yield
    except BaseException:
        if early is not None:
            early.abandon()
        raise


def run_prepared(
    study: Any,
    job: Any,
    dataset: Any,
    split: Any,
    reporter: Any,
    execution: ExecutionSettings,
    early: Any = None,
    warn: Callable[[str], None] = print,
    lease: Any = None,
) -> None:
    """Runs ``study`` to its end on the executor ``execution`` asks for, holding ``lease`` (a new
    study's is taken here) and giving it back at the end; ``warn`` gets the line a ``--timeout``
    leaves. Errors come out with their hint set; Ctrl-C as :class:`StudyInterrupted`."""
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor

    resume = f"continue with: tune-agent resume {study.name}"
    try:
        with _holding(study, lease):
            try:
                with abandoning(early):
                    executor = make_executor(study, job, dataset, split, execution, early)
            except TuneAgentError as exc:  # the study is in the store; the workers are what failed
                raise exc.hinted(f"study {study.name} is kept: once the workers can start, {resume}") from None
            _announce(study, executor, execution, reporter)
            timing = run_study(study, job, dataset, split, reporter, executor=executor, timeout=execution.timeout)
        if timing.timed_out:
            done = study.settings.trials - study.remaining()
            warn(f"--timeout {execution.timeout:g} s reached after {done} of {study.settings.trials} trials; {resume}")
    except KeyboardInterrupt:
        raise StudyInterrupted("interrupted", hint=resume) from None
    except WorkersLostError as exc:
        raise exc.hinted(f"{resume} ({exc.remedy})") from None
    except StoreUnwritableError as exc:  # a full disk, a read-only file system: nothing comes back by waiting
        raise exc.hinted(f"once it takes writes again, {resume}") from None
    except StoreError as exc:  # the store went away mid-study: what was told is kept there
        raise exc.hinted(f"once the store is back, {resume}") from None


@contextlib.contextmanager
def _holding(study: Any, lease: Any) -> Iterator[None]:
    """``lease`` held while the study runs (a new study's taken here) and given back however it ends."""
    from agent.tuning.lease import StudyLease

    if lease is None:
        lease = StudyLease(study)
        lease.acquire(fresh=True)
    with lease:
        yield


def _announce(study: Any, executor: Any, execution: ExecutionSettings, reporter: Any) -> None:
    """Where the trials run, said once before the first."""
    resources = execution.resources
    executor.say = reporter.line  # an executor's later word: a Ray node that fits joined, a job that trains here
    if execution.parallel:
        from agent.samplers.base import pending_note

        ahead = f", {executor.ask_ahead} more asked ahead" if executor.ask_ahead else ""
        each = f", {executor.per_trial} each" if executor.per_trial else ""
        reporter.line(
            f"running {executor.capacity} trial(s) at once on {executor.where}{each}{ahead}; "
            f"{pending_note(study.sampler)}"
        )
    elif resources is not None and resources.gpus > 0:
        reporter.line("trials train on the GPU (Lightning accelerator 'gpu', one device)")
    for note in executor.notes:
        reporter.line(note)


@dataclass
class Reopened:
    """A stored study ready to go on: its job, data and split, the trials that were closed, and
    this process's lease on it (:mod:`agent.tuning.lease`)."""

    study: Any
    job: Any
    data: Any
    split: Any
    closed: list[Any]
    lease: Any = None


def reopen(
    name: str,
    kb: Any,
    job: str | None = None,
    dataset: str | None = None,
    join: bool = False,
    say: Callable[[str], None] = print,
) -> Reopened:
    """The stored study ``name`` (refused when ``job``/``dataset`` differ from what it used), its
    lease taken (refused in one line while a live process holds it, or, with ``join``, run beside
    that process), its data, and the trials a dead process left running, closed as killed so their
    slots run again (a joiner closes none: they are the holder's)."""
    from agent.tuning.heartbeat import phase
    from agent.tuning.lease import StudyLease
    from agent.tuning.service import check_resume_matches, load_study_data, open_study

    phase(say, f"opening study {name}: its job and the sampler it was planned with")
    study, job_obj = open_study(name, kb=kb)
    check_resume_matches(study, job_obj, job, dataset)
    phase(say, "taking the study's lease")
    lease = StudyLease(study, say)
    joined = lease.acquire(join=join)
    try:
        phase(say, "loading the study's data")
        data, split = load_study_data(study, job_obj)
        phase(say, "closing the trials a dead process left running")
        closed = [] if joined else study.recover()
    except BaseException:
        lease.release()
        raise
    return Reopened(study, job_obj, data, split, closed, lease)


def close_if_complete(stored: Reopened, say: Callable[[str], None]) -> bool:
    """The resume of a study that already has all its trials: marked finished, and said; True then
    (nothing to run, the lease given back), False for a study with trials left."""
    for t in stored.closed:
        say(f"trial {t.number + 1} was left running by a dead process: closed as killed, slot re-run")
    if stored.study.remaining() > 0:
        return False
    if not stored.study.shared:
        stored.study.set_status("finished")
    say(f"study {stored.study.name} already has all {stored.study.settings.trials} trials")
    if stored.lease is not None:
        stored.lease.release()
    return True
