"""Values given for a parameter after load (``--set``, ``scan --grid``, ``Evaluator.run``),
checked like the config's own ``init``.

A parameter used as the threshold of a count condition (``{count: jets, op: ">=",
param: min_jets}``) is a number of objects: an integer ``>= 0`` (as its ``init`` must
be; a trainable one moves between integers only through its width, within its bounds),
and at most its cap, the largest count the count states were sized for (``max(init,
upper bound)``: :mod:`analysis.pipeline.bounds`). A parameter declared ``integer: true``
is an integer. A value the optimiser reached (``soft``) of a trainable parameter may lie
between integers. Every value is finite. :func:`value_problem` says what is wrong in one
phrase.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["count_caps", "value_problem"]


def count_caps(config: Any) -> dict[str, float]:
    """``{parameter: cap}`` of the parameters that are count thresholds (selection list
    and channels' selections)."""
    entries = list(config.selection.entries or [])
    if config.likelihood is not None:
        entries += [e for ch in config.likelihood.channels.values() for e in ch.selection]
    caps: dict[str, float] = {}
    for e in entries:
        if getattr(e, "count", None) and e.param is not None:
            p = config.parameters[e.param]
            caps[e.param] = max(p.init, p.bounds[1] if p.bounds else p.init)
    return caps


def value_problem(config: Any, name: str, value: Any, *, soft: bool = False) -> str | None:
    """Why ``value`` cannot be given for parameter ``name`` of ``config`` (None if it
    can). ``soft``: a value the optimiser reached (a trainable count threshold may lie
    between integers); otherwise a value given by hand."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return f"expected a finite number, got {value!r}"
    if not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    p = config.parameters.get(name)
    if p is None:
        return None  # (a learned score's weight, or unknown: said by the caller)
    cap = count_caps(config).get(name)
    # (the optimiser moves a trainable one between integers: integer_step of its width)
    must_be_integer = (p.integer or cap is not None) and not (soft and p.trainable)
    if must_be_integer and not value.is_integer():
        what = "a count threshold" if cap is not None else "an integer parameter"
        return f"{name} is {what}: expected an integer, got {value:g}"
    if cap is not None and not (soft and p.trainable) and not 0 <= value <= cap:
        return (f"{name} is a count threshold: expected 0 <= {name} <= {cap:g} (the count "
                f"states are sized for max(init, upper bound) = {cap:g}), got {value:g}")
    return None
