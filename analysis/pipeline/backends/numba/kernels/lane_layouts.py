"""The walk's layouts of variants in :mod:`analysis.pipeline.backends.numba.kernels.lanes`' lanes: one
variant or a pair in :data:`~analysis.pipeline.backends.numba.kernels.lanes.LANES` lanes, or two pairs
in two pages ``(2, LANES)`` (the histogram walk's four variants,
:mod:`~analysis.pipeline.backends.numba.kernels._numba_hist`); each helper specialised at compile time on
the layout of the arrays it is given.
"""

from __future__ import annotations

from numba import types

from analysis.pipeline.backends.numba.kernels._jit import specialise
from analysis.pipeline.backends.numba.kernels.lanes import LANES, _pages

__all__ = ["any_lane", "coefficients", "first_page", "lane_shape", "table_pair",
           "unit"]


# --- the walk's layouts of variants: one or a pair in LANES lanes, or two pairs in pages --


def _paged(d) -> bool:
    """Whether the numba type ``d`` of a walk's pattern tangents (``pd_all``) is the paged
    layout ``(N, P, 2, LANES)`` (two pairs), else ``(N, P, LANES)`` (one variant or a pair)."""
    return isinstance(d, types.Array) and d.ndim == 4


def lane_shape(d):
    """The shape of one lane vector of a walk whose pattern tangents are ``d``: ``(LANES,)``,
    or ``(2, LANES)`` for the paged layout (:func:`_paged`); constants at compile time."""
    raise NotImplementedError("compiled only (numba)")


@specialise(lane_shape)
def _lane_shape(d):
    if _paged(d):
        def pages(d):
            return (2, LANES)
        return pages

    def lanes(d):
        return (LANES,)
    return lanes


def coefficients(pv_all, d, g, p):
    """Object ``g``'s pattern ``p`` probabilities as the walk's steps take them (``a``,
    ``a_hi`` of :func:`mul_add`): ``(pv_all[g, p, 0], pv_all[g, p, 1])``, or for the
    paged layout of ``d`` (:func:`_paged`) the four variants' ``pv_all[g, p]`` (twice)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(coefficients)
def _coefficients(pv_all, d, g, p):
    if _paged(d):
        def pages(pv_all, d, g, p):
            a = (pv_all[g, p, 0], pv_all[g, p, 1], pv_all[g, p, 2], pv_all[g, p, 3])
            return a, a
        return pages

    def pair(pv_all, d, g, p):
        return pv_all[g, p, 0], pv_all[g, p, 1]
    return pair


def unit(x, h):
    """The lane vector ``x`` set to the number 1 in its value lanes (``0`` and ``h`` of
    each page), its tangents 0."""
    raise NotImplementedError("compiled only (numba)")


@specialise(unit)
def _unit(x, h):
    if _pages(x):
        def pages(x, h):
            for q in range(x.shape[0]):
                x[q] = 0.0
                x[q, 0] = 1.0
                x[q, h] = 1.0
        return pages

    def lanes(x, h):
        x[:] = 0.0
        x[0] = 1.0
        x[h] = 1.0
    return lanes


def table_pair(G, k, f, df, h):
    """``G[k]``: the pass table's value ``f`` in the value lanes (``0`` and ``h`` of each
    page), its tangents ``df`` (``LANES`` lanes, a pair's layout) in the others."""
    raise NotImplementedError("compiled only (numba)")


@specialise(table_pair)
def _table_pair(G, k, f, df, h):
    if G.ndim == 3:
        def pages(G, k, f, df, h):
            for q in range(G.shape[1]):
                for r in range(LANES):
                    G[k, q, r] = df[r]
                G[k, q, 0] = f
                G[k, q, h] = f
        return pages

    def lanes(G, k, f, df, h):
        for r in range(LANES):
            G[k, r] = df[r]
        G[k, 0] = f
        G[k, h] = f
    return lanes


def first_page(x):
    """``x`` (one page of lanes), or its first page."""
    raise NotImplementedError("compiled only (numba)")


@specialise(first_page)
def _first_page(x):
    if _pages(x):
        def pages(x):
            return x[0]
        return pages

    def lanes(x):
        return x
    return lanes


def any_lane(x):
    """Whether any lane of the lane vector ``x`` (every page) is nonzero (or NaN)."""
    raise NotImplementedError("compiled only (numba)")


@specialise(any_lane)
def _any_lane(x):
    if _pages(x):
        def pages(x):
            for q in range(x.shape[0]):
                for r in range(LANES):
                    if x[q, r] != 0.0:
                        return True
            return False
        return pages

    def lanes(x):
        for r in range(LANES):
            if x[r] != 0.0:
                return True
        return False
    return lanes
