"""The built-in networks' shape arithmetic, without torch: read by a job's module and by its
network's (``<job>_net``), so neither imports the other (:mod:`agent.jobs.mlp`, :mod:`agent.jobs.cnn`)."""

from __future__ import annotations

MAX_DROPOUT = 0.95


def funnel_shape(
    num_layers: int, max_units: int, num_classes: int, max_dropout: float
) -> tuple[list[int], list[float]]:
    """Hidden widths and dropout rates of the funnel (see the module docstring)."""
    widths = [max(1, round(max_units - (max_units - num_classes) * i / num_layers)) for i in range(num_layers)]
    if num_layers == 1:
        rates = [float(max_dropout)]
    else:
        rates = [max_dropout * i / (num_layers - 1) for i in range(num_layers)]
    return widths, [min(float(p), MAX_DROPOUT) for p in rates]


FC_UNITS = 256
BASE_FILTERS = 32


def conv_filters(n_layers: int) -> list[int]:
    """Filter counts rising then falling: layer ``i`` of ``n`` has ``32 * 2**min(i, n-1-i)``."""
    return [BASE_FILTERS * 2 ** min(i, n_layers - 1 - i) for i in range(n_layers)]
