"""Checks of the hand-written processors' constructor options: one line per refusal.

A typo in a parameter's name would otherwise be carried along unused (the cut keeps
its default) and a NaN or reversed mass window selects nothing, silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__: list[str] = []


def _number(value: Any) -> float | None:
    """``value`` as a float, or ``None`` where it has no concrete value (a JAX tracer,
    which is checked where it is made)."""
    try:
        return float(value)
    except Exception:  # a tracer (its concretization error), an array of another shape
        return None


def options(given: Mapping[str, Any] | None, defaults: Mapping[str, float], what: str,
            *, owner: str, minimum: float | None = None) -> dict[str, Any]:
    """``defaults`` updated with ``given``, every key one of ``defaults``' and every
    concrete value a finite number (``>= minimum`` where given).

    Parameters
    ----------
    given : Mapping or None
        The caller's values (``None``: the defaults).
    defaults : Mapping[str, float]
        The known names and their default values.
    what : str
        The argument's name, for the message (``theta``, ``widths``).
    owner : str
        Keyword-only. The processor's class name, for the message.
    minimum : float, optional
        Keyword-only. The smallest value allowed.

    Returns
    -------
    dict
        The completed options.
    """
    if given is not None and not isinstance(given, Mapping):
        raise TypeError(f"{owner}: {what}: expected a mapping of names to numbers, "
                        f"found {type(given).__name__}")
    out = dict(defaults)
    for name, value in dict(given or {}).items():
        if name not in defaults:
            raise ValueError(f"{owner}: {what}: unknown parameter {name!r} "
                             f"(expected one of {', '.join(sorted(defaults))})")
        number = _number(value)
        if number is not None and not math.isfinite(number):
            raise ValueError(f"{owner}: {what}[{name!r}]: expected a finite number, found {value!r}")
        if number is not None and minimum is not None and number < minimum:
            raise ValueError(f"{owner}: {what}[{name!r}]: expected a number >= {minimum:g}, "
                             f"found {value!r}")
        out[name] = value
    return out


def window(value: Any, *, owner: str) -> tuple[float, float]:
    """``(low, high)``: two finite numbers with ``low < high``."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: window: expected (low, high), two numbers, "
                         f"found {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"{owner}: window: expected finite numbers with low < high, "
                         f"found {value!r}")
    return (low, high)


def integer(value: Any, name: str, *, owner: str, allowed: range) -> int:
    """``value`` as an int in ``allowed`` (a float with a fractional part refused)."""
    if isinstance(value, bool) or _number(value) is None or float(value) != int(float(value)):
        raise ValueError(f"{owner}: {name}: expected an integer, found {value!r}")
    if int(value) not in allowed:
        raise ValueError(f"{owner}: {name}: expected an integer from {allowed.start} to "
                         f"{allowed.stop - 1}, found {value!r}")
    return int(value)
