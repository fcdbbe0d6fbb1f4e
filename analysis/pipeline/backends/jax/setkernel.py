"""The per-chunk maths of the object-set form (``objects:`` configs; ``plan.sets``).

:func:`chunk_states` returns the same state pytree as
:func:`analysis.pipeline.backends.jax.passes.chunk_states` (``selected_sumw``, ``selected_sumw2``, each
observable's ``moments``/``comoments``), so accumulation, merging, derivatives,
reports and the optimiser are shared. Every soft quantity is the exact expectation
of the hard-cut state (:mod:`analysis.select.objects`):

- event weight ``w_e = weight x prod(soft event cuts) x P(all count conditions)``;
- ``S.f``: one entry per object, weight ``weight x event cuts x P(object in S and the
  event passes)`` (:func:`analysis.select.objects.object_weights`);
- ``S[i].f``, ``mass(S[i] + T[j])``, ``deltaR(S[i], T[j])``: one entry per candidate
  (tuple of objects), weighted by ``P(they are exactly the indexed selected objects and
  the event passes)`` (:func:`analysis.select.objects.leading`); values with
  :mod:`analysis.select.fourvec` (``vector``'s formulas);
- ``sum(S.f)``, ``count(S)``: per event ``E[X^r 1_pass]`` (:func:`analysis.select.objects.
  sum_moments`) turned into a moment state by
  :func:`analysis.stats._core.moments_from_expectations`;
- a branch (``MET.pt``): one entry per event with weight ``w_e``.

Entries are linear in their weights, so every moment order and co-moment is exact.
A count condition with a ``param`` threshold ``n`` is the single-collection form's soft
integer step: the expectation of ``(1 - s) [K op floor n] + s [K op floor n + 1]``,
``s = integer_step(frac n, width)``, so ``n`` is trainable; integer ``n`` is exact. Cost per event (``S`` joint count states, ``N`` objects): see
:mod:`analysis.select.objects`; an indexed observable costs ``C(K, i + 1)`` candidates with
``K`` the most objects of an event that can be in the indexed set
(``Shapes.possible``; without it ``M``, the per-event object axis: the chunk's largest
multiplicity rounded up to a multiple of :data:`analysis.pipeline.layout.SET_OBJECT_STEP`).
"""

from __future__ import annotations

import jax.numpy as jnp

from analysis.pipeline.backends.jax import histkernel
from analysis.pipeline.backends.jax.histkernel import histogram_states
from analysis.pipeline.plan import Plan, threshold_value
from analysis.pipeline.results import state_tree
from analysis.pipeline.score import with_scores
from analysis.select import cuts, functions
from analysis.select.leading import MAX_TUPLES
from analysis.select.objects import (
    FACTOR,
    event_pass,
    layout,
    leading,
    object_weights,
    sum_moments,
    take,
)
from analysis.stats import _core
from analysis.stats.pullback import finite_entries

__all__ = ["chunk_states", "observable_entries", "possible_counts", "uncertain_counts"]


def _cut(theta, widths, cut, v):
    """Pass probability of values ``v`` under ``cut`` (its kind: :mod:`analysis.select.cuts`)."""
    return cuts.probability(cut.kind_op, v, cut.threshold_values(theta), widths[cut.width_index])


