"""The compiled histogram of event sums of :mod:`analysis.pipeline.backends.numba.fasthist` (numba, float64), hard and soft bins.

Per event ``P(the region passes and X in bin b)`` for ``X = sum_{j in S} v_j`` (a set
``S`` of one collection), in lanes (lane 0 the value, then the tangents; the product
rule): the meaning and the two methods (every subset; meet in the middle, the ``beta``
sorted with prefix sums ``PG``) of the JAX reference
:func:`analysis.select.subsets.sum_bins`, whose docstring derives them. From the walk's
tables (:mod:`analysis.pipeline.backends.numba.kernels._numba_hist`'s notation:
``tgt[c, p, k]`` the count state after adding an object of pattern ``p`` to state
``k``, ``pv_all``/``pd_all`` the objects' pattern probabilities and tangents,
``fs``/``dfs`` the pass tables):

- every object of the other collections and every *certain* object of ``S``'s
  collection (:func:`analysis.select.certain.certain_objects`, the one definition of
  both backends, made on the host: ``cert``, ``ins``) moves the forward count
  distribution ``F`` by one step; a certain object in ``S`` adds its value to ``x0``;
- the ``U`` uncertain objects: up to :data:`ENUMERATE_UP_TO` (at most 3 tangents, an
  event whose probabilities are all numbers) every subset ``A``, each ``F_A`` over its
  live states only (the count of ``S`` is fixed by ``A``); above, meet in the middle
  (the first ``U // 2`` forward over their live states, the others backward from
  ``f``), per ``alpha`` only the edges its sums can cross taking a lookup. With a NaN
  among an event's probabilities or more than 3 tangents, the event meets in the
  middle over dense states and every edge.
- where every pattern of ``S``'s collection outside ``S`` leaves the count states as
  they are, each subset is a scalar ``W_A`` times the distribution over its in objects
  alone (:func:`~analysis.pipeline.backends.numba.kernels._numba_esum_steps._subsets_w`),
  and the enumeration's last object is not stepped: its two sides read ``W q <F_A, f>``
  and ``W <F_A, G>``, ``G`` its in patterns' value function. The same products in
  another order: within a few ulps (the tests: 1e-10 against the enumeration oracle,
  1e-12 against the JAX reference).
- soft bins (``width > 0``, :mod:`analysis.stats.softbins`): every event meets in the
  middle over dense states, each pair ``(alpha, beta)`` one subset, ``P_A = <F_alpha,
  G_beta>`` at ``X_A = X_alpha + X_beta`` spread over every bin by
  :func:`~analysis.pipeline.backends.numba.kernels._numba_softbins.bin_probabilities`
  (no prefix sums: every subset reaches every bin), the trainable edges' ``P_A d q_b /
  d e_j`` in the lane of edge ``j``'s parameter (``elane[j]``; below 1 a fixed edge);
  ``X_A`` carries no tangent. ``O(2^U (S + n_b) L)`` per event.

An event of numbers (at most 3 tangents) with fewer objects than any state of nonzero
pass value or tangent needs (:func:`_fewest`) cannot pass: it is not walked, its bins
are the exact zeros the walk would give (+0.0).

Cost per event: ``O(M P S L)`` for the folded objects, ``O(2^U P S L)`` (enumeration) or
``O(2^(U/2) (P S + n_c) L)`` (meet in the middle, ``n_c`` the edges crossed) for the
uncertain ones (``S`` count states, ``P`` patterns, ``L`` lanes). Outputs per event (no
sums), so blocks and threads change no bit. An event with more than
:data:`MAX_UNCERTAIN` uncertain objects gets NaN and its count in ``n_unc`` (the host
refuses it).

Each step is called from one place in the loop (loops around one call, not calls of
their own): numba inlines a helper at every call, typed, lowered and compiled again; one
call per step made the kernel's cold compile about a third shorter. The steps run once
per event (the partition, the subsets' enumeration, the pass table's checks) are compiled
once as functions of their own instead (:mod:`._numba_esum_steps`), and arrays are copied
by loops, not by numba's array assignment (its shape check's error path): together 45 to
33 s of CPU for a cold build, the same floats, the same speed within noise; the steps of
the inner loops (an object's step, the dot products) stay inlined.
"""

from __future__ import annotations

import numpy as np

