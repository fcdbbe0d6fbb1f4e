"""Reverse mode's histogram fills: the cotangents of each entry from the bins' (numba, float64).

A histogram's share of a pullback (:mod:`analysis.pipeline.backends.numba._fastrevhist`) is
``L = sum_v sum_b (sbar_vb sumw_vb + sbar2_vb sumw2_vb)`` with, per entry ``i`` of event
``e`` (fill weight ``w_i = ev_e p_i``, bin probabilities ``q_b(x_i)``), ``sumw_vb += f_ve
w_i q_b`` and ``sumw2_vb += f_ve^2 weight_e w_i q_b`` (``f_ve``: variation ``v``'s factor,
:mod:`analysis.pipeline.backends.jax.histkernel`). So ``L = sum_i w_i C_e(x_i)``, ``C_e(x)
= sum_b c_eb q_b(x)`` with the event's bin cotangents ``c_eb = sum_v (f_ve sbar_vb +
f_ve^2 weight_e sbar2_vb)``, and

- ``dL/dw_i = C_e(x_i)``;
- soft bins (``q_b`` and ``ds_j = s'(z_j) / W`` of
  :mod:`analysis.pipeline.backends.numba.kernels._numba_softbins`, ``z_j = (e_j - x) / W``):
  ``dC/dx = sum_j ds_j (c_{j+1} - c_j)`` and ``dC/de_j = -ds_j (c_{j+1} - c_j)``, so
  ``dL/dx_i = w_i dC/dx`` and ``dL/de_j = sum_i w_i dC/de_j``; hard bins and a
  non-finite ``x`` (its hard bin): none.

An entry of weight 0 is binned at ``x = 0`` (its value may be garbage; the JAX kernel's
``where(w != 0, x, 0)``: no cotangent of ``x`` there). The same pass fills the value
sums, per block of events (the blocks on threads).
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_softbins import bin_probabilities, hard_bin
from analysis.select.lanes.policy import njit, writes

__all__ = ["entry_cotangents"]


@njit
def entry_cotangents(off, x, p, ev, factors, weight, edges, width, sbar, sbar2, values, block,
                     g, gx, ebar, sumw, sumw2, b0, b1):
    """Blocks ``b0:b1`` of ``block`` events: the entries ``off[e]:off[e + 1]`` of event
    ``e`` (values ``x``, probabilities ``p``, event weights ``ev[e]``, variations' factors
    ``factors[v, e]``, weights ``weight[e]``), bins of ``edges`` at the soft bins' width
    ``width`` (0: hard), the bins' cotangents ``sbar[v, b]``, ``sbar2[v, b]`` (module
    docstring). Outputs: ``g[i] = dL/dw_i``; with ``values``, also ``gx[i] = dL/dx_i``
    and per block ``k`` the sums ``ebar[k, j] = dL/de_j``, ``sumw[k, v, b]``,
    ``sumw2[k, v, b]`` (zeros in; the host adds the blocks in order: no bit depends on
    the threads)."""
    n_b = sbar.shape[1]
    n_e = edges.shape[0]
    n_v = factors.shape[0]
    n_ev = off.shape[0] - 1
    c = np.empty(n_b)
    q = np.zeros(n_b)
    ds = np.zeros(n_e)
    for e in range(b0 * block, min(n_ev, b1 * block)):
        k = e // block
        we = weight[e]
        for b in range(n_b):
            c[b] = 0.0
        for v in range(n_v):
            f = factors[v, e]
            f2 = f * f * we
            for b in range(n_b):
                c[b] += f * sbar[v, b] + f2 * sbar2[v, b]
        eve = ev[e]
        for i in range(off[e], off[e + 1]):
            w = eve * p[i]
            xi = x[i] if w != 0.0 else 0.0
            lo, hi = 0, n_b  # the bins the entry fills
            if width > 0.0:
                soft = bin_probabilities(edges, xi, width, q, ds)
                acc = 0.0
                for b in range(n_b):
                    acc += c[b] * q[b]
                g[i] = acc
            else:
                soft = False
                h = hard_bin(edges, xi)
                q[:] = 0.0
                q[h] = 1.0
                g[i] = c[h]
                # its own bin alone (a NaN weight NaN there only, as the JAX kernel's;
                # the other bins' w * 0 add nothing)
                lo, hi = h, h + 1
            if not values:
                continue
            for v in range(n_v):
                f = factors[v, e]
                f2 = f * f * we
                for b in range(lo, hi):
                    sumw[k, v, b] += f * (w * q[b])
                    sumw2[k, v, b] += f2 * (w * q[b])
            d = 0.0
            if soft:
                for j in range(n_e):
                    t = ds[j] * (c[j + 1] - c[j])
                    d += t
                    ebar[k, j] -= w * t
            gx[i] = w * d


writes(entry_cotangents, "g", "gx", "ebar", "sumw", "sumw2")
