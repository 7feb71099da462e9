"""The study handle: ask/tell over a knowledge base (Optuna's ``Study`` role).

A :class:`Study` is ids + a knowledge base + a sampler; it holds no state of its own that MLflow
does not also hold, so any process can pick a study up by name. ``ask`` opens a trial in a free
slot (a RUNNING child run), ``tell`` closes it. A user's own training loop drives it directly::

    study = Study.load(kb, "my-study", space)
    trial = study.ask()
    study.tell(trial, value=train(trial.config))
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agent.config import StudySettings
from agent.errors import StudyError
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.records import (
    COUNTED_STATES,
    TRIAL_FAILED,
    TRIAL_KILLED,
    TRIAL_OK,
    TRIAL_PRUNED,
    TRIAL_RUNNING,
    StudyRecord,
    TrialRecord,
)
from agent.samplers.base import Sampler
from agent.samplers.bo import BoSampler
from agent.space import SearchSpace


def cold_sampler(space: SearchSpace, settings: StudySettings) -> BoSampler:
    """BO on the target's own GP: the sampler of a study with no plan."""
    from agent.surrogates.contract import SurrogateInputs
    from agent.surrogates.specs import GpSurrogate

    return BoSampler(space, settings, GpSurrogate(SurrogateInputs(space, seed=settings.seed)))


CLAIM_TRIES = 20  # slots a shared study tries before it gives up asking