from analysis.pipeline.backends.numba.kernels._numba_esum_steps import (
    FOUR,
    _add4,
    _copy,
    _d4,
    _dense,
    _dot4,
    _fewest,
    _live_step,
    _numbers,
    _out_factor,
    _partition,
    _partition_buffers,
    _subsets,
    _subsets_w,
    _times,
)
from analysis.pipeline.backends.numba.kernels._numba_softbins import bin_probabilities, hard_bin
from analysis.select.lanes.arith import LANES, clear_at
from analysis.select.lanes.policy import inline, njit
from analysis.select.lanes.steps import backward, weight

__all__ = ["ENUMERATE_UP_TO", "LANES", "MAX_UNCERTAIN", "event_sum_bins"]

#: every subset up to this many uncertain objects, meet in the middle above (measured,
#: a 50k-event chunk of Poisson(5.5) jets, value + 2 tangents, one thread, CPU time:
#: 94 ms with 5, 100 ms with 7, 102-147 ms with 10, 110 ms with 3; again with the
#: subsets' scalar weights and the last object's value function, the kernel alone on the
#: event-sum benchmark's first chunk, min of 18 at load 6: 36.3 ms with 4, 33.5 with 5,
#: 33.0 with 6, 33.3 with 7; the JAX reference switches at 6,
#: :data:`analysis.select.subsets.ENUMERATE_UP_TO`)
ENUMERATE_UP_TO = 5
#: the enumeration's buffers at first (grown for an event that needs more)
_FIRST = 6
#: as :data:`analysis.select.subsets.MAX_UNCERTAIN`
MAX_UNCERTAIN = 24


@inline
def _spread(o, t, x, nl, edges, width, elane, q, ds):
    """``o[b, r] += t[r] q_b(x)`` over the first ``nl`` lanes and, for each trainable
    edge ``j`` (``elane[j]``: its lane), ``t[0] d q_b / d e_j`` into its lane."""
    soft = bin_probabilities(edges, x, width, q, ds)
    for b in range(o.shape[0]):
        qb = q[b]
        for r in range(nl):
            o[b, r] += t[r] * qb
    if soft:
        for j in range(edges.shape[0]):
            r = elane[j]
            if r < 1 or r >= nl:
                continue
            d = t[0] * ds[j]
            o[j, r] += d
            o[j + 1, r] -= d


