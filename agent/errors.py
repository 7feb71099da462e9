"""The project's exceptions: one base carrying an exit code and a hint, small leaves.

The CLI (:func:`agent.cli.main.main`) maps any :class:`TuneAgentError` to one line on stderr --
the message, then ``; `` and the hint when there is one -- and its ``exit_code``; anything else
is a bug and keeps its traceback. Code that knows what the user can do next (``tune-agent resume
NAME`` once the store is back) says so with :meth:`TuneAgentError.hinted`, not by rewriting text.
"""

from __future__ import annotations


class TuneAgentError(Exception):
    """Base of every error the user can act on. ``exit_code`` 2 means bad input; ``hint``, what to
    do about it (printed after the message)."""

    exit_code: int = 2

    def __init__(self, message: str = "", hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def hinted(self, hint: str) -> TuneAgentError:
        """This error with ``hint`` put after the one it had (most specific last)."""
        self.hint = f"{self.hint}; {hint}" if self.hint else hint
        return self

    def line(self) -> str:
        """The one line the CLI prints."""
        message = str(self)
        return f"{message.rstrip('.')}; {self.hint}" if self.hint else message


class OptionError(TuneAgentError):
    """An option's value no study could run with; the message names the option as the command
    line spells it."""

    def __init__(self, message: str, param_hint: str) -> None:
        super().__init__(f"Invalid value for '{param_hint}': {message}")
        self.option = param_hint


class DatasetError(TuneAgentError):
    """A dataset name, file or option cannot be turned into a usable dataset."""


class JobError(TuneAgentError):
    """A job is unknown or does not meet the job protocol."""


class SpaceError(TuneAgentError):
    """A search space or a configuration does not fit its space."""


class StoreError(TuneAgentError):
    """The tracking store cannot be reached or holds something unexpected."""


class StoreUnwritableError(StoreError):
    """The store or its artifact root takes no writes: a full disk, a read-only file system."""


class StudyError(TuneAgentError):
    """A study is unknown, finished, or cannot be resumed as asked."""


class ExtractorError(TuneAgentError):
    """The meta-feature extractor's settings, target distances or saved file cannot be used."""


class ModelFileError(TuneAgentError):
    """A file the pipeline wrote under ``models/`` cannot be read (corrupt, cut, another version)."""


class EmptyHistoryError(TuneAgentError):
    """The history holds too little to learn a meta-model from."""


class UnknownStudyError(StudyError):
    """No study of that name is in the store."""


class StudyBusyError(StudyError):
    """Another live process runs the study (it holds the study's lease)."""


class StudyFailedError(TuneAgentError):
    """Most trials of a study failed; the study stopped."""

    exit_code = 1


class WorkersLostError(TuneAgentError):
    """The cluster running a study's trials went away (a Ray head that died), or its workers cannot
    run them (the job's code is not there): the running trials are closed as killed and the study
    can be resumed, with ``remedy`` (the options that would work)."""

    def __init__(self, message: str, remedy: str = "--workers/--ray-address for a cluster that is up") -> None:
        super().__init__(message)
        self.remedy = remedy


class StudyInterrupted(TuneAgentError):
    """The user stopped a study (Ctrl-C); what was told is kept and the study resumes."""

    exit_code = 130
