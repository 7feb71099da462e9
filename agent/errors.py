"""The project's exceptions: one base carrying an exit code, small leaves.

The CLI maps any :class:`TuneAgentError` to one line on stderr and its ``exit_code``;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class TuneAgentError(Exception):
    """Base of every error the user can act on. ``exit_code`` 2 means bad input."""

    exit_code: int = 2


class DatasetError(TuneAgentError):
    """A dataset name, file or option cannot be turned into a usable dataset."""


class JobError(TuneAgentError):
    """A job is unknown or does not meet the job protocol."""


class SpaceError(TuneAgentError):
    """A search space or a configuration does not fit its space."""


class StoreError(TuneAgentError):
    """The tracking store cannot be reached or holds something unexpected."""


class StudyError(TuneAgentError):
    """A study is unknown, finished, or cannot be resumed as asked."""


class ExtractorError(TuneAgentError):
    """The meta-feature extractor's settings, target distances or saved file cannot be used."""


class EmptyHistoryError(TuneAgentError):
    """The history holds too little to learn a meta-model from."""


class UnknownStudyError(StudyError):
    """No study of that name is in the store."""


class StudyFailedError(TuneAgentError):
    """Most trials of a study failed; the study stopped."""

    exit_code = 1


class WorkersLostError(TuneAgentError):
    """The cluster running a study's trials went away (a Ray head that died), or its workers cannot
    run them (the job's code is not there): the running trials are closed as killed and the study
    can be resumed, as ``hint`` says."""

    def __init__(self, message: str, hint: str = "--workers/--ray-address for a cluster that is up") -> None:
        super().__init__(message)
        self.hint = hint
