"""The candidates walk's vector-Jacobian product: reverse mode for indexed observables (numba, float64).

:func:`analysis.pipeline.backends.numba.kernels._numba_lead.candidates` gives each
candidate tuple ``a`` of an indexed set ``s`` (collection ``c``, depth ``r``) its weight

    w(a) = < I_{a_r} O ... I_{a_0} O ... delta_0, B_{a_r + 1} >

(``I``/``O``: an object's forward step over the patterns with / without ``s``; ``B_m``
the value function of rank positions ``m, m + 1, ...`` of ``c`` (every pattern) and
then ``G``, that of every other collection's objects from the pass table ``f``). Given
the cotangents ``wbar_a = dL/dw(a)``, ``L = sum_a wbar_a w(a)`` is linear in each step,
so :func:`lead_vjp` runs, per event, the value walk once more (``G``, ``B``, the tuples
depth first, each step's input kept: a tape) and then its transpose in reverse order:

- a tuple's last member: ``dL/dpi_{a_r p} += wbar_a <V, B_{a_r + 1}[tgt(p, .)]>`` for the
  patterns ``p`` holding ``s``, ``Vbar += wbar_a I^T B_{a_r + 1}``,
  ``Bbar_{a_r + 1} += wbar_a I V``;
- a step ``V' = X V`` (``X`` = ``I`` or ``O``): ``dL/dpi_{jp} += <V, Vbar'[tgt(p, .)]>`` over
  its patterns and ``Vbar += X^T Vbar'``;
- the chain ``B_m = A_m B_{m + 1}`` (every pattern), then ``G``'s:
  ``dL/dpi_{jp} += <Bbar_m, B_{m + 1}[tgt(p, .)]>``, ``Bbar_{m + 1} += A_m^T Bbar_m``, from
  ``m = 0`` up; ``dL/df = Gbar`` at the end (the trainable count thresholds).

A transposed forward step is the walk's backward step and the reverse
(:func:`~analysis.select.lanes.steps.forward`,
:func:`~analysis.select.lanes.steps.backward`), a pattern's derivative its inner
sum (:func:`~analysis.select.lanes.steps.weight`): the steps of
:mod:`~analysis.select.lanes.steps`, values only. Cost: about three value
walks of the candidates, whatever the number of parameters; memory per block, the tape
``(ops, S)`` (``ops`` at most twice the tuples and their prefixes of the busiest event).
Outputs per object and per event (no sums): blocks and threads change no bit.
"""

from __future__ import annotations

import numpy as np

from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import backward, forward, weight

__all__ = ["lead_vjp"]

_IN, _OUT, _LEAF = 0, 1, 2  # the tape's steps: a member, a position left out, a tuple's end


@inline
def _take(pat, c, p, ls, side):
    """Whether pattern ``p`` takes part: ``side`` 1 those holding set ``ls``, 0 those
    without it, 2 every pattern."""
    return side == 2 or (pat[c, p, ls] == 1) == (side == 1)


@inline
def _fwd(dst, src, scale, g, c, pv_all, pat, n_pat, tgt, ls, side, states):
    """``dst[tgt(p, k)] += scale pi_gp src[k]`` over the patterns ``side`` takes."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            a = scale * pv_all[g, p]
            forward(dst, src, a, a, 0.0, tgt[c, p], states, ns, 0, states, False)


@inline
def _bwd(dst, src, scale, g, c, pv_all, pat, n_pat, tgt, ls, side, states):
    """``dst[k] += scale pi_gp src[tgt(p, k)]`` over the patterns ``side`` takes."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            a = scale * pv_all[g, p]
            backward(dst, src, a, a, 0.0, tgt[c, p], states, ns, 0)


@inline
def _grad(gp, g, scale, F, G, c, pat, n_pat, tgt, ls, side, states):
    """``gp[g, p] += scale sum_k F[k] G[tgt(p, k)]`` over the patterns ``side`` takes."""
    ns = states.shape[0]
    for p in range(n_pat[c]):
        if _take(pat, c, p, ls, side):
            gp[g, p] += scale * weight(0.0, F, G, tgt[c, p], states, ns, 0, states, False)


