"""One registry mechanism for what a study is built from: samplers, surrogates, warm starts' meta-features,
pruners and jobs.

Each kind is a :class:`Registry`. Its built-in entries are named here, once, as ``module:attribute``
references, so their names are known without importing numpy or torch (``--help`` and option
checks stay light); an entry's object is imported on first use. Other installed packages add
entries through entry points in the groups ``tune_agent.samplers``, ``tune_agent.surrogates``,
``tune_agent.warm_starts``, ``tune_agent.pruners`` and ``tune_agent.jobs``, for example in their ``pyproject.toml``::

    [project.entry-points."tune_agent.surrogates"]
    my_gp = "my_package.surrogates:MY_GP_SPEC"

A sampler entry is a :class:`~agent.samplers.registry.SamplerSpec`, a surrogate entry a
:class:`~agent.surrogates.contract.SurrogateSpec`, a warm-start entry a function of the models folder
that returns a :class:`~agent.meta.neighbours.Featurizer` (or None when its model is missing), a pruner entry a
:class:`~agent.execution.pruning.Pruner` (``rungs`` and ``verdict``), a job entry a job class, instance or
zero-argument factory (:mod:`agent.jobs.registry`). A plugin cannot take a built-in's name: it is
left out, and :meth:`Registry.skipped` says so. ``docs/guide/plugins.md`` shows a plugin end to end.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from agent.errors import TuneAgentError

GROUP_PREFIX = "tune_agent."
AUTO = "auto"  # --surrogate auto: the rule in agent.surrogates.registry picks an entry by the history

BUILTIN: dict[str, dict[str, str]] = {
    "samplers": {
        "bo": "agent.samplers.registry:BO",
        "random": "agent.samplers.registry:RANDOM",
        "tpe": "agent.samplers.registry:TPE",
        "hts": "agent.samplers.registry:HTS",
        "hts-anchored": "agent.samplers.registry:HTS_ANCHORED",
    },
    "surrogates": {
        "gp": "agent.surrogates.specs:GP",
        "portfolio_gp": "agent.surrogates.specs:PORTFOLIO_GP",
        "neighbour_gp": "agent.surrogates.specs:NEIGHBOUR_GP",
        "rgpe": "agent.surrogates.specs:RGPE",
        "tnp": "agent.surrogates.specs:TNP",
    },
    "warm_starts": {"learned": "agent.meta.neighbours:learned", "handcrafted": "agent.meta.neighbours:handcrafted"},
    "pruners": {
        "none": "agent.execution.pruning:NONE",
        "median": "agent.execution.pruning:MEDIAN",
        "asha": "agent.execution.pruning:ASHA",
    },
    "jobs": {
        "cnn": "agent.jobs.cnn:CNNJob",
        "mlp": "agent.jobs.mlp:MLPJob",
        "mlp-arch": "agent.jobs.mlp_arch:MLPArchJob",
    },
}


class UnknownEntryError(TuneAgentError):
    """A name no registry entry has."""


def _resolve(reference: str) -> Any:
    module, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


class Registry:
    """The entries of one kind: built-ins first, then other packages' entry points, then what
    :meth:`register` added in this process."""

    def __init__(self, kind: str, option: str, rules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.option = option  # the command-line option that names an entry, for error lines
        self.rules = rules  # names the option also takes that pick an entry (``auto``), not entries
        self._references: dict[str, str] = dict(BUILTIN[kind])
        self._plugins: dict[str, Any] | None = None  # name -> entry point, read on first need
        self._skipped: list[str] = []
        self._objects: dict[str, Any] = {}

    @property
    def group(self) -> str:
        return GROUP_PREFIX + self.kind

    def _entry_points(self) -> dict[str, Any]:
        if self._plugins is None:
            from importlib.metadata import entry_points

            self._plugins = {}
            for point in sorted(entry_points(group=self.group), key=lambda p: p.name):
                if point.name in self._references or point.name in self._plugins:
                    self._skipped.append(f"{point.name} ({point.value}): the name is taken")
                else:
                    self._plugins[point.name] = point
        return self._plugins

    def names(self) -> tuple[str, ...]:
        """Every entry's name: built-ins, plugins, then entries registered at run time."""
        plugins = list(self._entry_points())
        added = [name for name in self._objects if name not in self._references and name not in plugins]
        return (*self._references, *plugins, *added)

    def choices(self) -> tuple[str, ...]:
        """What the option accepts: every entry's name, then the rules'."""
        return (*self.names(), *self.rules)

    def check(self, name: str) -> None:
        """:class:`UnknownEntryError` (one line, exit 2) unless the option accepts ``name``; imports nothing."""
        if name not in self.choices():
            raise UnknownEntryError(f"{self.option} must be one of {', '.join(self.choices())}, got {name!r}")

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def skipped(self) -> list[str]:
        """Plugins left out, each with why."""
        self._entry_points()
        return list(self._skipped)

    def load(self, name: str) -> Any:
        """The entry named ``name``, imported on first use; :class:`UnknownEntryError` (one line,
        exit 2) for a name no entry has."""
        if name in self._objects:
            return self._objects[name]
        if name in self._references:
            found = _resolve(self._references[name])
        elif name in self._entry_points():
            try:
                found = self._entry_points()[name].load()
            except Exception as exc:  # another package's code failing at import time
                raise TuneAgentError(
                    f"{self.option} {name}: the {self.kind} entry point {self._entry_points()[name].value} "
                    f"failed to load: {type(exc).__name__}: {exc}"
                ) from None
        else:
            raise UnknownEntryError(f"{self.option} must be one of {', '.join(self.choices())}, got {name!r}")
        self._objects[name] = found
        return found

    def register(self, name: str, entry: Any) -> None:
        """Adds ``entry`` in this process (a notebook's or a test's); a name taken by another entry is
        a programming error."""
        if name in self.names() and self.load(name) is not entry:
            raise ValueError(f"{self.kind} entry {name!r} is already registered")
        self._objects[name] = entry

    def unregister(self, name: str) -> None:
        """Removes an entry :meth:`register` added."""
        if name in self._references or name in self._entry_points():
            raise ValueError(f"{self.kind} entry {name!r} is not one registered at run time")
        self._objects.pop(name, None)


SAMPLERS = Registry("samplers", "--sampler")
SURROGATES = Registry("surrogates", "--surrogate", rules=(AUTO,))
JOBS = Registry("jobs", "--job")
PRUNERS = Registry("pruners", "--pruner")
# --warm-start: meta-features that place a dataset among the history's; auto picks one by the last
# `dvc repro` evaluation, none starts cold
WARM_STARTS = Registry("warm_starts", "--warm-start", rules=(AUTO, "none"))