class _Chunk:
    """Lazily computed shared pieces of one chunk (object weights, layouts, fields)."""

    def __init__(self, theta, widths, arrays, plan: Plan, shapes, factors=None):
        arrays = with_scores(theta, arrays, plan.scores)  # score.NAME columns
        self.plan, self.sp, self.arrays = plan, plan.sets, arrays
        self.possible = None if shapes.possible is None else dict(shapes.possible)
        self.lays = {
            c: layout(arrays[f"{c}:starts"], arrays[f"{c}:counts"], m)
            for c, _, m in shapes.collections
        }
        self.probs = {}
        for s in self.sp.sets:
            lay = self.lays[s.collection]
            q = lay.valid.astype(jnp.float64)
            for cut in s.cuts:
                v = self.field(s.collection, cut.field)
                q = q * _cut(theta, widths, cut, jnp.abs(v) if cut.absolute else v)
            self.probs[s.name] = q
        for name, f in (factors or {}).items():  # per-object scale factors (objects.FACTOR)
            c = self.sp.collection_of(name)
            self.probs[FACTOR + name] = self.field(c, f)
        th = [jnp.asarray(threshold_value(theta, p, v)) for p, v in self.sp.thresholds]
        self.th = jnp.stack(th) if th else jnp.zeros((0,), jnp.float64)
        # Smoothed integer step of each count (0 for a fixed integer value: exact).
        cw = [jnp.asarray(0.0) if i is None else widths[i] for i in self.sp.count_widths]
        self.cw = jnp.stack(cw).astype(jnp.float64) if cw else jnp.zeros((0,), jnp.float64)
        ev = arrays["weight"]
        for cut in plan.event_cuts:
            ev = ev * _cut(theta, widths, cut, arrays[f"event:{cut.key}"])
        self.ev = ev  # weight x event cuts (without the count decision)
        self.p = (event_pass(self.probs, self.lays, self.sp.model, self.th, self.cw)
                  if self.sp.model.collections else jnp.ones_like(ev))  # no sets: no counts
        self._ow = None

    def field(self, c: str, f: str):
        return self.lays[c].dense(self.arrays[f"{c}:{f}"])

    def object_weights(self):
        if self._ow is None:
            self._ow = object_weights(self.probs, self.lays, self.sp.model, self.th, self.cw)
        return self._ow

    def entries(self, node, cand=None, ev=None):
        """``(x, w)`` flat entries of a linear node; ``cand`` caches ``leading``; ``ev``:
        the per-event factor of the weights (default: weight x event cuts)."""
        ev = self.ev if ev is None else ev
        if node.kind == "branch":
            x = self.arrays[f"event:{node.head}"]
            w = ev * self.p
        elif node.kind == "field":
            c = self.sp.collection_of(node.head)
            x = self.field(c, node.field)
            w = ev[:, None] * self.object_weights()[node.head]
        else:
            idx, wt = cand
            w = ev[:, None] * wt
            if node.kind == "index":
                x = take(self.field(self.sp.collection_of(node.slots[0][0]), node.field), idx[0])
            else:  # a registered function (analysis.select.functions) of the candidates

                def read(term, k, f):
                    if k is None:  # a per-event object: its branch, one per event
                        return self.arrays[f"event:{term}.{f}"][:, None]
                    c = self.sp.collection_of(node.slots[k][0])
                    return take(self.field(c, f), idx[k])

                x = functions.apply(node.fn, node.args, read)
        x = jnp.abs(x) if node.absolute else x
        w = w.reshape(-1)
        # Values are data (no parameter dependence): zero them where nothing is filled
        # (padding, candidates of missing objects), which may be inf/NaN garbage.
        x = jnp.where(w != 0, x.reshape(-1), 0.0)
        return x, w

    def candidates(self, node):
        if node.kind not in ("index", "call"):
            return None
        rank = {
            s.name: self.field(s.collection, s.rank_by)
            for s in self.sp.sets if s.name in dict(node.slots)
        }
        # max_objects on every indexed collection bounds the candidates: no default bound.
        capped = all(self.sp.collection_of(s) in self.sp.caps for s, _ in node.slots)
        return leading(self.probs, self.lays, self.sp.model, self.th, node.slots, rank, self.cw,
                       max_tuples=None if capped else MAX_TUPLES, possible=self.possible)

    def event_sum(self, node, order: int, *, pulled: bool = False):
        """The event sum's moments; ``pulled``: ``(moments, those of the finite events)``
        (:func:`analysis.stats.pullback.finite_entries`, an event's entry being its weight
        and its ``E[X^r 1_pass]``)."""
        c = self.sp.collection_of(node.head)
        values = {node.head: 1.0 if node.kind == "count" else self.field(c, node.field)}
        a = sum_moments(self.probs, self.lays, self.sp.model, self.th, values, self.cw,
                        order=order)
        state = _core.moments_from_expectations(a, self.ev)
        if not pulled:
            return state
        fw, *fa = finite_entries(self.ev, *(a[:, r] for r in range(a.shape[-1])))
        return state, _core.moments_from_expectations(jnp.stack(fa, axis=-1), fw)


