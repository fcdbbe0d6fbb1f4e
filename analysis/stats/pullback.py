"""Reverse mode across chunks: one cotangent per chunk, exact for centred-moment merges.

For a scalar loss ``L(S)`` of the merged states ``S = merge(s_1, ..., s_C)`` (each
chunk's states ``s_c(theta)``), the gradient ``dL/dtheta`` needs only the cotangent
``S_bar = dL/dS`` of the merged states and one vector-Jacobian product per chunk.
The Pebay merge is not linear in the chunks' states, but it is linear in each
chunk's *power sums about a fixed point*. Take ``a`` = the merged mean (a constant:
the value from the first pass, no derivative). For a :class:`~analysis.stats.Moments`
state the power sums about ``a`` add over chunks::

    T_r = sum_c T_{c,r},   T_{c,r} = sum_{i in c} w_i (x_i - a)^r        (r = 0..4)
        = sum_k C(r, k) M_{c,k} delta_c^(r - k),   delta_c = mu_c - a

with ``M_{c,0} = W_c``, ``M_{c,1} = 0`` (so ``T_0 = W``, ``T_1 = W delta``,
``T_2 = M2 + W delta^2``, ``T_3 = M3 + 3 delta M2 + W delta^3``,
``T_4 = M4 + 4 delta M3 + 6 delta^2 M2 + W delta^4``), and the merged state is a fixed
function of the totals, ``S = Phi(T)``: ``W = T_0``, ``mu = a + T_1 / T_0``,
``M_r = sum_i w_i (x_i - mu)^r`` (the binomial shift back from ``a`` to ``mu``,
e.g. ``M2 = T_2 - T_1^2 / T_0``). Both identities hold for every ``theta`` (``a`` is a
constant), so ``S(theta) = Phi(sum_c T_c(theta))`` and, by the chain rule,

    dL/dtheta = sum_c  d/dtheta < T_bar, T_c(theta) >,   T_bar = (dPhi/dT)^T S_bar

with ``dPhi/dT`` taken at ``T = T(S, a)`` (the merged state's own power sums about
``a``; at ``a = mu``, ``T_1 = 0``, which keeps the shift well conditioned). ``T_bar``
is computed once from the merged state; each chunk differentiates the scalar
``<T_bar, T_c(theta)>``, a function of its own inputs and the constants ``a``,
``T_bar``: one reverse-mode pass, O(parameters) memory, independent of the other
chunks. Exact (to rounding) for any chunking, merge order and executor: the merged
gradient is a plain sum of the chunks'. ``CoMoments`` work the same way with
``T = (W, sum w dx, sum w dy, sum w dx^2, sum w dy^2, sum w dx dy)`` about
``(a_x, a_y)``; a plain sum is its own ``T`` (``T_bar = S_bar``). The centres
(``center`` fields) are constants, as in forward mode (their cotangent is unused).

Non-finite values, one rule per kind of leaf (undefined values stay NaN in the first
pass either way):

- a plain sum (yields, histogram bins) is a sum over events, so its share is too:
  ``<S_bar, s_c> = sum_e <S_bar, s_e>``. A bin that is NaN because one event's entry is
  NaN (a NaN reaching a soft cut) keeps its cotangent, which reaches every event's
  addend (:func:`_per_event`): each event adds its own share, NaN in the parameters
  its NaN reaches and nothing elsewhere, whatever chunk it lands in (the numba
  pass's rule: :mod:`analysis.pipeline.backends.numba._fastrevhist`). Dropping the
  chunk's NaN sum instead would drop every other event of that chunk with it.
- a state is not linear in its entries (its mean): one NaN entry makes the chunk's
  state NaN as a whole, and the sweep through it meets the NaN in every entry. So the
  kernel gives the pulled sum the state of the finite entries
  (:func:`finite_entries`: each non-finite entry counts 0, its tangents passed
  through), whose power sums' partials are each entry's own: the NaN entry adds NaN
  to what it reaches, the others their shares, as for a sum (the JAX pipeline's
  observables, an event sum's entry being an event's weight and ``E[X^r 1_pass]``:
  :func:`analysis.pipeline.backends.jax.setkernel.chunk_states`; a user's function
  under :func:`analysis.stats.derive`: its second pass pulls the plain states of a
  chunk whose values are all finite (every entry is then finite: the same states, bit
  for bit), and the gradient of a chunk with a non-finite value comes from one more
  sweep, the function traced within :func:`pulled_states`, where
  ``stats.moments``/``stats.comoments`` form their states from :func:`pulled_entries`;
  the values are the plain ones, NaN: :func:`analysis.stats._compiled._chunk_pullback`).
  A state's entries that are still non-finite (e.g. the NaN ``M3``/``M4`` of a
  second-order-only state) are constants 0 in the pulled sum (:func:`_finite`), so their
  zero cotangents never meet a NaN (``0 * NaN``); an undefined mean (centre or ``dmean``
  non-finite: the merged state of a NaN chunk, whose centre the merge may keep finite
  or not depending on the chunks) counts 0 as a whole, so ``T_bar`` does not depend on
  the chunking.

Everything here is pure JAX on pytrees of states (numpy in, JAX out), except
:func:`prune` (numpy, on the host).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from analysis.stats._core import CoMoments, Moments
from analysis.stats.merge import is_state

__all__ = [
    "finite_entries", "from_sums", "prune", "pulled_entries", "pulled_states", "pullback_payload",
    "pulled_sum", "sums_about",
]

_ORDER = 4  # Moments carry M2..M4


def _finite(x: Any) -> Any:
    """``x`` where its value is finite, else a constant 0 (no gradient, no NaN)."""
    x = jnp.asarray(x, dtype=jnp.float64)
    ok = jnp.isfinite(jax.lax.stop_gradient(x))
    return jnp.where(ok, x, 0.0)


@jax.custom_jvp
def _per_event(x: Any) -> Any:
    """A plain sum ``x`` where its value is finite, else 0, its tangent (so its
    cotangent) passed through: the pulled sum's value stays finite and the cotangent of
    a NaN bin still reaches each event's addend (module docstring), where the NaN ones
    give NaN in what they reach, the others their shares."""
    return jnp.where(jnp.isfinite(x), x, 0.0)


@_per_event.defjvp
def _per_event_jvp(primals: tuple[Any], tangents: tuple[Any]) -> tuple[Any, Any]:
    (x,), (dx,) = primals, tangents
    return _per_event(x), dx


@jax.custom_jvp
def finite_entries(w: Any, *values: Any) -> tuple[Any, ...]:
    """Entries (weights ``w``, their ``values``) for a pulled state: an entry with a
    non-finite weight or value counts 0 (weight and values), so the state is that of
    the finite entries and its power sums' partials are each entry's own; the tangents
    pass through, ``w``'s times NaN where a value is non-finite (``dL/dw = sum_r
    T_bar_r (x - a)^r``), the values' where any part of the entry is (``dL/dx`` is
    ``w`` times a polynomial in the values): the numba pass's per-entry cotangents.
    Finite entries: the same values and tangents.
    See the module docstring (a state's non-finite values).

    Parameters
    ----------
    w : array
        The entries' weights.
    *values : array
        Their values (``x``, and ``y`` for ``CoMoments``), shaped as ``w``.

    Returns
    -------
    tuple
        ``(w, *values)`` with the non-finite entries 0.
    """
    ok = jnp.isfinite(w)
    for v in values:
        ok = ok & jnp.isfinite(v)
    return tuple(jnp.where(ok, a, 0.0) for a in (w, *values))


def _finite_entries_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]
                        ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    out = finite_entries(*primals)
    fin = [jnp.isfinite(a) for a in primals]
    values_ok = jnp.ones_like(fin[0])
    for f in fin[1:]:
        values_ok = values_ok & f
    # dL/dw is NaN where a value is; dL/dx (w times a polynomial in the values) where
    # any part of the entry is
    masks = [values_ok] + [values_ok & fin[0]] * (len(fin) - 1)
    scaled = [t if isinstance(t, SymbolicZero)  # data (no tangent): none, not 0 * NaN
              else t * jnp.where(ok, 1.0, jnp.nan) for t, ok in zip(tangents, masks, strict=True)]
    return out, tuple(scaled)


finite_entries.defjvp(_finite_entries_jvp, symbolic_zeros=True)


# True while a chunk function is traced for the guarded pulled sum of a chunk with a
# non-finite value (:func:`pulled_states`): a context of that trace, not an option (the
# user's function calls stats.moments, which no argument of derive reaches; the same
# function's values and plain pull trace without it)
_PULLED: contextvars.ContextVar[bool] = contextvars.ContextVar("pulled_states", default=False)


@contextlib.contextmanager
def pulled_states() -> Iterator[None]:
    """Within: the states that :func:`pulled_entries` guards are those of their finite
    entries (for the pulled sum of a chunk with a non-finite value only; the chunk's
    values and the plain pull are traced without it)."""
    token = _PULLED.set(True)
    try:
        yield
    finally:
        _PULLED.reset(token)


def pulled_entries(w: Any, *values: Any) -> tuple[Any, ...]:
    """The entries a state is formed from: :func:`finite_entries` within
    :func:`pulled_states`, else unchanged (``stats.moments``/``stats.comoments`` in a
    user's function under :func:`analysis.stats.derive`'s second reverse pass, in the
    sweep of a chunk with a non-finite value).

    Parameters
    ----------
    w : array
        The entries' weights.
    *values : array
        Their values, shaped as ``w``.

    Returns
    -------
    tuple
        ``(w, *values)``.
    """
    return finite_entries(w, *values) if _PULLED.get() else (w, *values)


def _div(num: Any, den: Any) -> Any:
    ok = den != 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def _shift(m: list[Any], delta: Any) -> list[Any]:
    """``sum_k C(r, k) m_k delta^(r - k)`` for r = 0..len(m) - 1 (``m`` about one point,
    the result about a point ``delta`` below it)."""
    out = []
    for r in range(len(m)):
        term = jnp.zeros_like(m[0])
        for k in range(r + 1):
            term = term + math.comb(r, k) * m[k] * delta ** (r - k)
        out.append(term)
    return out


def sums_about(state: Any, a: Any) -> tuple[Any, ...]:
    """Power sums of a state about the constant point ``a`` (a scalar per entry, or
    ``(a_x, a_y)`` for ``CoMoments``): the quantities that add over chunks.

    ``Moments``: ``(T_0, ..., T_4)``, ``T_r = sum w (x - a)^r``; ``CoMoments``:
    ``(W, Sx, Sy, Sxx, Syy, Sxy)`` of the deviations from ``(a_x, a_y)``. Non-finite
    entries count as 0 (see the module docstring)."""
    if isinstance(state, Moments):
        w, _, _, m2, m3, m4 = (_finite(v) for v in state)
        # an undefined mean (centre or dmean non-finite; a merge may keep either finite)
        # counts 0 as a whole, so the merged state's sums never depend on the chunking
        delta = _finite((jnp.asarray(state.center, dtype=jnp.float64) - a) + state.dmean)
        return tuple(_shift([w, jnp.zeros_like(w), m2, m3, m4], delta))
    if isinstance(state, CoMoments):
        w, _, _, _, _, cxx, cyy, cxy = (_finite(v) for v in state)
        ax, ay = a
        ex = _finite((jnp.asarray(state.center_x, dtype=jnp.float64) - ax) + state.dmean_x)
        ey = _finite((jnp.asarray(state.center_y, dtype=jnp.float64) - ay) + state.dmean_y)
        return (w, w * ex, w * ey, cxx + w * ex * ex, cyy + w * ey * ey, cxy + w * ex * ey)
    raise TypeError(f"sums_about: expected Moments or CoMoments, found {type(state).__name__}")


def from_sums(sums: tuple[Any, ...], a: Any, like: Any) -> Any:
    """The state with power sums ``sums`` about ``a`` (inverse of :func:`sums_about`);
    the centres are those of ``like`` (constants)."""
    if isinstance(like, Moments):
        t0, t1, t2, t3, t4 = sums
        r = _div(t1, t0)  # mu - a
        # about mu = a + r: the binomial shift of the sums about a by -r
        _, _, m2, m3, m4 = _shift([t0, t1, t2, t3, t4], -r)
        c = jnp.asarray(like.center, dtype=jnp.float64)
        return Moments(t0, c, (a - c) + r, m2, m3, m4)
    if isinstance(like, CoMoments):
        w, sx, sy, sxx, syy, sxy = sums
        ax, ay = a
        rx, ry = _div(sx, w), _div(sy, w)
        cx = jnp.asarray(like.center_x, dtype=jnp.float64)
        cy = jnp.asarray(like.center_y, dtype=jnp.float64)
        return CoMoments(
            w,
            cx,
            (ax - cx) + rx,
            cy,
            (ay - cy) + ry,
            sxx - rx * sx,
            syy - ry * sy,
            sxy - rx * sy,
        )
    raise TypeError(f"from_sums: expected Moments or CoMoments, found {type(like).__name__}")


def _anchor(state: Any) -> Any:
    """The merged mean (0 where undefined): the fixed point ``a``."""

    def mean(c: Any, d: Any) -> Any:
        mu = jnp.asarray(c, dtype=jnp.float64) + jnp.asarray(d, dtype=jnp.float64)
        return jnp.where(jnp.isfinite(mu), mu, 0.0)

    if isinstance(state, Moments):
        return mean(state.center, state.dmean)
    return (mean(state.center_x, state.dmean_x), mean(state.center_y, state.dmean_y))


def _sanitised(ct: Any) -> Any:
    return jax.tree_util.tree_map(lambda v: jnp.where(jnp.isfinite(v), v, 0.0), ct)


def pullback_payload(merged: Any, cotangent: Any) -> list[tuple[Any, Any]]:
    """Per leaf of the merged states (flattened with states as leaves): ``(a, T_bar)``
    for a state, ``(None, S_bar)`` for a sum. ``cotangent``: ``dL/dS``, the same pytree
    as ``merged`` (a state's cotangent is a state of arrays)."""
    leaves = jax.tree_util.tree_leaves(merged, is_leaf=is_state)
    cts = jax.tree_util.tree_leaves(cotangent, is_leaf=is_state)
    out: list[tuple[Any, Any]] = []
    for s, ct in zip(leaves, cts, strict=True):
        if not is_state(s):
            out.append((None, jnp.asarray(ct, dtype=jnp.float64)))
            continue
        a = _anchor(s)
        sums = sums_about(s, a)
        _, vjp = jax.vjp(lambda t, s=s, a=a: from_sums(t, a, s), sums)
        (t_bar,) = vjp(type(s)(*(jnp.asarray(v, dtype=jnp.float64) for v in ct)))
        out.append((a, _sanitised(t_bar)))
    return out


def prune(payload: list[tuple[Any, Any]]) -> list[tuple[Any, Any] | None]:
    """``payload`` (numpy, from :func:`pullback_payload`) with ``None`` for every leaf
    whose cotangent is exactly zero (a state the loss does not read, e.g. an
    observable's moments under a significance objective): :func:`pulled_sum` skips
    it, so the reverse sweep never runs through what computes that state (its value
    is still computed). Exact: such a leaf adds ``0 * dT_c/dtheta = 0`` (and never
    ``0 * inf``). The ``None`` positions are part of the pytree structure, so a jit
    compiles once per pattern."""
    def live(entry: tuple[Any, Any]) -> bool:
        return any(np.any(np.asarray(v) != 0) for v in jax.tree_util.tree_leaves(entry[1]))

    return [entry if live(entry) else None for entry in payload]


def pulled_sum(states: Any, payload: list[tuple[Any, Any] | None]) -> Any:
    """``sum over leaves of <T_bar, T_c>``: the scalar whose gradient with respect to the
    parameters is this chunk's share of ``dL/dtheta`` (``states``: the chunk's states,
    a function of the parameters; ``payload``: :func:`pullback_payload`, a ``None``
    entry (:func:`prune`) contributing nothing)."""
    leaves = jax.tree_util.tree_leaves(states, is_leaf=is_state)
    total = jnp.zeros((), dtype=jnp.float64)
    for s, entry in zip(leaves, payload, strict=True):
        if entry is None:  # a zero cotangent: no term, no reverse sweep through it
            continue
        a, t_bar = entry
        if a is None:
            total = total + jnp.sum(t_bar * _per_event(jnp.asarray(s, dtype=jnp.float64)))
            continue
        for tb, t in zip(t_bar, sums_about(s, a), strict=True):
            total = total + jnp.sum(tb * t)
    return total
