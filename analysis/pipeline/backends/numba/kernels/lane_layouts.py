"""The walk's layouts of variants in :mod:`analysis.select.lanes.arith`' lanes: one
variant or a pair in :data:`~analysis.select.lanes.arith.LANES` lanes, or two pairs
in two pages ``(2, LANES)`` (the histogram walk's four variants,
:mod:`~analysis.pipeline.backends.numba.kernels._numba_hist`); each helper specialised at compile time on
the layout of the arrays it is given.
"""

from __future__ import annotations

from numba import types

from analysis.select.lanes.arith import LANES, _pages
from analysis.select.lanes.policy import specialise_on

__all__ = ["coefficients", "first_page", "lane_shape", "table_pair", "unit"]


def _paged(d) -> bool:
    """Whether the numba type ``d`` of a walk's pattern tangents (``pd_all``) is the paged
    layout ``(N, P, 2, LANES)`` (two pairs), else ``(N, P, LANES)`` (one variant or a pair)."""
    return isinstance(d, types.Array) and d.ndim == 4


@specialise_on("d", (_paged, lambda d: (2, LANES)), lambda d: (LANES,))
def lane_shape(d):
    """The shape of one lane vector of a walk whose pattern tangents are ``d``: ``(LANES,)``,
    or ``(2, LANES)`` for the paged layout (:func:`_paged`); constants at compile time."""


def _four_coefficients(pv_all, d, g, p):
    a = (pv_all[g, p, 0], pv_all[g, p, 1], pv_all[g, p, 2], pv_all[g, p, 3])
    return a, a


@specialise_on("d", (_paged, _four_coefficients),
               lambda pv_all, d, g, p: (pv_all[g, p, 0], pv_all[g, p, 1]))
def coefficients(pv_all, d, g, p):
    """Object ``g``'s pattern ``p`` probabilities as the walk's steps take them (``a``,
    ``a_hi`` of :func:`mul_add`): ``(pv_all[g, p, 0], pv_all[g, p, 1])``, or for the
    paged layout of ``d`` (:func:`_paged`) the four variants' ``pv_all[g, p]`` (twice)."""


def _unit_pages(x, h):
    for q in range(x.shape[0]):
        x[q] = 0.0
        x[q, 0] = 1.0
        x[q, h] = 1.0


def _unit(x, h):
    x[:] = 0.0
    x[0] = 1.0
    x[h] = 1.0


@specialise_on("x", (_pages, _unit_pages), _unit)
def unit(x, h):
    """The lane vector ``x`` set to the number 1 in its value lanes (``0`` and ``h`` of
    each page), its tangents 0."""


def _table_pages(G, k, f, df, h):
    for q in range(G.shape[1]):
        for r in range(LANES):
            G[k, q, r] = df[r]
        G[k, q, 0] = f
        G[k, q, h] = f


def _table(G, k, f, df, h):
    for r in range(LANES):
        G[k, r] = df[r]
    G[k, 0] = f
    G[k, h] = f


@specialise_on("G", (lambda t: t.ndim == 3, _table_pages), _table)
def table_pair(G, k, f, df, h):
    """``G[k]``: the pass table's value ``f`` in the value lanes (``0`` and ``h`` of each
    page), its tangents ``df`` (``LANES`` lanes, a pair's layout) in the others."""


@specialise_on("x", (_pages, lambda x: x[0]), lambda x: x)
def first_page(x):
    """``x`` (one page of lanes), or its first page."""
