"""The parameter values of the command line: ``--set NAME=VALUE`` and ``scan --grid
NAME=LOW:HIGH:N``, checked as the config's ``init`` is (:mod:`analysis.config.values`):
finite, an integer for a count threshold or an ``integer: true`` parameter, a count
within its cap; a grid of at most :data:`~analysis.limits.MAX_GRID_POINTS` points.
Split out of :mod:`analysis.cli.commands`, which re-exports both."""

from __future__ import annotations

import difflib
import math
from typing import TYPE_CHECKING

from analysis.errors import DiffcoffeaError
from analysis.limits import MAX_GRID_POINTS

if TYPE_CHECKING:
    import numpy as np

    from analysis.config.loader import Config

__all__ = ["parse_grid"]


def _parse_sets(items: list[str], config: Config | None = None) -> dict[str, float]:
    from analysis.config.values import value_problem

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise DiffcoffeaError(f"--set {item!r}: expected NAME=NUMBER") from None
        if not math.isfinite(out[name.strip()]):
            raise DiffcoffeaError(f"--set {item!r}: expected a finite number")
        if config is not None:  # named here, with the config's names, before any pass
            _known(item, name.strip(), config)
        problem = None if config is None else value_problem(config, name.strip(),
                                                            out[name.strip()])
        if problem is not None:  # as the config's init is checked (a count: an integer)
            raise DiffcoffeaError(f"--set {item!r}: {problem}")
    return out


def _known(item: str, name: str, config: Config) -> None:
    """Refuse a ``--set`` name the config does not define, suggesting the closest."""
    names = list(config.initial_params())
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"defined parameters: {', '.join(names)}"
    raise DiffcoffeaError(f"--set {item!r}: unknown parameter {name!r}; {hint}")


def parse_grid(items: list[str], config: Config) -> dict[str, np.ndarray]:
    """``["name=lo:hi:n", ...]`` to ``{name: values}`` (inclusive, evenly spaced)."""
    import numpy as np

    grid: dict[str, np.ndarray] = {}
    sizes: dict[str, int] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        parts = spec.split(":")
        try:
            if not sep or len(parts) != 3:
                raise ValueError
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
            if n < 1 or not np.isfinite([lo, hi]).all():
                raise ValueError
        except ValueError:
            raise DiffcoffeaError(
                f"--grid {item!r}: expected NAME=LOW:HIGH:N with finite LOW, HIGH and N >= 1, "
                "e.g. jet_pt_min=20:100:17"
            ) from None
        if name not in config.parameters:
            raise DiffcoffeaError(
                f"--grid {item!r}: unknown parameter {name!r}; parameters: {', '.join(config.parameters)}"
            )
        sizes[name] = n
    if not sizes:
        raise DiffcoffeaError("scan: give at least one --grid NAME=LOW:HIGH:N")
    points = math.prod(sizes.values())  # checked before any grid array is made
    if points > MAX_GRID_POINTS:
        raise DiffcoffeaError(
            f"--grid: {' x '.join(map(str, sizes.values()))} = {points} points; at most "
            f"{MAX_GRID_POINTS} (docs/guide/limits.md)"
        )
    from analysis.config.values import value_problem

    for item in items:
        name, _, spec = item.partition("=")
        lo, hi, _n = spec.split(":")
        with np.errstate(over="ignore", invalid="ignore"):
            values = np.linspace(float(lo), float(hi), sizes[name])
        for v in values:  # -1e308:1e308: the step overflows to inf, the points to NaN
            problem = value_problem(config, name, float(v))
            if problem is not None:
                raise DiffcoffeaError(f"--grid {item!r}: the point {name} = {v:g}: {problem}")
        grid[name] = values
    return grid