class Study:
    """A handle on one stored study; see the module docstring."""

    def __init__(
        self, kb: KnowledgeBase, record: StudyRecord, space: SearchSpace, sampler: Sampler | None = None
    ) -> None:
        self.kb = kb
        self.record = record
        self.space = space
        self.settings = StudySettings.from_dict(record.settings)
        self._sampler = sampler

    @property
    def sampler(self) -> Sampler:
        """The study's sampler; a study given none gets the cold GP when it first asks (a command
        that only reads the study never builds one)."""
        if self._sampler is None:
            self._sampler = cold_sampler(self.space, self.settings)
        return self._sampler

    @sampler.setter
    def sampler(self, sampler: Sampler) -> None:
        self._sampler = sampler

    @property
    def name(self) -> str:
        return self.record.name

    @classmethod
    def load(cls, kb: KnowledgeBase, name: str, space: SearchSpace, sampler: Sampler | None = None) -> Study:
        record = kb.find_study(name)
        if record is None:
            raise StudyError(f"no study named {name!r} in this tracking store")
        if record.space_signature != space.signature():
            raise StudyError(
                f"study {name!r} was run with a different search space "
                f"(signature {record.space_signature}, job now gives {space.signature()})"
            )
        return cls(kb, record, space, sampler)

    # -- state ---------------------------------------------------------------------------------
    shared = False  # another process runs this study too (resume --join): asks read the store and claim slots

    def trials(self) -> list[TrialRecord]:
        return self.kb.trials(self.record)

    def counted(self, trials: list[TrialRecord] | None = None) -> list[TrialRecord]:
        return [t for t in (trials if trials is not None else self.trials()) if t.state in COUNTED_STATES]

    def remaining(self, trials: list[TrialRecord] | None = None) -> int:
        return self.settings.trials - len(self.counted(trials))

    def best(self, trials: list[TrialRecord] | None = None) -> TrialRecord | None:
        """The finished trial with the best primary metric (among those meeting the constraints)."""
        ok = [
            t for t in (trials if trials is not None else self.trials()) if t.state == TRIAL_OK and t.value is not None
        ]
        if self.settings.constraints:
            from agent.samplers.pareto import feasible

            ok = [t for t in ok if feasible(t, self.settings)]
        if not ok:
            return None
        return max(ok, key=lambda t: self.settings.sign * t.value)  # type: ignore[operator]

    # -- ask / tell ----------------------------------------------------------------------------
    def ask(self, trials: list[TrialRecord] | None = None) -> TrialRecord:
        """Opens the lowest free slot with the sampler's suggestion. ``trials``: the study's trials
        as the store holds them, when the caller keeps them (the study loop does); read if None.
        A :attr:`shared` study (another process runs it too: ``resume --join``) reads them fresh and
        claims the slot: where another runner opened the same slot first, this trial is closed as
        killed, unrun, and the next free slot is asked for."""
        if not self.shared:
            return self._ask(trials if trials is not None else self.trials())
        for _ in range(CLAIM_TRIES):
            record = self._ask(self.trials())
            first = next(
                t for t in self.trials() if t.number == record.number and t.state in COUNTED_STATES + (TRIAL_RUNNING,)
            )
            if first.trial_id == record.trial_id:
                return record
            self.tell(record, failed="slot taken by another runner of the study", state=TRIAL_KILLED)
        raise StudyError(f"study {self.name!r}: no slot could be claimed beside its other runners")

    def _ask(self, trials: list[TrialRecord]) -> TrialRecord:
        taken = {t.number for t in trials if t.state in COUNTED_STATES + (TRIAL_RUNNING,)}
        free = [n for n in range(self.settings.trials) if n not in taken]
        if not free:
            raise StudyError(f"study {self.name!r} has no trial slots left ({self.settings.trials} used or running)")
        number = free[0]
        again = self._checkpointed(number, trials)
        if again is not None:  # its killed run left a checkpoint: the re-run continues from it
            return self.kb.start_trial(self.record, number, again.config, again.origin)
        suggestion = self.sampler.suggest(number, trials)
        return self.kb.start_trial(self.record, number, suggestion.config, suggestion.origin)

    def _checkpointed(self, number: int, trials: list[TrialRecord]) -> TrialRecord | None:
        """Slot ``number``'s last killed trial when its checkpoint is in scratch (:mod:`agent.tuning.scratch`)."""
        killed = [t for t in trials if t.number == number and t.state == TRIAL_KILLED]
        if not killed:
            return None
        from agent.tuning.scratch import checkpointed_config, description, trial_scratch

        config = checkpointed_config(trial_scratch(self.kb, self.record.study_id, number))
        last = killed[-1]
        return last if config is not None and description(config, 0) == description(last.config, 0) else None

    def tell(
        self,
        trial: TrialRecord,
        value: float | None = None,
        failed: str | None = None,
        duration: float | None = None,
        metrics: Mapping[str, float] | None = None,
        state: str | None = None,
    ) -> TrialRecord:
        """Closes a trial: a finite ``value`` makes it ``ok``; ``failed`` (a reason) or a
        non-finite value makes it ``failed``; ``state='pruned'`` keeps the last ``value`` it
        reached (``failed`` then holds why it was stopped); ``state='killed'`` frees its slot."""
        if state is None:
            if failed is None and (value is None or not math.isfinite(value)):
                failed = f"objective is not finite ({value})"
            state = TRIAL_FAILED if failed else TRIAL_OK
        if state not in (TRIAL_OK, TRIAL_PRUNED) or (value is not None and not math.isfinite(value)):
            value = None
        return self.kb.finish_trial(self.record, trial, value, state, failed or "", duration, metrics)

    def trial_by_number(self, number: int) -> TrialRecord:
        for t in self.trials():
            if t.number == number and t.state == TRIAL_RUNNING:
                return t
        raise StudyError(f"study {self.name!r} has no running trial {number + 1}")

    # -- lifecycle -----------------------------------------------------------------------------
    def recover(self) -> list[TrialRecord]:
        """Closes trials a dead process left RUNNING as killed, freeing their slots."""
        return self.kb.close_running_trials(self.record, "process died before the trial ended")

    def set_status(self, status: str, trials: list[TrialRecord] | None = None) -> None:
        """The study's status and best trial on its run; for several metrics or constraints, also
        its front (``pareto_trials``, numbered from 1), the hypervolume and its reference point."""
        if self.settings.multi:
            import json

            from agent.samplers.pareto import front_summary

            trials = trials if trials is not None else self.trials()
            front = front_summary(trials, self.settings)
            self.kb.set_study_tags(
                self.record,
                {
                    "pareto_trials": ",".join(str(p["trial"]) for p in front["pareto"]),
                    "hypervolume": f"{front['hypervolume']:.6g}",
                    "hypervolume_reference": json.dumps(front["reference"]),
                },
            )
        best = self.best(trials)
        self.record = self.kb.update_study(
            self.record,
            status,
            best_value=best.value if best else None,
            best_config=dict(best.config) if best else None,
        )

    def settle(self) -> None:
        """After a trial was told outside the study loop: ``finished`` when the budget is spent,
        else ``running``, from one read of the trials."""
        trials = self.trials()
        self.set_status("finished" if self.remaining(trials) <= 0 else "running", trials)

    def failed_majority(self, trials: list[TrialRecord]) -> bool:
        failed = sum(t.state == TRIAL_FAILED for t in trials)
        return failed > self.settings.trials // 2

    # -- a user's own loop -----------------------------------------------------------------------
    @contextlib.contextmanager
    def trial(self, keeper: Any = None) -> Iterator[TrialHandle]:
        """``with study.trial() as t:`` asks a trial, and closes it when the block ends: ``ok``
        with ``t.value`` (set it, or let :class:`agent.lightning.TuneAgentCallback` set it),
        ``pruned`` when the callback stopped it, ``failed`` when the block raised (the reason is
        recorded, one line goes to stderr and the exception does not escape: the study goes on,
        as a study run by ``tune-agent start`` does) or set no value; Ctrl-C frees the slot
        (``killed``) and is re-raised. ``keeper`` (:class:`agent.execution.keep.ModelKeeper`)
        keeps the model the callback saved when the trial ranks among the study's best."""
        handle = TrialHandle(self, self.ask())
        handle.keeper = keeper
        if keeper is not None:
            keeper.before(handle.record, self.trials())
        start = time.perf_counter()
        try:
            yield handle
        except KeyboardInterrupt:  # its checkpoint stays in scratch: the slot's re-run continues from it
            self.tell(handle.record, failed="interrupted by the user", state=TRIAL_KILLED)
            raise
        except Exception as exc:
            self._close_own(handle, start, exc)
        else:
            self._close_own(handle, start, None)
        self.settle()

    def _close_own(self, handle: TrialHandle, start: float, exc: Exception | None) -> None:
        """Tells a trial of :meth:`trial` how its block ended, and removes its scratch."""
        from agent.tuning.scratch import clear

        try:
            told = self._tell_own(handle, start, exc)
            if handle.keeper is not None:  # keeps the saved model when it ranks, and clears scratch
                handle.keeper.ended(told, self.trials())
        finally:
            clear(handle.checkpoint_dir)

    def _tell_own(self, handle: TrialHandle, start: float, exc: Exception | None) -> TrialRecord:
        if exc is not None:
            first = (str(exc).strip().splitlines() or [""])[0]
            reason = f"{type(exc).__name__}: {first}"[:500]
            told = self.tell(handle.record, failed=reason, duration=time.perf_counter() - start)
            sys.stderr.write(f"trial {handle.number} failed: {reason} (recorded; the study goes on)\n")
            return told
        seconds = time.perf_counter() - start
        if handle.pruned:
            return self.tell(
                handle.record,
                value=handle.value,
                failed=handle.pruned,
                duration=seconds,
                metrics=handle.metrics,
                state=TRIAL_PRUNED,
            )
        if handle.value is None:
            return self.tell(
                handle.record,
                failed="the trial reported no value (set trial.value, or train with TuneAgentCallback)",
                duration=seconds,
            )
        return self.tell(handle.record, value=handle.value, duration=seconds, metrics=handle.metrics)