@njit
def lead_vjp(coff, base, order, n_cand, lc, ls, depth, pv_all, pat, n_pat, tgt, f, df, max_n,
             max_other, max_ops, cand_off, wbar, block, gp, dfs, b0, b1):
    """Blocks ``b0:b1`` of events (arguments as :func:`~analysis.pipeline.backends.numba.kernels._numba_lead.candidates`',
    values only: ``pv_all`` ``(N, P)``, ``df`` ``(S, K)``); ``wbar[q]`` the cotangent of
    candidate ``q``'s weight; ``max_other`` the most objects of the other collections in
    an event, ``max_ops`` the tape's length. Outputs (added to): ``gp[g, p] = dL/dpi_gp``,
    ``dfs[e, r] = sum_k dL/df[k] df[k, r]``."""
    n_ev = coff.shape[1] - 1
    n_coll = coff.shape[0]
    n_states = f.shape[0]
    for b in range(b0, b1):
        gst = np.empty((max_other + 1, n_states))
        gobj = np.empty(max_other, np.int64)
        gcol = np.empty(max_other, np.int64)
        B = np.empty((max_n + 1, n_states))
        Bbar = np.empty((max_n + 1, n_states))
        V = np.empty((depth + 1, n_states))
        Vbar = np.empty((depth + 1, n_states))
        T = np.empty(n_states)
        T2 = np.empty(n_states)
        tape_v = np.empty((max_ops, n_states))
        tape = np.empty((max_ops, 4), np.int64)
        pos = np.empty(depth + 1, np.int64)
        states = np.arange(n_states)
        for e in range(b * block, min(n_ev, (b + 1) * block)):
            lo = coff[lc, e]
            n = coff[lc, e + 1] - lo
            kc = n_cand[e]
            if kc < depth + 1:
                continue
            live = False
            for q in range(cand_off[e], cand_off[e + 1]):
                live = live or wbar[q] != 0.0
            if not live:
                continue
            # the value functions: G over the other collections (kept), B over c's positions
            gst[0] = f
            t = 0
            for c in range(n_coll - 1, -1, -1):
                if c == lc:
                    continue
                for i in range(coff[c, e + 1] - 1, coff[c, e] - 1, -1):
                    gst[t + 1] = 0.0
                    _bwd(gst[t + 1], gst[t], 1.0, base[c] + i, c, pv_all, pat, n_pat, tgt, ls,
                         2, states)
                    gobj[t] = base[c] + i
                    gcol[t] = c
                    t += 1
            B[n] = gst[t]
            for m in range(n - 1, -1, -1):
                B[m] = 0.0
                _bwd(B[m], B[m + 1], 1.0, base[lc] + order[lo + m], lc, pv_all, pat, n_pat, tgt,
                     ls, 2, states)
            # the tuples depth first (the value walk's order), each step's input on the tape
            V[0] = 0.0
            V[0, 0] = 1.0
            lv = 0
            pos[0] = 0
            q = cand_off[e]
            nops = 0
            while True:
                m = pos[lv]
                if m > kc - 1 - (depth - lv):  # too few positions left: one level up
                    if lv == 0:
                        break
                    lv -= 1
                    m = pos[lv]
                else:
                    g = base[lc] + order[lo + m]
                    tape_v[nops] = V[lv]
                    tape[nops, 1] = lv
                    tape[nops, 2] = m
                    tape[nops, 3] = q
                    if lv < depth:  # m joins the prefix: one level down
                        tape[nops, 0] = _IN
                        nops += 1
                        V[lv + 1] = 0.0
                        _fwd(V[lv + 1], V[lv], 1.0, g, lc, pv_all, pat, n_pat, tgt, ls, 1, states)
                        lv += 1
                        pos[lv] = m + 1
                        continue
                    tape[nops, 0] = _LEAF
                    nops += 1
                    q += 1
                if m + 1 <= kc - 1 - (depth - lv):  # m leaves this level
                    tape_v[nops] = V[lv]
                    tape[nops, 0] = _OUT
                    tape[nops, 1] = lv
                    tape[nops, 2] = m
                    nops += 1
                    T[:] = 0.0
                    _fwd(T, V[lv], 1.0, base[lc] + order[lo + m], lc, pv_all, pat, n_pat, tgt,
                         ls, 0, states)
                    V[lv] = T
                pos[lv] = m + 1
            # the transpose, in reverse order
            Vbar[:] = 0.0
            Bbar[:] = 0.0
            for i in range(nops - 1, -1, -1):
                kind, lv, m, q = tape[i, 0], tape[i, 1], tape[i, 2], tape[i, 3]
                g = base[lc] + order[lo + m]
                vin = tape_v[i]
                if kind == _LEAF:
                    wq = wbar[q]
                    if wq != 0.0:
                        _grad(gp, g, wq, vin, B[m + 1], lc, pat, n_pat, tgt, ls, 1, states)
                        _bwd(Vbar[lv], B[m + 1], wq, g, lc, pv_all, pat, n_pat, tgt, ls, 1,
                             states)
                        _fwd(Bbar[m + 1], vin, wq, g, lc, pv_all, pat, n_pat, tgt, ls, 1, states)
                elif kind == _OUT:
                    _grad(gp, g, 1.0, vin, Vbar[lv], lc, pat, n_pat, tgt, ls, 0, states)
                    T[:] = 0.0
                    _bwd(T, Vbar[lv], 1.0, g, lc, pv_all, pat, n_pat, tgt, ls, 0, states)
                    Vbar[lv] = T
                else:
                    _grad(gp, g, 1.0, vin, Vbar[lv + 1], lc, pat, n_pat, tgt, ls, 1, states)
                    _bwd(Vbar[lv], Vbar[lv + 1], 1.0, g, lc, pv_all, pat, n_pat, tgt, ls, 1,
                         states)
                    Vbar[lv + 1] = 0.0
            for m in range(n):  # the chain of B, then G's, transposed
                g = base[lc] + order[lo + m]
                _grad(gp, g, 1.0, Bbar[m], B[m + 1], lc, pat, n_pat, tgt, ls, 2, states)
                _fwd(Bbar[m + 1], Bbar[m], 1.0, g, lc, pv_all, pat, n_pat, tgt, ls, 2, states)
            T[:] = Bbar[n]
            for i in range(t - 1, -1, -1):
                _grad(gp, gobj[i], 1.0, T, gst[i], gcol[i], pat, n_pat, tgt, ls, 2, states)
                T2[:] = 0.0
                _fwd(T2, T, 1.0, gobj[i], gcol[i], pv_all, pat, n_pat, tgt, ls, 2, states)
                T[:] = T2
            for r in range(df.shape[1]):
                acc = 0.0
                for k in range(n_states):
                    acc += T[k] * df[k, r]
                dfs[e, r] += acc
