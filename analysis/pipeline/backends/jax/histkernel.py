"""Soft histogram states of one chunk: configured histograms and channel templates.

For every :class:`~analysis.pipeline.histplan.HistSpec` of the plan, the exact
expectation of the hard-cut histogram (:mod:`analysis.stats.histogram`: ``sumw[b] =
E[sum w [pass] [x in b]]``, ``sumw2[b] = E[sum w^2 [pass] [x in b]]``), with the weight
``w`` = event weight (x a weight variation's factor) and the pass probability of the
spec's region (the selection, or a channel's selection):

- entries of a linear observable (``S.f``, ``S[i].f``, functions of indexed objects,
  per-event branches) with the weights of :mod:`analysis.pipeline.backends.jax.setkernel` (its
  moments use the same entries): ``sumw = sum_entries w p``, ``sumw2 = sum w^2 p``;
- an event sum (``sum(S.f)``, ``count(S)``): :func:`analysis.select.subsets.sum_bins`,
  ``P(pass, X in b)`` by enumeration of the subsets of the collection's *uncertain*
  objects (pass probability strictly between 0 and 1; the others are folded in first),
  every subset up to 6 of them, meet in the middle up to 24 (soft bins: every subset). The enumeration's widths
  are static: ``shapes.uncertain``, per collection one width for every event or groups
  of events each at its own width (:func:`uncertain_counts` counts them on the host;
  :func:`analysis.pipeline.backends.jax.passes.enumeration_shapes` groups them).

A histogram with soft bins (``width > 0``: :attr:`HistSpec.width_index`) spreads
each entry over the bins with the probabilities of :mod:`analysis.stats.softbins` at the
annealed width ``widths[width_index]`` (0: the hard bins); an event sum spreads each
subset's sum. Trainable edges (:attr:`HistSpec.edge_params`) are read from ``theta``
(the state keeps the configured edges as its structure, so chunks merge).

A shift variation evaluates the whole selection again on the shifted column (so cuts
and observables move together); a weight variation reuses its region's pass
probabilities with the varied weights; a per-object scale factor of a set evaluates
the selection again with the factor on the patterns holding the set
(:data:`analysis.select.objects.FACTOR`): the event weighed by ``prod_{j in set} sf_j``. Returns ``{"histograms": {name: Histogram},
"templates": {key: Histogram}}``.

This is the reference: :mod:`analysis.pipeline.backends.numba.fasthist` computes the same states on
the numba backend for the plans its rules serve (tests compare the two, 1e-12).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from analysis.pipeline import scorecols
from analysis.pipeline.histplan import (
    GROUPS,
    event_sum_collections,
    factor_values,
    too_many_uncertain,
)
from analysis.select.leading import can_be_in
from analysis.select.subsets import MAX_UNCERTAIN, sum_bins, uncertain_mask
from analysis.stats.histogram import Histogram
from analysis.stats.softbins import bin_probabilities

__all__ = [
    "ENUM_PREFIX",
    "event_sum_collections",
    "factor_values",
    "histogram_states",
    "possible_counts",
    "too_many_uncertain",
    "uncertain_counts",
]

def _bins(x, w, w2, edges, width=None):
    if width is not None:  # soft bins (analysis.stats.softbins); hard rows where width 0
        q = bin_probabilities(x, edges, width)
        return jnp.sum(w[:, None] * q, axis=0), jnp.sum(w2[:, None] * q, axis=0)
    idx = jnp.searchsorted(jnp.asarray(edges), x, side="right")
    nb = len(edges) + 1
    onehot = idx[:, None] == jnp.arange(nb)
    return jnp.sum(w[:, None] * onehot, axis=0), jnp.sum(w2[:, None] * onehot, axis=0)


#: ``arrays[ENUM_PREFIX + collection]``: the events of each enumeration group in turn
#: (``Shapes.uncertain``: ``((width, size), ...)``; analysis.pipeline.backends.jax.passes makes both)
ENUM_PREFIX = "enum:"


def _fill(ch, spec, weight, cands, shapes, width=None, edges=None):
    """``(sumw_flow, sumw2_flow)`` of ``spec`` on the chunk ``ch`` with event weights
    ``weight`` (the weight column, or times a variation's factor); ``width``: the soft
    bins' (None: hard); ``edges``: the edges at this pass's parameters (trainable edges;
    None: ``spec.edges``)."""
    node = spec.node
    edges = spec.edges if edges is None else edges
    ev = ch.ev if weight is None else ch.ev * weight
    w_event = ch.arrays["weight"] if weight is None else ch.arrays["weight"] * weight
    if node.kind in ("sum", "count"):
        sp = ch.sp
        c = sp.collection_of(node.head)
        m = ch.lays[c].valid.shape[1]
        u = None if shapes.uncertain is None else dict(shapes.uncertain)[c]
        if u is None and m > MAX_UNCERTAIN:  # not counted (uncertain_counts): the axis
            raise too_many_uncertain(spec, c, None, m)
        index = None if u is None or isinstance(u, int) else ch.arrays[ENUM_PREFIX + c]
        values = 1.0 if node.kind == "count" else ch.field(c, node.field)
        values = jnp.abs(values) if node.absolute else values
        pb = sum_bins(ch.probs, ch.lays, sp.model, ch.th, values, node.head, edges, ch.cw,
                      n_uncertain=u, index=index, width=width)
        return (jnp.sum(ev[:, None] * pb, axis=0),
                jnp.sum((ev * w_event)[:, None] * pb, axis=0))
    key = node.text
    if key not in cands:
        cands[key] = ch.candidates(node)
    x, w = ch.entries(node, cands[key], ev=ev)
    _, w2 = ch.entries(node, cands[key], ev=ev * w_event)
    return _bins(x, w, w2, edges, width)


def _chunk_of(spec, chunks, theta, widths, arrays, plan, shapes, chunk_cls):
    """``(chunk, candidates)`` of ``spec``'s region, shift and scale factor (made once
    into ``chunks``)."""
    sf = None if spec.weight is None else plan.weights[spec.weight].sf
    at = (spec.region, spec.shift) if sf is None else (spec.region, spec.shift, sf)
    if at not in chunks:
        arr = arrays
        if spec.shift is not None:
            sh = plan.shifts[spec.shift]
            # a plan without its scores (reverse mode) reads their columns of this side
            arr = scorecols.side_arrays(arrays, sh.key, sh.factor)
            arr[sh.key] = arrays[sh.key] * sh.factor
        sub = plan
        if spec.region:
            region = plan.regions[spec.region - 1]
            sub = dataclasses.replace(plan, sets=region.sets, event_cuts=region.event_cuts)
        factors = None if sf is None else {sf[0]: sf[1]}
        chunks[at] = (chunk_cls(theta, widths, arr, sub, shapes, factors), {})
    return chunks[at]


def uncertain_counts(theta, widths, arrays, plan, shapes, base, chunk_cls) -> dict:
    """Per collection of :func:`event_sum_collections`, ``(E,)`` int32: the most
    uncertain objects (:func:`analysis.select.subsets.uncertain_mask`) of each event
    over the event-sum histograms' regions, shifts and scale factors (the same pass
    probabilities :func:`histogram_states` enumerates); ``base`` and ``chunk_cls`` as
    there."""
    chunks = {(0, None): (base, {})}
    out: dict = {}
    for spec in plan.hists:
        if spec.node.kind not in ("sum", "count"):
            continue
        ch, _ = _chunk_of(spec, chunks, theta, widths, arrays, plan, shapes, chunk_cls)
        c = ch.sp.collection_of(spec.node.head)
        n = jnp.sum(uncertain_mask(ch.probs, ch.lays, ch.sp.model, spec.node.head), axis=1,
                    dtype=jnp.int32)
        out[c] = n if c not in out else jnp.maximum(out[c], n)
    return out


def possible_counts(theta, widths, arrays, plan, shapes, base, chunk_cls) -> dict:
    """Per indexed set of ``plan``'s observables and histograms, ``(E,)`` int32: the most
    objects of each event that can be in it (:func:`analysis.select.leading.can_be_in`)
    over the selection and the histograms' regions, shifts and scale factors (the
    probabilities :func:`analysis.select.leading.leading` ranks); ``base`` and
    ``chunk_cls`` as in :func:`histogram_states`."""
    out: dict = {}

    def add(ch, node):
        for name, _ in node.slots:
            n = jnp.sum(can_be_in(ch.probs, ch.lays, ch.sp.model, name), axis=1,
                        dtype=jnp.int32)
            out[name] = n if name not in out else jnp.maximum(out[name], n)

    for pair in plan.sets.nodes:
        for node in pair:
            if node is not None and node.kind in ("index", "call"):
                add(base, node)
    chunks = {(0, None): (base, {})}
    for spec in plan.hists:
        if spec.node.kind in ("index", "call"):
            ch, _ = _chunk_of(spec, chunks, theta, widths, arrays, plan, shapes, chunk_cls)
            add(ch, spec.node)
    return out


def histogram_states(theta, widths, arrays, plan, shapes, base, chunk_cls):
    """The histogram states of one padded chunk (module docstring); ``base``: the
    chunk's :class:`analysis.pipeline.backends.jax.setkernel._Chunk` of the selection, ``chunk_cls``
    builds those of the regions and shifts."""
    out: dict[str, dict] = {group: {} for group in GROUPS}
    chunks = {(0, None): (base, {})}
    for spec in plan.hists:
        ch, cands = _chunk_of(spec, chunks, theta, widths, arrays, plan, shapes, chunk_cls)
        factor = None
        if spec.weight is not None and plan.weights[spec.weight].sf is None:
            factor = factor_values(plan.weights[spec.weight].tree, ch.arrays)
            # padding events (weight 0) may divide 0 by 0: their factor is 0
            factor = jnp.where(ch.arrays["weight"] != 0, factor, 0.0)
        width = None if spec.width_index is None else widths[spec.width_index]
        sumw, sumw2 = _fill(ch, spec, factor, cands, shapes, width, spec.edges_of(theta))
        out[spec.group][spec.key] = Histogram(spec.edges, sumw, sumw2)
    return out