class TrialHandle:
    """A trial of a user's own loop (:meth:`Study.trial`): ``number`` counts from 1 as everywhere a
    person reads it; ``config`` is what to train; set ``value`` to the objective reached."""

    def __init__(self, study: Study, record: TrialRecord) -> None:
        self.study = study
        self.record = record
        self.value: float | None = None
        self.pruned = ""  # why it was stopped early, when it was
        self.metrics: dict[str, float] = {}
        self.keeper: Any = None  # keeps the model TuneAgentCallback saves (Study.trial's keeper)

    @property
    def number(self) -> int:
        return self.record.number + 1

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.record.config)

    @property
    def params(self) -> dict[str, Any]:
        """The configuration, by Optuna's name for it."""
        return self.config

    def logger(self) -> Any:
        """A Lightning logger writing to this trial's MLflow run (per-epoch metrics)."""
        return self.study.kb.trial_logger(self.study.record, self.record)

    @property
    def checkpoint_dir(self) -> Path:
        """This trial's scratch folder: :class:`agent.lightning.TuneAgentCallback` checkpoints
        into it after every validation epoch; it is removed when the trial ends (kept when killed)."""
        from agent.tuning.scratch import trial_scratch

        return trial_scratch(self.study.kb, self.study.record.study_id, self.record.number)

    @property
    def resume_from(self) -> str | None:
        """The checkpoint a killed run of this trial's slot left with this configuration (pass it
        as ``trainer.fit(..., ckpt_path=trial.resume_from)``), None when there is none."""
        from agent.tuning.scratch import CHECKPOINT, checkpointed_config, description

        found = checkpointed_config(self.checkpoint_dir)
        if found is None or description(found, 0) != description(self.config, 0):
            return None
        return str(self.checkpoint_dir / CHECKPOINT)


__all__ = ["Study", "TrialHandle", "TRIAL_KILLED", "TRIAL_OK", "TRIAL_FAILED"]
