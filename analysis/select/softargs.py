"""The arguments of :mod:`analysis.soft`'s functions: values, lists, widths, sizes.

:func:`_as_input` reads an awkward Array, a :class:`~analysis.stats.Jagged` or an array
as flat float64 JAX values and offsets; :func:`_probability_lists` requires lists with
concrete offsets; :func:`_check_width` refuses a negative or non-finite width.
:func:`_bucket` and :func:`_object_bucket` round sizes up so that chunks of similar
sizes share one compiled program (:mod:`analysis.select.softprograms`).
:func:`_collection_labels` checks ``joint_pass_weights``' ``parents`` and
``collections`` and gives each set's collection.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from analysis.select import cuts
from analysis.stats.jagged import Jagged, from_awkward
from analysis.stats.layouts import _is_awkward
from analysis.stats.offsets import concrete


def _as_input(x: Any, name: str) -> tuple[Any, Any]:
    """``(flat float64 JAX values, offsets or None)`` of an awkward Array, Jagged or array."""
    if isinstance(x, Jagged):
        return jnp.asarray(x.values, dtype=jnp.float64), x.offsets
    if _is_awkward(x):
        if x.ndim == 1:
            return jnp.asarray(np.asarray(x, dtype=np.float64)), None
        j = from_awkward(x)
        return jnp.asarray(j.values, dtype=jnp.float64), j.offsets
    arr = jnp.asarray(x, dtype=jnp.float64)
    if arr.ndim > 1:
        raise ValueError(
            f"{name}: expected flat values or one level of lists, found shape {arr.shape}"
        )
    return arr, None


def _probability_lists(p: Any, func: str) -> tuple[Any, Any, np.ndarray]:
    """``(values, offsets, concrete offsets)`` of per-object probabilities with lists."""
    values, offsets = _as_input(p, f"{func}: p")
    if offsets is None:
        raise ValueError(f"{func}: p: expected one list of probabilities per event")
    off = concrete(offsets)
    if off is None:
        raise ValueError(f"{func}: p: the list offsets must be concrete (not traced)")
    return values, offsets, off


def _check_width(width: Any, func: str) -> Any:
    if isinstance(width, (numbers.Real, np.generic)) and not isinstance(width, bool):
        if not (math.isfinite(float(width)) and float(width) >= 0):
            raise ValueError(f"{func}: width: expected a finite number >= 0, found {width!r}")
    return jnp.asarray(width, dtype=jnp.float64)


def _bucket(n: int) -> int:
    """Smallest power of two >= n (at least 8)."""
    return max(8, 1 << max(n - 1, 0).bit_length())


def _object_bucket(n: int) -> int:
    """The per-event object axis: the largest multiplicity rounded up to a multiple of 4
    (at least 4), so that chunks share a few compiled recursions."""
    return max(4, -(-n // 4) * 4)


def _collection_labels(sets: Mapping[str, Any], parents: Mapping[str, str],
                       collections: Mapping[str, str] | None) -> dict[str, str]:
    """``{set: collection label}`` of ``joint_pass_weights``' sets: a derived set is in its
    root parent's collection unless ``collections`` names one; refuses no sets, a parent
    or child that is not a set, a cycle of parents, and a set named in another
    collection than its parent's."""
    names = list(sets)
    if not names:
        raise ValueError("joint_pass_weights: sets: expected at least one set")
    for child, parent in parents.items():
        if child not in sets or parent not in sets:
            missing = child if child not in sets else parent
            raise ValueError(f"joint_pass_weights: parents: {missing!r} is not a set")

    def root(name: str) -> str:
        seen = {name}
        while name in parents:
            name = parents[name]
            if name in seen:
                raise ValueError(f"joint_pass_weights: parents: cycle through {name!r}")
            seen.add(name)
        return name

    label = {n: (collections or {}).get(root(n), root(n)) for n in names}
    for n in names:
        if collections and n in collections and collections[n] != label[n]:
            raise ValueError(f"joint_pass_weights: collections: {n!r} is in "
                             f"{collections[n]!r}, its parent in {label[n]!r}")
    return label


def _cut_kind(op: str, threshold: Any) -> tuple[Any, list[Any]]:
    """``soft_cut``'s cut kind for ``op`` (:mod:`analysis.select.cuts`, read now: never a
    copy taken at import, so a kind registered there is here) and its float64 bounds
    from ``threshold`` (one value per bound: the window's ``(lo, hi)``)."""
    if op not in cuts.OPS:
        raise ValueError(f"soft_cut: op: expected one of {', '.join(cuts.OPS)}, found {op!r}")
    kind = cuts.kind_of(op)
    bounds: tuple[Any, ...] = (threshold,)
    if len(kind.bounds) > 1:
        try:  # one value per bound (a tuple, a list, or an array of that length)
            bounds = tuple(threshold)
        except TypeError:  # a scalar: reported below with the bounds expected
            pass
    if len(bounds) != len(kind.bounds):
        raise ValueError(f"soft_cut: threshold: op {op!r} expected {len(kind.bounds)} values "
                         f"({', '.join(kind.bounds)}), found {len(bounds)}")
    return kind, [jnp.asarray(b, dtype=jnp.float64) for b in bounds]
