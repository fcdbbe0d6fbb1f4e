"""Overflow is an error, not "undefined": a chunk state that is not finite from finite data.

Every branch a pass reads is finite (:mod:`analysis.data.columns` stops on, or drops,
non-finite values), so a chunk's sums of weights and centred powers can only turn
inf/NaN by overflowing float64: one jet with pT 1e300 makes ``sum w (x - c)^4`` infinite,
a weight of 1e300 makes ``sum w^2`` infinite. Reported as ``null`` statistics that would
be silently wrong ("undefined" is for zero selected weight or a constant sample), so
:func:`check_overflow` raises one :class:`~analysis.errors.InputError` naming the
dataset, the statistic and the largest value of the chunk (branch, value, event),
whenever some state leaf is not finite and the data's magnitudes can overflow:
``4 log10 max|x| + log10 max|w| + log10 n > 300`` or ``2 log10 max|w| + log10 n > 300``
(``n`` entries; a margin of 8 decades below float64's 1.8e308). A non-finite state
from a smaller magnitude has another, documented cause (a count threshold beyond its
cap) and is left as it is.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from analysis.errors import InputError
from analysis.pipeline.layout import ChunkColumns

__all__ = ["check_overflow", "largest_value", "unused_moments"]

_DECADES = 300.0


def _columns(cols: ChunkColumns):
    """``(branch name, flat values, counts or None)`` of every column of ``cols``."""
    yield "weight", np.asarray(cols.weight), None
    for name, v in cols.events.items():
        yield name, np.asarray(v), None
    for coll, (counts, fields) in cols.collections.items():
        for name, v in fields.items():
            yield f"{coll}_{name}", np.asarray(v), counts


def largest_value(cols: ChunkColumns, *, weights: bool = False) -> tuple[str, float, int]:
    """``(branch, value, event of the chunk)`` of the largest finite ``|value|`` among the
    data columns (``weights``: among the event weights); ``("", 0.0, -1)`` if none."""
    best = ("", 0.0, -1)
    for name, v, counts in _columns(cols):
        if (name == "weight") != weights or v.size == 0 or v.dtype.kind not in "fiu":
            continue
        a = np.where(np.isfinite(v), np.abs(v.astype(np.float64)), 0.0)
        j = int(np.argmax(a))
        if a[j] > abs(best[1]):
            event = j if counts is None else int(np.searchsorted(np.cumsum(counts), j, "right"))
            best = (name, float(v[j]), event)
    return best


def _log10(x: float) -> float:
    return math.log10(abs(x)) if x else -math.inf


def _bad_leaf(tree: Any, unused: set[str]) -> str | None:
    """Path of the first non-finite leaf of ``tree`` not in ``unused`` (``None`` if all are
    finite)."""
    floats = [a.ravel() for a in map(np.asarray, jax.tree_util.tree_leaves(tree))
              if a.dtype.kind in "fc"]
    if not floats or np.isfinite(np.concatenate(floats)).all():  # one test for all leaves
        return None
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.asarray(leaf)
        if a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
            name = ".".join(
                str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path
            )
            if name not in unused:
                return name
    return None


def unused_moments(plan: Any) -> set[str]:
    """State leaves no requested statistic reads: the moments above the order the
    observable's statistics declare (``plan.sets.orders``; a state keeps them NaN by
    design)."""
    out = set()
    for obs, order in zip(plan.observables, plan.sets.orders):
        for k in range(order + 1, 5):
            out.add(f"observables.{obs.name}.moments.m{k}")
    return out


def check_overflow(state: Any, cols: ChunkColumns, plan: Any, *, dataset: str) -> None:
    """Raise :class:`InputError` if the chunk ``state`` (a ``DatasetState``) of ``cols``
    overflowed float64 (module docstring); otherwise return."""
    derived = state.derived
    unused = unused_moments(plan)
    bad = _bad_leaf(derived.value, unused) or _bad_leaf(derived.jac, unused)
    if bad is None:
        return
    n = max(sum(v.size for _, v, _ in _columns(cols)), 1)
    xname, x, xevent = largest_value(cols)
    wname, w, wevent = largest_value(cols, weights=True)
    lw, ln = _log10(w) if w else 0.0, math.log10(n)
    if 2 * lw + ln > _DECADES or not x:
        name, value, event = wname, w, wevent
    else:
        name, value, event = xname, x, xevent
    if not (4 * _log10(x) + lw + ln > _DECADES or 2 * lw + ln > _DECADES):
        return
    head, _, rest = bad.partition(".")
    stat = bad if head != "observables" else "{} of observable {!r}".format(*rest.split(".", 1)[::-1])
    raise InputError(
        f"statistic {stat} of dataset {dataset!r} overflows float64: the largest value is "
        f"{name} = {value:.6g} (event {event} of the chunk); expected magnitudes whose "
        "sums of powers fit float64 (drop or rescale such entries)"
    )
