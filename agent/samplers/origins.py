"""What a trial's origin tag means: the ``[...]`` of ``trial 3/8 [init:sobol]``, the ``origin``
tag of its run. :func:`explain_origin` gives the one line a study prints the first time a kind of
origin appears; ``docs/`` lists the same table."""

from __future__ import annotations

# kind (the tag up to its first ':', or the whole tag) -> what it means; {0} is the rest of the tag
_KINDS = {
    "warm": "the best configuration of a neighbouring historical dataset ({0}: meta-features, then the dataset)",
    "init:cold-fallback": "a design point in place of a BO step: the transfer surrogate gives the history no weight "
    "yet (its sources do not predict this study's results), so the study explores as a cold one",
    "init:table": "a point of the replayed table's initial design",
    "init": "a point of the initial design ({0})",
    "bo:target-gp": "a BO step on a plain GP of this study's trials alone: the transfer surrogate stalled, and the "
    "study alternates with the model it must never do worse than",
    "bo": "a Bayesian-optimisation step (acquisition {0})",
    "random:interleaved": "a uniform random configuration, interleaved with BO steps (--random-every)",
    "random": "a uniform random configuration{0}",
    "tpe": "Optuna's TPE sampler",
    "hts": "paper 001's transfer function from source study {0}",
    "hts-anchored": "paper 001's transfer function from source study {0}, anchored at the identity",
    "import": "an evaluation imported from elsewhere",
}
_DESIGNS = {
    "sobol": "a scrambled Sobol sequence",
    "lhs": "a Latin hypercube",
    "halton": "a Halton sequence",
    "random": "uniform random points",
}


def origin_kind(origin: str) -> str:
    """The part of ``origin`` that says what kind of step it was (``warm``, ``init:sobol`` ->
    ``init``, ``init:cold-fallback``, ``bo:target-gp``, ``bo``, ...)."""
    return origin if origin in _KINDS else origin.split(":", 1)[0]


def explain_origin(origin: str) -> str:
    """One line on what the trial's origin tag ``origin`` means."""
    kind = origin_kind(origin)
    rest = origin.split(":", 1)[1] if ":" in origin and origin not in _KINDS else ""
    if kind == "init":
        rest = _DESIGNS.get(
            rest,
            f"the {rest} surrogate's start points: the history's greedy portfolio" if rest not in ("lhs",) else rest,
        )
    elif kind == "random" and rest:
        rest = f" ({rest})"
    template = _KINDS.get(kind)
    return template.format(rest) if template else f"{origin}: a step of the study's sampler"
