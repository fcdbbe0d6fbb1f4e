"""The numba kernel's selected yield and its square, with tangents (numba, float64).

Per event ``w_e = ev_e P_e`` (the event weight times the soft branch cuts, times the
probability that the event passes), lanes as :mod:`analysis.pipeline.backends.numba.kernels._numba_dp`
(value, then one tangent per trainable parameter): ``sum w_e``, ``sum w_e^2`` and their
tangents ``sum dw_e``, ``sum 2 w_e dw_e`` with ``dw_e = dev_e P_e + ev_e dP_e``. One pass
over the events (the numpy expressions it replaces made ten), partial sums per block
added in block order (deterministic, as every sum of the kernel).
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import njit, specialise_on, writes

__all__ = ["block_sums", "event_lane"]


@specialise_on("ev", (lambda t: t.ndim == 2, lambda ev, e, k: ev[e, k]),
               lambda ev, e, k: ev[e] if k == 0 else 0.0)
def event_lane(ev, e, k):
    """Lane ``k`` of event ``e``'s weight: ``ev[e, k]`` of an ``(E, LANES)`` array, or,
    of the ``(E,)`` weights alone (no tangents), ``ev[e]`` for lane 0 and ``0.0`` for
    the others."""


@njit
def block_sums(ev, pe, np1, block, out, b0, b1):
    """Blocks ``b0:b1``: ``out[b] += [sum w_e, sum w_e^2]`` and their tangents (module
    docstring) over the events of block ``b``; ``ev`` ``(E, LANES)``, or ``(E,)`` the
    weights alone (zero tangents: the same operations, ``0.0 pe_0`` included, without
    reading an array of zeros; :func:`event_lane`). A block's sums are kept in a buffer
    of the loop's own (``out`` might alias the inputs, so that sums kept in it are
    stored and loaded again at every event) and added to ``out`` once: the same
    additions in the same order."""
    n_ev = ev.shape[0]
    acc = np.empty((2, np1))
    for b in range(b0, b1):
        for k in range(np1):
            acc[0, k] = out[b, 0, k]
            acc[1, k] = out[b, 1, k]
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            p0 = pe[e, 0]
            v0 = event_lane(ev, e, 0)
            w = v0 * p0
            acc[0, 0] += w
            acc[1, 0] += w * w
            for k in range(1, np1):
                d = event_lane(ev, e, k) * p0 + v0 * pe[e, k]
                acc[0, k] += d
                acc[1, k] += 2.0 * w * d
        for k in range(np1):
            out[b, 0, k] = acc[0, k]
            out[b, 1, k] = acc[1, k]


writes(block_sums, "out")