@njit
def event_sum_bins(coff, base, pv_all, pd_all, n_pat, tgt, f, df, cs, has, cert, ins, vals,
                   edges, width, elane, nl, block, out, n_unc, b0, b1):
    """Events of blocks ``b0:b1`` (module docstring): ``out[e, b, :nl]`` =
    ``P(pass, X in bin b)`` and its tangents (bins as :func:`numpy.searchsorted` right over
    ``edges``: underflow first, overflow last; soft bins of ``width > 0``, ``elane`` per
    edge its parameter's lane, 0: fixed), ``n_unc[e]`` the event's uncertain objects
    of collection ``cs``. ``coff`` ``(C, E + 1)`` object offsets, ``base`` ``(C + 1,)``
    global offsets; ``pv_all[g, p, 0]``, ``pd_all[g, p]`` (lane 0 zero) per global object;
    ``f``, ``df`` ``(S,)``, ``(S, LANES)`` the region's pass table and its tangents (lane 0
    zero); ``has[p]``: pattern ``p`` of ``cs`` holds ``S``; ``cert``, ``ins``, ``vals``
    per object of ``cs`` (local index): whether it is certain and, if so, in ``S``
    (:func:`analysis.select.certain.certain_objects`), its value. ``out`` has at least
    four lanes whatever ``nl``: the sparse path adds four (``_add4``); fewer raise (an
    add past a narrower row went into the next event's bins, another thread's block, or
    past the array's end: a lost update, a corrupt heap)."""
    if out.shape[2] < 4:
        raise ValueError("event_sum_bins: out needs at least 4 lanes")
    n_ev = out.shape[0]
    n_coll = coff.shape[0]
    # the pattern selection as an int64 value, not a literal: one compilation of each
    # helper, not one per constant
    w_all = np.int64(-1)
    states = np.arange(tgt.shape[2])  # every state, in order (the dense steps' and dots')
    n_states = f.shape[0]
    nb = edges.shape[0] + 1
    unc, fold, fcol = _partition_buffers(coff, b0 * block, min(n_ev, b1 * block))
    F = np.zeros((n_states, LANES))
    Fn = np.zeros((n_states, LANES))
    FA = np.zeros((1 << _FIRST, n_states, LANES))
    XA = np.zeros(1 << max(_FIRST, ENUMERATE_UP_TO))
    SA = np.zeros((1 << _FIRST, n_states, 4))  # grown for an event that needs more
    SN = np.zeros((1 << _FIRST, n_states, 4))
    LA = np.zeros((1 << _FIRST, n_states), np.int64)
    LN = np.zeros((1 << _FIRST, n_states), np.int64)
    NA = np.zeros(1 << _FIRST, np.int64)
    NN = np.zeros(1 << _FIRST, np.int64)
    mark = np.zeros(n_states, np.bool_)
    G0 = np.zeros((n_states, LANES))
    GB = np.zeros((1, n_states, LANES))
    XB = np.zeros(1)
    PG = np.zeros((2, n_states, LANES))  # GB's prefix sums: one more than GB
    C = np.zeros((nb + 1, LANES))
    tmp = np.zeros(LANES)
    sq = np.zeros(nb)  # a subset's soft-bin probabilities
    sd = np.zeros(nb - 1)  # ... and their derivatives in the edges
    GH = np.zeros((1, n_states, 4))  # grown for an event that needs more
    PH = np.zeros((2, n_states, 4))
    W = np.zeros((1 << _FIRST, 4))
    FF = np.zeros((2, n_states, 4))  # the sparse F and its next step (index cur)
    LL = np.zeros((2, n_states), np.int64)
    # patterns that leave every count state as it is (an object failing every set)
    still = np.ones((n_coll, tgt.shape[1]), np.bool_)
    for c in range(n_coll):
        for p in range(n_pat[c]):
            for k in range(n_states):
                if tgt[c, p, k] != k:
                    still[c, p] = False
    # every pattern outside S moves no count: F_A factors (_subsets_w)
    out_still = True
    for p in range(n_pat[cs]):
        if has[p] == 0 and not still[cs, p]:
            out_still = False
    for k in range(n_states):
        G0[k, 0] = f[k]
        for r in range(1, nl):
            G0[k, r] = df[k, r]
    need = _fewest(tgt, n_pat, G0, nl)
    for e in range(b0 * block, min(n_ev, b1 * block)):
        n, m, x0 = _partition(coff, base, cs, cert, ins, vals, e, unc, fold, fcol)
        n_unc[e] = n
        o = out[e]
        o[:, :] = 0.0
        if n > MAX_UNCERTAIN:
            o[:, :] = np.nan
            continue
        skip = _numbers(coff, base, pv_all, n_pat, e)
        if n + m < need and nl <= 4 and skip:
            # fewer objects than any passing state needs (an event of numbers, at most 3
            # tangents): its bins are the exact zeros the sparse path gives (each term a
            # number times a zero f and zero tangents, added to +0.0)
            continue
        # with at most 3 tangents in an event of numbers, F over its live states only
        # (FF[cur] over LL[cur, :nf]; the others exact zeros, never read), else dense
        sparse = skip and nl <= 4 and width == 0.0
        cur = 0
        if sparse:
            FF[0, 0, 0], FF[0, 0, 1], FF[0, 0, 2], FF[0, 0, 3] = 1.0, 0.0, 0.0, 0.0
            LL[0, 0] = 0
            nf = 1
        else:
            F[:, :] = 0.0
            F[0, 0] = 1.0
            nf = n_states
        for j in range(m):  # the folded objects (certain: the one definition, on the host)
            g = fold[j]
            c = fcol[j]
            if skip:
                # probability exactly 1 on a pattern that moves no count and no
                # tangents: the step is F itself (1 F + 0 ...: the same floats)
                moves = False
                for p in range(n_pat[c]):
                    if pv_all[g, p, 0] == 1.0:
                        moves = moves or not still[c, p]
                    elif pv_all[g, p, 0] != 0.0:
                        moves = True
                    for r in range(1, nl):
                        if pd_all[g, p, r] != 0.0:
                            moves = True
                if not moves:
                    continue
            if sparse:
                nf = _live_step(FF[cur], LL[cur], nf, FF[1 - cur], LL[1 - cur], mark,
                                tgt, c, n_pat, pv_all, pd_all, g, nl, w_all, has)
                cur = 1 - cur
                continue
            _dense(Fn, F, tgt, c, n_pat, pv_all, pd_all, g, w_all, has, states, False)
            F, Fn = Fn, F
        if sparse:
            # the subsets of the first objects (all of them up to ENUMERATE_UP_TO, else
            # the first half), each over its live states
            first = n if n <= ENUMERATE_UP_TO else n // 2
            if SA.shape[0] < (1 << first):
                SA = np.zeros((1 << first, n_states, 4))
                SN = np.zeros((1 << first, n_states, 4))
                LA = np.zeros((1 << first, n_states), np.int64)
                LN = np.zeros((1 << first, n_states), np.int64)
                NA = np.zeros(1 << first, np.int64)
                NN = np.zeros(1 << first, np.int64)
                W = np.zeros((1 << first, 4))
            if XA.shape[0] < (1 << first):  # each buffer grown by its own size
                XA = np.zeros(1 << first)
            # every subset, the out patterns still: the last object's two sides read
            # its value function (GH[1]: the in side's, the out side's q times f), no
            # distribution of a subset of all n objects is made
            tail = 1 if out_still and 1 <= n <= ENUMERATE_UP_TO else 0
            first -= tail
            if out_still:
                _subsets_w(FF, LL, cur, nf, x0, unc, first, SA, LA, NA, W, XA, mark, tgt, cs,
                           n_pat, pv_all, pd_all, nl, has, vals, base[cs])
            else:
                SA, SN, LA, LN, NA, NN = _subsets(FF, LL, cur, nf, x0, unc, first, SA, SN, LA, LN, NA,
                                                  NN, XA, mark, tgt, cs, n_pat, pv_all,
                                                  pd_all, nl, has, vals, base[cs])
                for a in range(1 << first):
                    W[a, 0], W[a, 1], W[a, 2], W[a, 3] = 1.0, 0.0, 0.0, 0.0
            m = 1 << first
            q = (1.0, 0.0, 0.0, 0.0)
            mb = 1
            if first < n:
                # the objects after the first backward from the pass table (the last
                # first): the meet in the middle's second half, or the enumeration's last
                # object (GH[1]), value functions GH with their sums XB
                nbeta = 1 << (n - first)
                if GH.shape[0] < nbeta:
                    GH = np.zeros((nbeta, n_states, 4))
                    PH = np.zeros((nbeta + 1, n_states, 4))
                if XB.shape[0] < nbeta:
                    XB = np.zeros(nbeta)
                for k in range(n_states if tail == 0 else 0):  # the tail reads G0 itself
                    for r in range(4):
                        GH[0, k, r] = G0[k, r] if r < nl else 0.0
                XB[0] = 0.0
                for j in range(n - 1, first - 1, -1):
                    g = unc[j]
                    # with the out patterns still, the out side is q G: scaled in place
                    # (one out pattern: the floats of its step, 0 + v x = v x; the tail's
                    # out side reads q itself, W q <F_A, f>, and not GH[0])
                    q = _out_factor(pv_all, pd_all, g, cs, n_pat, has)
                    for a in range(mb):
                        for side in range(1, -1, -1):  # in S (a new subset), then out of it
                            if side == 0 and out_still:
                                for k in range(n_states if tail == 0 else 0):  # tail: unread
                                    GH[a, k, 0], GH[a, k, 1], GH[a, k, 2], GH[a, k, 3] = _times(
                                        q, (GH[a, k, 0], GH[a, k, 1], GH[a, k, 2], GH[a, k, 3]))
                                continue
                            # the side's value function (the walk's backward step)
                            Gn = GH[a + mb] if side else PH[0]
                            for k in range(states.shape[0]):
                                clear_at(Gn, k, FOUR)
                            for p in range(n_pat[cs]):
                                if has[p] == side:
                                    v = pv_all[g, p, 0]
                                    backward(Gn, G0 if tail else GH[a], v, v, _d4(pd_all, g, p),
                                             tgt[cs, p], states, states.shape[0], 0)
                        if not out_still:
                            _copy(GH[a], PH[0])
                        XB[a + mb] = XB[a] + vals[g - base[cs]]
                    mb *= 2
            if n <= ENUMERATE_UP_TO:
                # every subset: each P_A = <F_A, G> into its bin; with the tail, the last
                # object out first (W q <F_A, f>, in the subsets' order), then in (W <F_A,
                # GH[1]>, GH[1][k] = sum over its in patterns p of pi_p f[tgt(p, k)])
                for side in range(1 + tail):
                    last_in = tail == 1 and side == 1
                    G = GH[1] if last_in else G0
                    v = vals[unc[n - 1] - base[cs]] if last_in else 0.0  # x + 0.0: same bin
                    for a in range(m):
                        w = (W[a, 0], W[a, 1], W[a, 2], W[a, 3])
                        if tail == 1 and side == 0:
                            w = _times(w, q)
                        _add4(o, hard_bin(edges, XA[a] + v),
                              _times(w, _dot4(SA[a], LA[a], NA[a], G, states)))
                continue
        else:
            # every state and lane (lanes from nl on carry nothing that is read): the first
            # half forward from F, the second backward from the pass table (the last
            # first); subset a + h holds object j in S (its in patterns, its value added),
            # a does not (the out patterns, in place through Fn). One loop over the halves
            # and the sides: the step is compiled once
            m, mb = 1 << (n // 2), 1 << (n - n // 2)
            if FA.shape[0] < m:
                FA = np.zeros((m, n_states, LANES))
            if XA.shape[0] < m:
                XA = np.zeros(m)
            if GB.shape[0] < mb:
                GB = np.zeros((mb, n_states, LANES))
            if XB.shape[0] < mb:
                XB = np.zeros(mb)
            _copy(FA[0], F)
            _copy(GB[0], G0)
            XA[0], XB[0] = x0, 0.0
            for half in range(2):
                back = half == 1
                H, X = (GB, XB) if back else (FA, XA)
                h = 1
                for j in range(n - n // 2 if back else n // 2):
                    g = unc[n - 1 - j if back else j]
                    for a in range(h):
                        for side in range(2):  # in S (a new subset), then out of it
                            _dense(Fn if side else H[a + h], H[a], tgt, cs, n_pat, pv_all,
                                   pd_all, g, 1 - side, has, states, back)
                        _copy(H[a], Fn)
                        X[a + h] = X[a] + vals[g - base[cs]]
                    h *= 2
            if width > 0.0:  # soft bins: each pair one subset, spread over every bin
                for a in range(m):
                    for b in range(mb):
                        weight(tmp, FA[a], GB[b], states, states, n_states, 0, states, False)
                        live = False
                        for r in range(nl):
                            live = live or tmp[r] != 0.0
                        if live:  # a subset of probability and tangents 0 adds exact zeros
                            _spread(o, tmp, XA[a] + XB[b], nl, edges, width, elane, sq, sd)
                continue
            if PG.shape[0] < mb + 1:
                PG = np.zeros((mb + 1, n_states, LANES))
        # meet in the middle: the second half's sums sorted and its value functions summed
        # in that order (PH over live states, PG dense)
        order = np.argsort(XB[:mb], kind="mergesort")
        xs = XB[:mb][order]
        P, H = (PH, GH) if sparse else (PG, GB)
        P[0] = 0.0
        for i in range(mb):
            for k in range(P.shape[1]):
                for r in range(P.shape[2]):
                    P[i + 1, k, r] = P[i, k, r] + H[order[i], k, r]
        if sparse:
            # per first-half subset only the edges its sums can cross take a lookup:
            # P(pass, X < e) is 0 below them and the subset's total above
            for a in range(m):
                w = (W[a, 0], W[a, 1], W[a, 2], W[a, 3])
                tot = prev = (0.0, 0.0, 0.0, 0.0)
                for k in range(-1, nb - 1):  # -1: the subset's total (every beta), then edges
                    i = mb
                    if k >= 0:
                        t = edges[k] - XA[a]
                        if t <= xs[0]:
                            continue  # no beta below the edge: nothing, and prev stays 0
                        if t <= xs[mb - 1]:
                            i = np.searchsorted(xs, t, side="left")
                    now = tot
                    if k < 0 or i < mb:
                        now = _times(w, _dot4(SA[a], LA[a], NA[a], PH[i], states))
                    if k < 0:
                        tot = now
                        continue
                    _add4(o, k, (now[0] - prev[0], now[1] - prev[1], now[2] - prev[2],
                                 now[3] - prev[3]))
                    prev = now
                _add4(o, nb - 1, (tot[0] - prev[0], tot[1] - prev[1], tot[2] - prev[2],
                                  tot[3] - prev[3]))
            continue
        C[:, :nl] = 0.0
        for a in range(m):
            for k in range(nb):
                i = mb if k == nb - 1 else np.searchsorted(xs, edges[k] - XA[a], side="left")
                weight(tmp, FA[a], PG[i], states, states, n_states, 0, states, False)
                for r in range(nl):
                    C[k, r] += tmp[r]
        for r in range(nl):
            o[0, r] = C[0, r]
            for k in range(1, nb):
                o[k, r] = C[k, r] - C[k - 1, r]

