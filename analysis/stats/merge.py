"""Exact merging of moment states across chunks: pure JAX, so derivatives come from JAX.

A chunk's states are centred sums ``Moments(W, center, dmean, M2, M3, M4)`` and
``CoMoments(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` (:mod:`analysis.stats._core`).
Merging two chunks is a rational function of both states (Pebay 2008, Chan et al.
1979); :func:`merge` applies it to every state of two pytrees of the same structure
and adds plain sums. It is ordinary JAX code, so ``jax.jit``, ``jax.jacfwd`` and
``jax.hessian`` go through it, and :class:`analysis.stats.Derived` gets the merged
Jacobian and Hessian by differentiating the merge through the states' Taylor
expansion (:mod:`analysis.stats.derive`).

Why JAX and not the former hand-written numpy ``Dual`` class (value, gradient and
Hessian carried through ``+ - * /``): measured (both versions side by side), they are
equally exact. On 100 chunks of ``1e6 + N(0, 1)`` (tests/stats/test_merge.py), merged by a
left fold or a balanced tree, var / skew / kurtosis differ from a float64 corrected
two-pass computation on the concatenation by 0 / 1.4e-14 / 7e-14 relative with
``Dual`` and with this merge (eager or jitted) alike. With derivatives (30 such
chunks, weights soft-cut by two parameters, order 2), every merged state's value,
Jacobian and Hessian differs from the whole-sample one by at most 2.2e-15 of its
largest entry through :class:`~analysis.stats.Derived` and 2.4e-15 through ``Dual``.
A merge of two order-2 states costs ~0.45 ms (jitted) against ~0.95 ms. At equal
exactness the JAX version is the simpler: one formula and no second arithmetic to
maintain, and JAX is the only way derivatives are carried in the package.

The means are split as ``center + dmean`` (see :class:`~analysis.stats.Moments`):
``cb - ca`` is a difference of constants (exact when they are close) and the small
``db - da`` carries the derivatives, so ``delta = mu_b - mu_a`` keeps its digits.
An empty side (``W = 0``) leaves the other side unchanged, bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from analysis.stats._core import CoMoments, Moments
from analysis.stats.histogram import Histogram

__all__ = ["is_state", "merge", "merge_comoments", "merge_moments"]


def is_state(x: Any) -> bool:
    """True for a mergeable state (:class:`Moments` or :class:`CoMoments`)."""
    return isinstance(x, (Moments, CoMoments))


def _reciprocal(n: Any) -> Any:
    """``1 / n``, and 0 (with zero derivatives) where ``n == 0``: an empty merge."""
    ok = n != 0
    return jnp.where(ok, 1.0 / jnp.where(ok, n, 1.0), 0.0)


def _merge_mean(na, ca, da, nb, cb, db, inv_n):
    """Merged mean as ``(center, dmean)`` plus ``delta = mu_b - mu_a``.

    The merged centre is that of the heavier side, so ``dmean`` stays small.
    """
    ca, cb = jax.lax.stop_gradient(ca), jax.lax.stop_gradient(cb)
    delta = (cb - ca) + (db - da)
    keep_a = jnp.abs(na) >= jnp.abs(nb)
    center = jnp.where(keep_a, ca, cb)
    dmean = jnp.where(keep_a, da + delta * nb * inv_n, db - delta * na * inv_n)
    return center, dmean, delta


def merge_moments(a: Any, b: Any) -> Moments:
    """Merge two ``Moments(W, center, dmean, M2, M3, M4)`` states (Pebay's pairwise formulas).

    Tuples in that order are accepted too. float64 JAX arrays of any (equal) shape.
    """
    na, ca, da, m2a, m3a, m4a = a
    nb, cb, db, m2b, m3b, m4b = b
    n = na + nb
    inv_n = _reciprocal(n)
    center, dmean, delta = _merge_mean(na, ca, da, nb, cb, db, inv_n)
    nanb = na * nb
    m2 = m2a + m2b + delta * delta * nanb * inv_n
    m3 = (
        m3a
        + m3b
        + delta**3 * nanb * (na - nb) * inv_n * inv_n
        + 3.0 * delta * (na * m2b - nb * m2a) * inv_n
    )
    m4 = (
        m4a
        + m4b
        + delta**4 * nanb * (na * na - nanb + nb * nb) * inv_n**3
        + 6.0 * delta * delta * (na * na * m2b + nb * nb * m2a) * inv_n * inv_n
        + 4.0 * delta * (na * m3b - nb * m3a) * inv_n
    )
    return Moments(n, center, dmean, m2, m3, m4)


def merge_comoments(a: Any, b: Any) -> CoMoments:
    """Merge two ``CoMoments(W, cx, dmx, cy, dmy, Cxx, Cyy, Cxy)`` states."""
    na, cxa, dxa, cya, dya, cxxa, cyya, cxya = a
    nb, cxb, dxb, cyb, dyb, cxxb, cyyb, cxyb = b
    n = na + nb
    inv_n = _reciprocal(n)
    cx, dmx, deltax = _merge_mean(na, cxa, dxa, nb, cxb, dxb, inv_n)
    cy, dmy, deltay = _merge_mean(na, cya, dya, nb, cyb, dyb, inv_n)
    f = na * nb * inv_n
    return CoMoments(
        n,
        cx,
        dmx,
        cy,
        dmy,
        cxxa + cxxb + deltax * deltax * f,
        cyya + cyyb + deltay * deltay * f,
        cxya + cxyb + deltax * deltay * f,
    )


def _edges_difference(a: Any, b: Any) -> str | None:
    """Where two pytrees hold histograms with different edges (the static part of a
    :class:`Histogram`), or None."""

    def hist_or_state(x: Any) -> bool:
        return is_state(x) or isinstance(x, Histogram)

    pa, _ = jax.tree_util.tree_flatten_with_path(a, is_leaf=hist_or_state)
    pb = {
        jax.tree_util.keystr(p): v
        for p, v in jax.tree_util.tree_flatten_with_path(b, is_leaf=hist_or_state)[0]
    }
    for path, la in pa:
        lb = pb.get(jax.tree_util.keystr(path))
        if isinstance(la, Histogram) and isinstance(lb, Histogram):
            if tuple(la.edges) != tuple(lb.edges):
                return (
                    f"at {jax.tree_util.keystr(path) or 'the root'}: histogram edges "
                    f"{la.edges.tolist()} vs {lb.edges.tolist()}"
                )
    return None


def _type_name(x: Any) -> str:
    """A leaf's type as users know it (``Array``, not JAX's ``ArrayImpl``)."""
    return "Array" if isinstance(x, jax.Array) else type(x).__name__


def describe_difference(a: Any, b: Any) -> str | None:
    """Where two pytrees of states and sums differ (structure or a leaf's shape), or None."""
    pa, ta = jax.tree_util.tree_flatten_with_path(a, is_leaf=is_state)
    pb, tb = jax.tree_util.tree_flatten_with_path(b, is_leaf=is_state)
    if ta != tb:  # type: ignore[operator]  # PyTreeDef compares by structure
        keys_a = {jax.tree_util.keystr(p) for p, _ in pa}
        keys_b = {jax.tree_util.keystr(p) for p, _ in pb}
        only_a, only_b = sorted(keys_a - keys_b), sorted(keys_b - keys_a)
        edges = _edges_difference(a, b)
        if edges is not None:
            return edges
        if only_a or only_b:
            return (
                f"only in the first: {only_a or 'nothing'}; "
                f"only in the second: {only_b or 'nothing'}"
            )
        for (path, la), (_, lb) in zip(pa, pb, strict=True):
            if (is_state(la) or is_state(lb)) and type(la) is not type(lb):
                return (
                    f"at {jax.tree_util.keystr(path) or 'the root'}: {_type_name(la)} "
                    f"vs {_type_name(lb)}"
                )
        return f"tree structures {ta} vs {tb}"
    for (path, la), (_, lb) in zip(pa, pb, strict=True):
        if (is_state(la) or is_state(lb)) and type(la) is not type(lb):
            return f"at {jax.tree_util.keystr(path)}: {_type_name(la)} vs {_type_name(lb)}"
        sa = jnp.shape(la[0] if is_state(la) else la)
        sb = jnp.shape(lb[0] if is_state(lb) else lb)
        if sa != sb:
            return f"at {jax.tree_util.keystr(path) or 'the root'}: shape {sa} vs {sb}"
    return None


def merge(a: Any, b: Any) -> Any:
    """Exact merge of two pytrees of the same structure: states merge, plain sums add.

    Leaves are :class:`Moments` / :class:`CoMoments` states (merged by
    :func:`merge_moments` / :func:`merge_comoments`) or arrays of sums (added;
    a :class:`~analysis.stats.Histogram` is two such sums with its edges as structure);
    containers are dicts, lists and tuples. Pure JAX (jit- and grad-friendly), float64.
    Associative and commutative up to rounding; a state with ``W = 0`` (an empty
    chunk) is a neutral element. Different structures or leaf shapes raise
    ``ValueError`` naming where they differ (nothing is broadcast).

    Parameters
    ----------
    a, b : pytree
        Two pytrees of the same structure and leaf shapes, with :class:`Moments`,
        :class:`CoMoments` or arrays of sums (float64) as leaves.

    Returns
    -------
    pytree
        ``a``'s structure: merged states and added sums (float64 JAX arrays).
    """
    diff = describe_difference(a, b)
    if diff is not None:
        raise ValueError(f"stats.merge: the two state pytrees differ {diff}")

    def one(x: Any, y: Any) -> Any:
        if isinstance(x, Moments):
            return merge_moments(x, y)
        if isinstance(x, CoMoments):
            return merge_comoments(x, y)
        return x + y

    return jax.tree_util.tree_map(one, a, b, is_leaf=is_state)
