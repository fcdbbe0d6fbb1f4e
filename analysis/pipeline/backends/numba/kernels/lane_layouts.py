"""The walk's layouts of variants in :mod:`analysis.select.lanes.arith`' lanes: one
variant or a pair in :data:`~analysis.select.lanes.arith.LANES` lanes, two pairs
in two pages ``(2, LANES)`` (the histogram walk's four variants,
:mod:`~analysis.pipeline.backends.numba.kernels._numba_hist`), or values alone (no
lanes: the walk's pattern tangents ``0.0``, each lane vector a number); each helper
specialised at compile time on the layout of the arrays it is given.
"""

from __future__ import annotations

from numba import types

from analysis.select.lanes.arith import LANES, _lanes, _pages
from analysis.select.lanes.policy import specialise_on

__all__ = ["coefficients", "first_page", "lane_shape", "no_tangents", "summed", "table_pair",
           "unit"]


def _paged(d) -> bool:
    """Whether the numba type ``d`` of a walk's pattern tangents (``pd_all``) is the paged
    layout ``(N, P, 2, LANES)`` (two pairs), else ``(N, P, LANES)`` (one variant or a pair)."""
    return isinstance(d, types.Array) and d.ndim == 4


@specialise_on("d", (_paged, lambda d: (2, LANES)), (_lanes, lambda d: (LANES,)), lambda d: ())
def lane_shape(d):
    """The shape of one lane vector of a walk whose pattern tangents are ``d``: ``(LANES,)``,
    ``(2, LANES)`` for the paged layout (:func:`_paged`), ``()`` for values alone (``d`` a
    number); constants at compile time."""


def _four_coefficients(pv_all, d, g, p):
    a = (pv_all[g, p, 0], pv_all[g, p, 1], pv_all[g, p, 2], pv_all[g, p, 3])
    return a, a


@specialise_on("d", (_paged, _four_coefficients),
               lambda pv_all, d, g, p: (pv_all[g, p, 0], pv_all[g, p, 1]))
def coefficients(pv_all, d, g, p):
    """Object ``g``'s pattern ``p`` probabilities as the walk's steps take them (``a``,
    ``a_hi`` of :func:`mul_add`): ``(pv_all[g, p, 0], pv_all[g, p, 1])``, or for the
    paged layout of ``d`` (:func:`_paged`) the four variants' ``pv_all[g, p]`` (twice)."""


def _unit_pages(X, k, h):
    for q in range(X.shape[1]):
        X[k, q] = 0.0
        X[k, q, 0] = 1.0
        X[k, q, h] = 1.0


def _unit(X, k, h):
    X[k] = 0.0
    X[k, 0] = 1.0
    X[k, h] = 1.0


def _unit_value(X, k, h):
    X[k] = 1.0


@specialise_on("X", (lambda t: t.ndim == 3, _unit_pages), (lambda t: t.ndim == 2, _unit),
               _unit_value)
def unit(X, k, h):
    """The lane vector ``X[k]`` set to the number 1 in its value lanes (``0`` and ``h`` of
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


def _table_value(G, k, f, df, h):
    G[k] = f


@specialise_on("G", (lambda t: t.ndim == 3, _table_pages), (lambda t: t.ndim == 2, _table),
               _table_value)
def table_pair(G, k, f, df, h):
    """``G[k]``: the pass table's value ``f`` in the value lanes (``0`` and ``h`` of each
    page), its tangents ``df`` (``LANES`` lanes, a pair's layout) in the others; values
    alone: ``f``."""


@specialise_on("x", (_pages, lambda x: x[0]), lambda x: x)
def first_page(x):
    """``x`` (one page of lanes, or a number), or its first page."""


def _zero_tail(d):
    for r in range(1, LANES):
        if d[r] != 0.0:
            return False
    return True


@specialise_on("d", (_lanes, _zero_tail), lambda d: True)
def no_tangents(d):
    """Whether the lane vector ``d`` (one page) is zero in every tangent lane (true for a
    number: none)."""


@specialise_on("inner", (_lanes, lambda inner, v: inner), lambda inner, v: v)
def summed(inner, v):
    """A sum of :func:`analysis.select.lanes.steps.weight` as a lane vector: ``inner``
    (which it wrote), or its returned value ``v`` (values alone: ``inner`` unused)."""
