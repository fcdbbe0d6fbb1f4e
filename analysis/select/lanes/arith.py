"""The lane arithmetic of every numba loop (float64), and its primitives over lane vectors.

Every differentiated quantity is a vector of :data:`LANES` lanes: lane 0 the value, lanes
1..P its tangents (one per trainable parameter, padded with zeros), or two variants of 4
lanes side by side (:func:`lin_add2`). The product rule of ``a x`` with both in lanes is
``a_0 x + x_0 a``; every operation below is written out over the lanes with every load
before the first store (of each half of four: :func:`_both4`), so that LLVM's SLP
vectorizer (on where the loops are compiled: :func:`analysis.select.lanes.policy.compiled`)
packs it into a few vector operations (a loop over the lanes that stores as it goes is
left scalar: the output might alias the inputs). The same operations in the same order
as the loops written with a lane loop: the same floats.

The walk's steps (:mod:`analysis.select.lanes.steps`) are written once over *lane
vectors* with the primitives below, each specialised at compile time on its arguments'
types (:func:`analysis.select.lanes.policy.specialise_on`): a lane vector that is an
array of :data:`LANES` is a value with its tangents (the product rule, two variants side
by side with ``h = 4``); one that is a number is a value alone, and the primitive is the
same operation without the tangent terms (which add exact zeros to lane 0: the same
floats as lane 0 of the tangent variant). So one step's source gives the variant with
tangents and the one for values only; which one a kernel gets follows from the arrays
it passes (``(states, LANES)`` or ``(states,)``). Four lanes (:data:`QUAD`: one variant
of at most 3 tangents, half the work: the event sums' kernel,
``analysis.pipeline.backends.numba.kernels._numba_esum``, and own processors' kernels)
where the tangents are 4 numbers (a tuple, read once into registers) and a sum's
``inner`` a tuple of 4: the same operations on lanes 0-3 (rows of ``(states, >= 4)``
arrays, read by element: the ``row_`` primitives). A lane vector of two pages ``(2,
LANES)`` (the histogram walk's four variants: two pairs,
``analysis.pipeline.backends.numba.kernels._numba_hist``) is each page's pair
arithmetic, by element (a row view of a page in the walk's innermost loop would cost a
reference count each time); :func:`registers` and the walk's layout helpers
(``analysis.pipeline.backends.numba.kernels.lane_layouts``) are specialised on it the
same way, and a kernel's buffers and outputs on whether it has tangents
(:mod:`analysis.select.lanes.buffers`).
"""

from __future__ import annotations

from numba import types

from analysis.select.lanes.policy import inline, specialise, specialise_on

__all__ = [
    "LANES", "QUAD", "axpy", "clear_at", "dot_add", "dot_end", "dot_zero", "lin", "lin_add",
    "lin_add2", "mul_add", "registers", "row_both", "row_dot_add", "row_mul_add", "row_out",
    "vec_axpy", "vec_zero", "zero_at",
]

# Lanes of every differentiated quantity: lane 0 the value, lanes 1..P the tangents
# (padded with zeros): loops of a constant trip count, which LLVM vectorises. Plans with
# more than LANES - 1 trainable parameters run in blocks of them (numba/blocks.py).
LANES = 8
#: Lanes of the narrow variant: the value and up to ``QUAD - 1`` tangents.
QUAD = 4