def chunk_states(theta, widths, arrays, plan: Plan, shapes, *, pulled: bool = False):
    """Mergeable states of one padded chunk (module docstring), float64 pytree.
    ``pulled``: ``(states, pulled states)``, the second with the observables' states of
    their finite entries (:func:`analysis.stats.pullback.finite_entries`: what the
    reverse sweep's pulled sum reads, so that a NaN entry does not make the whole
    state NaN), the rest shared."""
    ch = _Chunk(theta, widths, arrays, plan, shapes)
    w_e = ch.ev * ch.p
    sumw, sumw2 = jnp.sum(w_e), jnp.sum(w_e * w_e)
    observables, finite = {}, {}
    for obs, (xn, yn), order in zip(plan.observables, plan.sets.nodes, plan.sets.orders):
        entry, fin = {}, {}
        if xn.kind in ("sum", "count"):
            if pulled:
                entry["moments"], fin["moments"] = ch.event_sum(xn, order, pulled=True)
            else:
                entry["moments"] = ch.event_sum(xn, order)
        else:
            cand = ch.candidates(xn)
            x, w = ch.entries(xn, cand)
            if obs.univariate:
                entry["moments"] = _core.moments(x, w)
                if pulled:
                    fw, fx = finite_entries(w, x)
                    fin["moments"] = _core.moments(fx, fw)
            if obs.bivariate:
                y, _ = ch.entries(yn, cand)
                entry["comoments"] = _core.comoments(x, y, w)
                if pulled:
                    fw, fx, fy = finite_entries(w, x, y)
                    fin["comoments"] = _core.comoments(fx, fy, fw)
        observables[obs.name], finite[obs.name] = entry, fin
    hists = histogram_states(theta, widths, arrays, plan, shapes, ch, _Chunk) if plan.hists else {}
    states = state_tree(sumw, sumw2, observables, **hists)
    return (states, state_tree(sumw, sumw2, finite, **hists)) if pulled else states


def uncertain_counts(theta, widths, arrays, plan: Plan, shapes) -> dict:
    """:func:`analysis.pipeline.backends.jax.histkernel.uncertain_counts` of one padded chunk."""
    ch = _Chunk(theta, widths, arrays, plan, shapes)
    return histkernel.uncertain_counts(theta, widths, arrays, plan, shapes, ch, _Chunk)


def possible_counts(theta, widths, arrays, plan: Plan, shapes) -> dict:
    """:func:`analysis.pipeline.backends.jax.histkernel.possible_counts` of one padded chunk."""
    ch = _Chunk(theta, widths, arrays, plan, shapes)
    return histkernel.possible_counts(theta, widths, arrays, plan, shapes, ch, _Chunk)


def selected_weights(theta, widths, arrays, plan: Plan, shapes):
    """``(E,)``: each (padded) event's weight times its probability to pass."""
    ch = _Chunk(theta, widths, arrays, plan, shapes)
    return ch.ev * ch.p


def observable_entries(theta, widths, arrays, plan: Plan, shapes, index: int):
    """Flat ``(x, w)`` entries of observable ``index`` (for histograms). An event sum
    (``sum(S.f)``, ``count(S)``) has no entries with one value each in the soft case:
    its entries are the hard-cut sums weighted by ``P(pass)`` only at width 0."""
    ch = _Chunk(theta, widths, arrays, plan, shapes)
    xn, _ = plan.sets.nodes[index]
    if xn.kind in ("sum", "count"):
        c = plan.sets.collection_of(xn.head)
        ow = ch.object_weights()[xn.head]
        v = 1.0 if xn.kind == "count" else ch.field(c, xn.field)
        # E[X 1_pass] / P(pass): the conditional mean of the sum, one entry per event.
        x = _core.safe_div(jnp.sum(ow * v, axis=1), ch.p, 0.0)
        return x, ch.ev * ch.p
    return ch.entries(xn, ch.candidates(xn))
