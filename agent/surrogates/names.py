"""The built-in surrogates' names, importable without numpy or torch: the CLI builds its
``--surrogate`` choices from them, so ``tune-agent --help`` stays light. The registry
(:mod:`agent.surrogates.registry`) holds the surrogates themselves; a test checks both agree."""

BUILTIN = ("gp", "portfolio_gp", "neighbour_gp", "rgpe", "tnp")
AUTO = "auto"
CHOICES = (*BUILTIN, AUTO)
