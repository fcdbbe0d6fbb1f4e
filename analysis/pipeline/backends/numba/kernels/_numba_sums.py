"""The numba kernel's selected yield and its square, with tangents (numba, float64).

Per event ``w_e = ev_e P_e`` (the event weight times the soft branch cuts, times the
probability that the event passes), lanes as :mod:`analysis.pipeline.backends.numba.kernels._numba_dp`
(value, then one tangent per trainable parameter): ``sum w_e``, ``sum w_e^2`` and their
tangents ``sum dw_e``, ``sum 2 w_e dw_e`` with ``dw_e = dev_e P_e + ev_e dP_e``. One pass
over the events (the numpy expressions it replaces made ten), partial sums per block
added in block order (deterministic, as every sum of the kernel).
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import njit

__all__ = ["block_sums"]


@njit
def block_sums(ev, pe, np1, block, out, b0, b1):
    """Blocks ``b0:b1``: ``out[b] += [sum w_e, sum w_e^2]`` and their tangents (module
    docstring) over the events of block ``b``."""
    n_ev = ev.shape[0]
    for b in range(b0, b1):
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            w = ev[e, 0] * pe[e, 0]
            out[b, 0, 0] += w
            out[b, 1, 0] += w * w
            for k in range(1, np1):
                d = ev[e, k] * pe[e, 0] + ev[e, 0] * pe[e, k]
                out[b, 0, k] += d
                out[b, 1, k] += 2.0 * w * d