@inline
def lin(out, a, x, b, y):
    """``out[r] = a x[r] + b y[r]`` over the lanes."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    out[0], out[1], out[2], out[3] = a * x0 + b * y0, a * x1 + b * y1, a * x2 + b * y2, a * x3 + b * y3
    out[4], out[5], out[6], out[7] = a * x4 + b * y4, a * x5 + b * y5, a * x6 + b * y6, a * x7 + b * y7


@inline
def lin_add2(out, a, a_hi, x, b, b_hi, y):
    """``out[r] += a x[r] + b y[r]`` over lanes 0-3 and ``a_hi x[r] + b_hi y[r]`` over
    lanes 4-7 (two variants side by side, :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`); every
    load before the first store, so that LLVM packs each half into vector operations."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    y0, y1, y2, y3, y4, y5, y6, y7 = y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]
    o0, o1, o2, o3, o4, o5, o6, o7 = out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
    out[0], out[1], out[2], out[3] = (o0 + (a * x0 + b * y0), o1 + (a * x1 + b * y1),
                                      o2 + (a * x2 + b * y2), o3 + (a * x3 + b * y3))
    out[4], out[5], out[6], out[7] = (o4 + (a_hi * x4 + b_hi * y4), o5 + (a_hi * x5 + b_hi * y5),
                                      o6 + (a_hi * x6 + b_hi * y6), o7 + (a_hi * x7 + b_hi * y7))


@inline
def lin_add(out, a, x, b, y):
    """``out[r] += a x[r] + b y[r]`` over the lanes (:func:`lin_add2` with one coefficient
    for both halves: the same operations in the same order)."""
    lin_add2(out, a, a, x, b, b, y)


@inline
def axpy(out, a, x):
    """``out[r] += a x[r]`` over the lanes."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]
    o0, o1, o2, o3, o4, o5, o6, o7 = out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]
    out[0], out[1], out[2], out[3] = o0 + a * x0, o1 + a * x1, o2 + a * x2, o3 + a * x3
    out[4], out[5], out[6], out[7] = o4 + a * x4, o5 + a * x5, o6 + a * x6, o7 + a * x7


# --- primitives over lane vectors: an array of LANES (tangents) or a number (values) ----


def _lanes(t) -> bool:
    """Whether the numba type ``t`` of a lane vector is an array of lanes (else a number)."""
    return isinstance(t, types.Array)


def _four(t) -> bool:
    """Whether the numba type ``t`` (tangents, or a sum's ``inner`` or accumulator) is a
    tuple of 4 numbers: the four-lane form (the module docstring)."""
    return isinstance(t, types.UniTuple) and t.count == 4


def _pages(t) -> bool:
    """Whether the numba type ``t`` of a lane vector is two pages of :data:`LANES` lanes
    (``(2, LANES)``: four variants, two pairs side by side, ``h = 4`` in each page; their
    probabilities ``a`` an array of four, ``a[2 q]``, ``a[2 q + 1]`` page ``q``'s pair)."""
    return isinstance(t, types.Array) and t.ndim == 2


def _registers(d):
    return (d[0, 0], d[0, 1], d[0, 2], d[0, 3], d[0, 4], d[0, 5], d[0, 6], d[0, 7],
            d[1, 0], d[1, 1], d[1, 2], d[1, 3], d[1, 4], d[1, 5], d[1, 6], d[1, 7])


@specialise_on("d", (_pages, _registers), lambda d: d)
def registers(d):
    """The tangents ``d`` as a loop over states reads them: ``d`` itself, or for two pages a
    tuple of their 16 lanes (read once before the loop and kept in registers: the loop
    stores into an array that, for all LLVM knows, might be ``d``, so it would read ``d``
    again at every state)."""


@inline
def _page_mul_add(out, t, q, a, a_hi, x, h, d):
    """:func:`lin_add2` on page ``q``: ``out[t, q] += a x[q] + x[q, 0] d[q]`` (lanes 4-7:
    ``a_hi``, ``x[q, h]``), the same operations in the same order, by element (a row
    view of a page in the walk's innermost loop costs a reference count each time)."""
    b, b_hi = x[q, 0], x[q, h]
    x0, x1, x2, x3, x4, x5, x6, x7 = (x[q, 0], x[q, 1], x[q, 2], x[q, 3], x[q, 4], x[q, 5],
                                      x[q, 6], x[q, 7])
    s = LANES * q
    y0, y1, y2, y3, y4, y5, y6, y7 = (d[s], d[s + 1], d[s + 2], d[s + 3], d[s + 4], d[s + 5],
                                      d[s + 6], d[s + 7])
    o0, o1, o2, o3, o4, o5, o6, o7 = (out[t, q, 0], out[t, q, 1], out[t, q, 2], out[t, q, 3],
                                      out[t, q, 4], out[t, q, 5], out[t, q, 6], out[t, q, 7])
    out[t, q, 0], out[t, q, 1], out[t, q, 2], out[t, q, 3] = (
        o0 + (a * x0 + b * y0), o1 + (a * x1 + b * y1), o2 + (a * x2 + b * y2),
        o3 + (a * x3 + b * y3))
    out[t, q, 4], out[t, q, 5], out[t, q, 6], out[t, q, 7] = (
        o4 + (a_hi * x4 + b_hi * y4), o5 + (a_hi * x5 + b_hi * y5),
        o6 + (a_hi * x6 + b_hi * y6), o7 + (a_hi * x7 + b_hi * y7))


def _mul_add_pages(out, t, a, a_hi, x, h, d):
    dv = registers(d)
    _page_mul_add(out, t, 0, a[0], a[1], x, h, dv)
    _page_mul_add(out, t, 1, a[2], a[3], x, h, dv)


def _mul_add_lanes(out, t, a, a_hi, x, h, d):
    lin_add2(out[t], a, a_hi, x, x[0], x[h], d)


def _mul_add(out, t, a, a_hi, x, h, d):
    out[t] += a * x


@specialise_on("x", (_pages, _mul_add_pages), (_lanes, _mul_add_lanes), _mul_add)
def mul_add(out, t, a, a_hi, x, h, d):
    """``out[t] += a x + x_0 d`` (``d``: ``a``'s tangents; lanes 4-7 with ``a_hi`` and
    ``x_h`` for two variants, :func:`lin_add2`; pages: each page's pair so, its
    probabilities ``a[2 q]``, ``a[2 q + 1]``, ``a_hi`` unused); values: ``out[t] += a x``."""


def dot_zero(x, inner):
    """The start of a sum of products of lane vectors like ``x`` into ``inner``: 8 zeros
    (a tuple: kept in registers; 16 for two pages; 4 where ``inner`` is a tuple of 4),
    or ``0.0``."""
    raise NotImplementedError("compiled only (numba)")


@specialise(dot_zero)
def _dot_zero(x, inner):
    if _four(inner):
        def four(x, inner):
            return (0.0, 0.0, 0.0, 0.0)
        return four
    if _pages(x):
        def pages(x, inner):
            return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return pages
    if _lanes(x):
        def lanes(x, inner):
            return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return lanes

    def values(x, inner):
        return 0.0
    return values


@inline
def _dot_page(acc, x, y, q, h):
    """:func:`dot_add` of page ``q`` (``acc`` its 8 numbers), by element."""
    a, a_hi, b, b_hi = y[q, 0], y[q, h], x[q, 0], x[q, h]
    return (acc[0] + (a * x[q, 0] + b * y[q, 0]), acc[1] + (a * x[q, 1] + b * y[q, 1]),
            acc[2] + (a * x[q, 2] + b * y[q, 2]), acc[3] + (a * x[q, 3] + b * y[q, 3]),
            acc[4] + (a_hi * x[q, 4] + b_hi * y[q, 4]),
            acc[5] + (a_hi * x[q, 5] + b_hi * y[q, 5]),
            acc[6] + (a_hi * x[q, 6] + b_hi * y[q, 6]),
            acc[7] + (a_hi * x[q, 7] + b_hi * y[q, 7]))


def _dot_pages(acc, x, y, h):
    return _dot_page(acc[:8], x, y, 0, h) + _dot_page(acc[8:], x, y, 1, h)


def _dot_lanes(acc, x, y, h):
    a, a_hi, b, b_hi = y[0], y[h], x[0], x[h]
    return (acc[0] + (a * x[0] + b * y[0]), acc[1] + (a * x[1] + b * y[1]),
            acc[2] + (a * x[2] + b * y[2]), acc[3] + (a * x[3] + b * y[3]),
            acc[4] + (a_hi * x[4] + b_hi * y[4]), acc[5] + (a_hi * x[5] + b_hi * y[5]),
            acc[6] + (a_hi * x[6] + b_hi * y[6]), acc[7] + (a_hi * x[7] + b_hi * y[7]))


@specialise_on("x", (_pages, _dot_pages), (_lanes, _dot_lanes), lambda acc, x, y, h: acc + x * y)
def dot_add(acc, x, y, h):
    """``acc + x y`` by the product rule per lane, ``acc_r + (y_0 x_r + x_0 y_r)`` (lanes
    4-7: ``y_h``, ``x_h``; the value lanes doubled, :func:`dot_end` halves them: exact;
    two pages: each so); values: ``acc + x y``."""


def _end_four(inner, acc, h):
    return (acc[0] * 0.5, acc[1], acc[2], acc[3])  # lane 0 summed twice (exact)


def _end_pages(inner, acc, h):
    for q in range(2):
        for r in range(LANES):
            inner[q, r] = acc[LANES * q + r]
        inner[q, 0] *= 0.5  # value lanes summed x y twice (exact)
        inner[q, h] *= 0.5
    return inner[0, 0]


def _end_lanes(inner, acc, h):
    inner[0], inner[1], inner[2], inner[3] = acc[0], acc[1], acc[2], acc[3]
    inner[4], inner[5], inner[6], inner[7] = acc[4], acc[5], acc[6], acc[7]
    inner[0] *= 0.5  # value lanes summed x y twice (exact)
    if h:
        inner[h] *= 0.5
    return inner[0]


@specialise_on("acc", (_four, _end_four),
               (lambda t: isinstance(t, types.BaseTuple) and len(t) == 2 * LANES, _end_pages),
               (lambda t: isinstance(t, types.BaseTuple), _end_lanes),
               lambda inner, acc, h: acc)
def dot_end(inner, acc, h):
    """A sum of :func:`dot_add` into ``inner`` (lanes: the value lanes ``0`` and ``h``
    halved, exact; two pages: each page's) and returned (its value, page 0's); four
    lanes: returned whole (a tuple, lane 0 halved); values: ``acc``."""


def _zero_lanes(like, buf):
    for r in range(LANES):
        buf[r] = 0.0
    return buf


@specialise_on("like", (_lanes, _zero_lanes), lambda like, buf: 0.0)
def vec_zero(like, buf):
    """A lane vector of zeros like ``like``: ``buf`` cleared (lanes), or ``0.0``."""


def _axpy_lanes(acc, a, x):
    for r in range(LANES):
        acc[r] += a * x[r]
    return acc


@specialise_on("x", (_lanes, _axpy_lanes), lambda acc, a, x: acc + a * x)
def vec_axpy(acc, a, x):
    """``acc + a x`` (``a`` a number; lanes: into ``acc``, returned)."""


def _zero_row(out, t):
    for r in range(LANES):
        out[t, r] = 0.0


def _zero_one(out, t):
    out[t] = 0.0


@inline
def _set_one(out, t, v):
    out[t] = v


@specialise_on("out", (lambda t: t.ndim == 2, _zero_row), _zero_one)
def zero_at(out, t):
    """``out[t] = 0`` (every lane of a ``(states, LANES)`` array; one number of a
    ``(states,)`` one)."""


# --- rows of lane arrays: an array and a row index instead of the row ----------------------
# Four lanes (tangents ``d`` or a sum's accumulator a tuple of 4 numbers) read and written
# by element; every other form the primitive above on the row.

def _mul_add_four(out, t, a, a_hi, X, k, h, d):
    b = X[k, 0]
    x0, x1, x2, x3 = X[k, 0], X[k, 1], X[k, 2], X[k, 3]
    o0, o1, o2, o3 = out[t, 0], out[t, 1], out[t, 2], out[t, 3]
    out[t, 0], out[t, 1], out[t, 2], out[t, 3] = (
        o0 + (a * x0 + b * d[0]), o1 + (a * x1 + b * d[1]), o2 + (a * x2 + b * d[2]),
        o3 + (a * x3 + b * d[3]))


def _mul_add_row(out, t, a, a_hi, X, k, h, d):
    mul_add(out, t, a, a_hi, X[k], h, d)


@specialise_on("d", (_four, _mul_add_four), _mul_add_row)
def row_mul_add(out, t, a, a_hi, X, k, h, d):
    """:func:`mul_add` of row ``k`` of ``X``, ``out[t] += a X[k] + X[k, 0] d``; four lanes
    (``d`` a tuple of 4) by element, ``out[t, 0:4]`` (the event sums' rows are 4 wide)."""


def _dot_add_four(acc, X, k, Y, t, h):
    a, b = Y[t, 0], X[k, 0]
    return (acc[0] + (a * X[k, 0] + b * Y[t, 0]), acc[1] + (a * X[k, 1] + b * Y[t, 1]),
            acc[2] + (a * X[k, 2] + b * Y[t, 2]), acc[3] + (a * X[k, 3] + b * Y[t, 3]))


@specialise_on("acc", (_four, _dot_add_four),
               lambda acc, X, k, Y, t, h: dot_add(acc, X[k], Y[t], h))
def row_dot_add(acc, X, k, Y, t, h):
    """:func:`dot_add` of rows ``X[k]`` and ``Y[t]``; four lanes (``acc`` a tuple of 4) by
    element, as :func:`row_mul_add` (``acc_r + (Y[t, 0] X[k, r] + X[k, 0] Y[t, r])``)."""


def _clear_four(out, t, d):
    out[t, 0] = out[t, 1] = out[t, 2] = out[t, 3] = 0.0


@specialise_on("d", (_four, _clear_four), lambda out, t, d: zero_at(out, t))
def clear_at(out, t, d):
    """``out[t] = 0`` in the lanes the tangents ``d`` give: four where ``d`` is a tuple of
    4, else :func:`zero_at`."""


# --- the chain's two terms of a state (analysis.select.chainwalk): one store -------------

@inline
def _both4(out, t, r, a, X, k, b, Y, i, d0, d1, d2, d3):
    """Lanes ``r .. r + 3`` of :func:`row_both`, every load before the stores."""
    u, v = -X[k, 0], Y[i, 0]
    x0, x1, x2, x3 = X[k, r], X[k, r + 1], X[k, r + 2], X[k, r + 3]
    y0, y1, y2, y3 = Y[i, r], Y[i, r + 1], Y[i, r + 2], Y[i, r + 3]
    out[t, r], out[t, r + 1], out[t, r + 2], out[t, r + 3] = (
        (a * x0 + u * d0) + (b * y0 + v * d0), (a * x1 + u * d1) + (b * y1 + v * d1),
        (a * x2 + u * d2) + (b * y2 + v * d2), (a * x3 + u * d3) + (b * y3 + v * d3))


def _both_four(out, t, a, X, k, b, Y, i, d):
    _both4(out, t, 0, a, X, k, b, Y, i, d[0], d[1], d[2], d[3])


def _both_lanes(out, t, a, X, k, b, Y, i, d):
    _both4(out, t, 0, a, X, k, b, Y, i, d[0], d[1], d[2], d[3])
    _both4(out, t, 4, a, X, k, b, Y, i, d[4], d[5], d[6], d[7])


@specialise_on("d", (_four, _both_four), (_lanes, _both_lanes),
               lambda out, t, a, X, k, b, Y, i, d: _set_one(out, t, a * X[k] + b * Y[i]))
def row_both(out, t, a, X, k, b, Y, i, d):
    """``out[t] = (a X[k] - X[k, 0] d) + (b Y[i] + Y[i, 0] d)``: two patterns' terms of
    one state (an object out with ``a = 1 - q``, in with ``b = q``; ``d = q'``) summed
    in registers, one store (:func:`mul_add` twice into a cleared row: the same floats,
    but each term waits on the other's store); four lanes where ``d`` is a tuple of 4;
    values ``a X[k] + b Y[i]``."""


@inline
def _out4(out, t, r, a, X, k, d0, d1, d2, d3):
    """Lanes ``r .. r + 3`` of :func:`row_out`, every load before the stores."""
    u = -X[k, 0]
    x0, x1, x2, x3 = X[k, r], X[k, r + 1], X[k, r + 2], X[k, r + 3]
    out[t, r], out[t, r + 1], out[t, r + 2], out[t, r + 3] = (
        a * x0 + u * d0, a * x1 + u * d1, a * x2 + u * d2, a * x3 + u * d3)


def _out_four(out, t, a, X, k, d):
    _out4(out, t, 0, a, X, k, d[0], d[1], d[2], d[3])


def _out_lanes(out, t, a, X, k, d):
    _out4(out, t, 0, a, X, k, d[0], d[1], d[2], d[3])
    _out4(out, t, 4, a, X, k, d[4], d[5], d[6], d[7])


@specialise_on("d", (_four, _out_four), (_lanes, _out_lanes),
               lambda out, t, a, X, k, d: _set_one(out, t, a * X[k]))
def row_out(out, t, a, X, k, d):
    """The "out" term of :func:`row_both` alone: ``out[t] = a X[k] - X[k, 0] d``; values
    ``a X[k]``."""
