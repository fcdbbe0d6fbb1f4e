"""How a statistic of :mod:`analysis.stats.api` is computed: the path for its input.

Flat numpy/JAX arrays and :class:`~analysis.stats.Jagged` go straight to the kernels of
:mod:`analysis.stats._kernels`; typetracers (dask-awkward) get awkward's result types;
awkward Arrays are taken apart by :mod:`analysis.stats._fast` (flat or one level of
lists) or :mod:`analysis.stats._structure` (any depth) and the result rebuilt there;
a :class:`~analysis.stats.Moments` or :class:`~analysis.stats.CoMoments` state (already
reduced) is finished by one compiled program per statistic. The conventions are in
:mod:`analysis.stats.api`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from analysis.stats import _core, _fast, _statefns
from analysis.stats._inputs import _flat_path, _Options, _prepare, _Prepared, unmasked
from analysis.stats._kernels import _kernel, _with_keepdims
from analysis.stats._statefns import LinearFit
from analysis.stats._structure import _awkward_types, _finish, _structure, _typetracer

__all__: list[str] = []  # private plumbing of analysis.stats.api


def _compute(
    stat: str,
    x: Any,
    y: Any,
    weight: Any,
    axis: Any,
    opts: _Options,
    *,
    ddof: float = 0.0,
    order: Any = None,
) -> Any:
    x, y, weight = unmasked(x, y, weight)
    if _flat_path(x, y, weight, axis):
        p = _prepare(x, y, weight, axis, stat)
        # JAX arrays for array inputs, whichever namespace computed them
        out = jax.tree_util.tree_map(jnp.asarray, _kernel(stat, p, ddof, order))
        out = LinearFit(**out) if stat == "linear_fit" else out
        return _with_keepdims(out, p, opts.keepdims)
    if _typetracer(x, y, weight):
        return _awkward_types(stat, x, y, weight, axis, opts, ddof, order)
    st = _fast.structure(x, y, weight, axis, opts.keepdims, opts.mask_identity)
    if st is None:
        st = _structure(x, y, weight, axis, opts.keepdims, opts.mask_identity, stat)
    return _finish(stat, _kernel(stat, st.prepared, ddof, order), st, opts, (x, y, weight))


def _state_only(stat: str, weight: Any, axis: Any) -> None:
    if weight is not None or axis is not None:
        raise TypeError(f"{stat}: x is a state (already reduced); weight and axis must be None")


@functools.cache
def _state_program(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A statistic of a state as one compiled program (per statistic function). Called
    eagerly (a loss of merged states under jax.grad), each jnp operation of it would
    compile, or load from the persistent cache, a program of its own once per process,
    ~7 ms each; jitted, its known part and its transpose are two programs."""
    return jax.jit(fn)


def _run1(stat: str, x: Any, weight: Any, axis: Any, opts: _Options, ddof: float = 0.0) -> Any:
    if isinstance(x, _core.Moments):
        _state_only(stat, weight, axis)
        program = _state_program(_statefns.UNIVARIATE[stat])
        if stat in ("var", "std"):
            return program(x, ddof)
        return program(x)
    return _compute(stat, x, None, weight, axis, opts, ddof=ddof)


def _run2(stat: str, x: Any, y: Any, weight: Any, axis: Any, opts: _Options) -> Any:
    if isinstance(x, _core.CoMoments):
        if y is not None:
            raise TypeError(f"{stat}: x is a CoMoments state; pass no y")
        _state_only(stat, weight, axis)
        out = _state_program(_statefns.BIVARIATE[stat])(x)
        return LinearFit(**out) if isinstance(out, dict) else out  # dict: linear_fit
    if y is None:
        raise TypeError(f"{stat}: expected y (data with the structure of x) or a CoMoments state")
    return _compute(stat, x, y, weight, axis, opts)


def _flat_prepared(x: Any, y: Any, weight: Any, func: str) -> _Prepared:
    """float64 values and weights of all elements (missing ones with zero weight)."""
    x, y, weight = unmasked(x, y, weight)
    if _flat_path(x, y, weight, None):
        return _prepare(x, y, weight, None, func)
    return _structure(x, y, weight, None, False, False, func).prepared


