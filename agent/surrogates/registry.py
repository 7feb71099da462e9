"""The surrogate registry's typed face, and ``auto``'s policy, which picks from it.

Entries live in :data:`agent.registry.SURROGATES` (the one registry mechanism; other packages add
surrogates through the ``tune_agent.surrogates`` entry points, a notebook with :func:`register`):
the CLI's ``--surrogate`` choices, the benchmark's method list and ``auto`` all read it. A new
surrogate is a :class:`~agent.surrogates.contract.SurrogateSpec`.

``auto`` picks by the history: none for this job and space → ``gp``; a TNP meta-trained for this
space in ``models_dir`` on at least ``TNP_MIN_SOURCES`` tasks, with at least as many source tasks in
the history now (or ``TNP_MIN_POINTS`` points, too many for RGPE to answer quickly) → ``tnp``;
otherwise ``rgpe`` (it needs no meta-training, so it is the choice while the history is too small
for a neural process to generalise from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import TuneAgentError
from agent.registry import AUTO, SURROGATES
from agent.surrogates.contract import Surrogate, SurrogateInputs, SurrogateSpec
from agent.surrogates.specs import TNP_FILE, TNP_META

# On lcbench a TNP meta-trained on 27 source tasks beats RGPE at every reported trial count;
# paper 004 meta-trains on tens of tasks, and a network meta-trained on a handful would overfit.
TNP_MIN_SOURCES = 20
# RGPE's suggestion cost grows with the history (one GP per source, every point kernelised); the
# TNP's does not (it attends to the top-m similar sources).
TNP_MIN_POINTS = 20000


def register(spec: SurrogateSpec) -> None:
    """Adds ``spec`` in this process (:meth:`agent.registry.Registry.register`)."""
    SURROGATES.register(spec.name, spec)


def names() -> tuple[str, ...]:
    return SURROGATES.names()


def choices() -> tuple[str, ...]:
    """What ``--surrogate`` accepts."""
    return SURROGATES.choices()


def get(name: str) -> SurrogateSpec:
    """The surrogate named ``name``: a built-in, another package's entry point or one registered here."""
    spec = SURROGATES.load(name)
    if not isinstance(spec, SurrogateSpec) or spec.name != name:
        raise TuneAgentError(f"--surrogate {name}: its registry entry is not a SurrogateSpec named {name!r}")
    return spec


@dataclass(frozen=True)
class Resolution:
    """What a requested surrogate resolved to, before preparation, and why (a suffix of the note)."""

    name: str
    why: str = ""


def tnp_meta(models_dir: Path, space_signature: str) -> dict[str, Any] | None:
    """What the TNP in ``models_dir`` was meta-trained on, or None when there is none for this space."""
    meta = Path(models_dir) / TNP_META
    if not (Path(models_dir) / TNP_FILE).exists() or not meta.exists():
        return None
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError) as exc:
        from agent.errors import ModelFileError

        raise ModelFileError(
            f"cannot read {meta} ({type(exc).__name__}); rebuild it with `dvc repro` (or "
            "`tune-agent meta train-transfer`), or move it aside"
        ) from None
    return info if isinstance(info, dict) and info.get("space_signature") == space_signature else None


def resolve(requested: str, inputs: SurrogateInputs) -> Resolution:
    """The registry name a study runs for ``requested`` (a name or ``auto``) on these inputs."""
    if requested != AUTO:
        spec = get(requested)
        if spec.needs_history and not inputs.sources:
            return Resolution("gp", f"; {requested} was asked for but needs history for this job and space")
        if spec.meta_model and tnp_meta(inputs.models_dir, inputs.space.signature()) is None:
            return Resolution(
                "rgpe",
                f"; {spec.name} was asked for but none is meta-trained for this space in "
                f"{inputs.models_dir} (run `dvc repro`)",
            )
        return Resolution(requested)
    if not inputs.sources:
        return Resolution("gp", " (no history for this job and space)")
    points = sum(len(s.y) for s in inputs.sources)
    meta = tnp_meta(inputs.models_dir, inputs.space.signature())
    if meta is not None and (
        points >= TNP_MIN_POINTS
        or (len(inputs.sources) >= TNP_MIN_SOURCES and int(meta.get("sources", 0)) >= TNP_MIN_SOURCES)
    ):
        return Resolution("tnp")
    why = (
        f"; the TNP waits for {TNP_MIN_SOURCES} source tasks, in the history and in its meta-training"
        if meta is not None
        else ""
    )
    return Resolution("rgpe", why)


def prepare(resolution: Resolution, inputs: SurrogateInputs) -> Surrogate:
    """Prepares the resolved surrogate; its note says what it is and why."""
    surrogate = get(resolution.name).prepare(inputs)
    if surrogate.name == resolution.name:
        surrogate.note += resolution.why
    return surrogate
