"""The histogram fills of :mod:`analysis.pipeline.backends.numba.kernels._numba_esum` (numba,
float64): per-event bin probabilities into the histogram sums, and their totals over the bins.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import njit

__all__ = ["bin_totals", "fill_bins"]


@njit
def fill_bins(pb, ev, factors, weight, sumw, sumw2, b_lo, b_hi):
    """Histogram sums of the bins ``b_lo:b_hi`` (each bin's own sums: a range per thread
    gives the same bits) of per-event bin probabilities ``pb[e, b]`` (lanes, from
    :func:`~analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`) with the event weights ``ev[e]`` (lanes) times each
    variation's factor ``factors[v, e]``: ``sumw[v, b] += f w``, ``sumw2[v, b] += f^2
    weight[e] w``, ``w = ev[e] pb[e, b]`` (the product rule), over the first
    ``sumw.shape[2]`` lanes; events in order (one sequential sum per bin and variation,
    as :func:`analysis.pipeline.backends.numba.kernels._numba_fill.fill`); a bin of an
    event with probability and tangents exactly 0 is left out (it adds exact zeros)."""
    nl = sumw.shape[2]
    w = np.empty(nl)
    for e in range(pb.shape[0]):
        ev0 = ev[e, 0]
        we = weight[e]
        # every factor of the event finite: a bin of probability and tangents 0 adds
        # exact zeros (x - x is 0 only for a finite x)
        finite = we - we == 0.0
        for r in range(nl):
            finite = finite and ev[e, r] - ev[e, r] == 0.0
        for v in range(factors.shape[0]):
            finite = finite and factors[v, e] - factors[v, e] == 0.0
        for b in range(b_lo, b_hi):
            p0 = pb[e, b, 0]
            if finite and p0 == 0.0:
                empty = True
                for r in range(1, nl):
                    empty = empty and pb[e, b, r] == 0.0
                if empty:
                    continue  # the event's other bins hold its probability
            w[0] = p0 * ev0
            for r in range(1, nl):
                w[r] = p0 * ev[e, r] + ev0 * pb[e, b, r]
            for v in range(factors.shape[0]):
                f = factors[v, e]
                f2 = f * f * we
                for r in range(nl):
                    sumw[v, b, r] += f * w[r]
                    sumw2[v, b, r] += f2 * w[r]


@njit
def bin_totals(bins, into):
    """``into[e, r] = sum_b bins[e, b, r]`` (``bins`` ``(E, B, W)``: per event and bin
    ``P(pass, X in b)`` with tangents, :func:`~analysis.pipeline.backends.numba.kernels._numba_esum.event_sum_bins`), the bins added in order
    from bin 0: the floats of copying bin 0 and adding the others one by one (numpy on
    the strided ``(E, W)`` slices of ``bins`` took 12 ms per 50k events, this loop well
    under one)."""
    n_bins = bins.shape[1]
    for e in range(bins.shape[0]):
        for r in range(bins.shape[2]):
            acc = bins[e, 0, r]
            for b in range(1, n_bins):
                acc += bins[e, b, r]
            into[e, r] = acc
