"""The trained models a study keeps: its best ``--keep-models`` trials' weights on their runs.

Before a trial starts, the study loop writes what it must beat to be kept into the trial's scratch
(:mod:`agent.execution.checkpoints`): the K-th best value so far, or nothing while fewer than K
trials succeeded. Where it trains (this process, a trial process, a Ray worker), a trial that beats
it saves its trained model there as ``model/`` (an MLflow pyfunc on raw rows, with a signature and
an input example) and ``network/`` (the pytorch flavour): the weights of its last epoch, whose
metric is the trial's value. When the trial ends and still ranks among the study's best K (the
K-th best only gets better, so every trial that ranks has saved; a study of several objectives or
constraints ranks front by front, the Pareto front first, and every trial saves), those files
are kept on its run, file by file; a trial it pushes out of the top K loses its model, and its
run's ``tune_agent.model`` tag says by which trial. The study's process imports neither Lightning
nor torch for it. The study run carries
``kept_models`` (trial numbers) and ``kept_models_bytes``. The trial's scratch is removed either
way; a killed trial's stays for its re-run.

Keeping a model is a by-product: one that cannot be kept (a full disk, a store that keeps no
artifacts) is one line, and the trial keeps its value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agent.config import KEEP_ALL
from agent.execution.checkpoints import SERVED, request_keep
from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK, TrialRecord
from agent.knowledge.stores import KeptModels, kept_models
from agent.tuning.scratch import clear, trial_scratch
from agent.tuning.study import Study


class ModelKeeper:
    """Keeps and drops models as a study's trials end (:meth:`ended`)."""

    def __init__(self, study: Study, job: Any, say: Callable[[str], None]) -> None:
        from agent.jobs.base import BenchmarkJob

        self.study, self.say = study, say
        # a store that keeps no artifacts (memory://) keeps no models: nothing is saved for it
        self.models = kept_models(study.kb)
        self.count = int(getattr(study.settings, "keep_models", 0)) if self.models is not None else 0
        self.trains = not isinstance(job, BenchmarkJob)
        tags = study.record.tags
        self.kept: dict[int, int] = {int(k): int(v) for k, v in json.loads(tags.get("kept_models_sizes", "{}")).items()}

    @property
    def _models(self) -> KeptModels:
        assert self.models is not None  # without a keeper the count is 0: nothing reaches here
        return self.models

    def before(self, trial: TrialRecord, trials: list[TrialRecord]) -> None:
        """``trial`` is about to start: what it must beat to be kept, in its scratch."""
        if not self.trains or self.count == 0:
            return
        beat = None  # keep all, fewer than K so far, or a front (no one value to beat): every trial saves
        if self.count != KEEP_ALL and not self.study.settings.multi:
            ranked = self._ranked(trials)
            beat = ranked[self.count - 1].value if len(ranked) >= self.count else None
        request_keep(
            trial_scratch(self.study.kb, self.study.record.study_id, trial.number), self.study.settings.mode, beat
        )

    def ended(self, trial: TrialRecord, trials: list[TrialRecord]) -> None:
        """``trial`` was told (``trials``: the study's trials with it): keep its model when it
        ranks, drop the one it pushes out, clear its scratch unless it was killed."""
        if not self.trains or trial.state == TRIAL_KILLED:
            return
        folder = trial_scratch(self.study.kb, self.study.record.study_id, trial.number)
        try:
            if self.count != 0 and trial.state == TRIAL_OK and (folder / SERVED).is_dir():
                self._rank(trial, trials, folder / SERVED)
        finally:
            clear(folder)

    def _rank(self, trial: TrialRecord, trials: list[TrialRecord], served: Any) -> None:
        best = self._ranked(trials)
        ranked = {t.number for t in (best if self.count == KEEP_ALL else best[: self.count])}
        if trial.number not in ranked:
            return
        try:
            size = self._models.keep_model_files(self.study.record, trial, served)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.say(f"  trial {trial.number + 1}: model not kept ({type(exc).__name__}: {reason[:300]})")
            return
        label = "all" if self.count == KEEP_ALL else f"top {self.count}"
        self._models.set_trial_tags(trial, {"model": f"kept ({label})"})
        self.kept[trial.number] = size
        for number in [n for n in self.kept if n not in ranked]:
            out = next((t for t in trials if t.number == number and t.state == TRIAL_OK), None)
            if out is not None:
                note = f"deleted: pushed out of the {label} by trial {trial.number + 1}"
                self._models.drop_model(self.study.record, out, note)
            del self.kept[number]
        self.study.kb.set_study_tags(
            self.study.record,
            {
                "kept_models": ",".join(str(n + 1) for n in sorted(self.kept)),
                "kept_models_bytes": str(sum(self.kept.values())),
                "kept_models_sizes": json.dumps({str(n): b for n, b in sorted(self.kept.items())}),
            },
        )

    def _ranked(self, trials: list[TrialRecord]) -> list[TrialRecord]:
        """The study's successful trials, best first (ties: the earlier first); with several
        objectives or constraints, front by front (:func:`agent.samplers.pareto.front_order`)."""
        if self.study.settings.multi:
            from agent.samplers.pareto import front_order

            return front_order(trials, self.study.settings)
        ok = [t for t in trials if t.state == TRIAL_OK and t.value is not None]
        return sorted(ok, key=lambda t: (-self.study.settings.sign * float(t.value or 0.0), t.number))
