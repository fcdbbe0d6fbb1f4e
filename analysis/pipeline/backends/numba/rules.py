"""What the numba backend computes, as rules: one per node kind, registered here.

A plan is a tree of typed nodes (the pass asked for, the derivative order, learned
scores, cuts, count thresholds, observables, histograms, their weights, channel
regions). The numba backend serves a plan and a request when every node has a rule
(:data:`RULES`, keyed ``(what, kind)``) and no rule's ``limit`` objects: :func:`refusal`
walks the nodes and returns the first missing rule or limit as the reason (one line,
naming the node), so a node kind without a rule is refused with its name, never
computed by a loop that does not know it.

Cut kinds (:mod:`analysis.select.cuts`) register their numba rule in their own file:
a kind that declares ``sides`` (its probability is a product of one-sided threshold
cuts) runs as those threshold cuts (:func:`analysis.pipeline.backends.numba._fasttables.one_sided`),
at its bounds, or at the edges its ``edges`` derives from them (each a pseudo-parameter
whose derivatives the backend chains, in every pass:
:mod:`analysis.pipeline.backends.numba.cutedges`); the rules for cuts are read from the
cut-kind registry itself (:func:`cut_rule`).
Everything else registers with :func:`register` below, next to the limit it has.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from analysis.pipeline import scorecols
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request
from analysis.select import cuts as cut_kinds

__all__ = ["RULES", "Rule", "cut_rule", "refusal", "register"]

#: ``limit(node, plan, request, options) -> str | None``: why a node of a kind that has a
#: rule is still not served (``options``: the backend, with its options)
Limit = Callable[[Any, Plan, Request, Any], "str | None"]


@dataclass(frozen=True)
class Rule:
    """The numba backend computes nodes ``(what, kind)``, within ``limit`` (None: all)."""

    what: str
    kind: str
    limit: Limit | None = None


#: the registered rules, ``(what, kind) -> Rule`` (cuts: :func:`cut_rule`)
RULES: dict[tuple[str, str], Rule] = {}

#: how a node of each ``what`` is named in a refusal
_NAMES = {
    "pass": "passes of kind {kind!r}",
    "order": "derivatives of order {kind}",
    "score": "learned scores",
    "observable": "observables of kind {kind!r}",
    "histogram": "histograms of kind {kind!r}",
    "weight": "histogram weights of kind {kind!r}",
    "cut": "cut kind {kind!r}",
    "count": "count thresholds",
    "region": "channel regions",
}


def register(what: str, kind: str, limit: Limit | None = None) -> Rule:
    """Register (or replace) the rule of node kind ``(what, kind)``; returns it."""
    rule = RULES[what, kind] = Rule(what, kind, limit)
    return rule


def cut_rule(op: str) -> Rule | None:
    """The rule of cut kind ``op``: its kind's ``sides`` (:mod:`analysis.select.cuts`),
    a threshold built without an ``op`` (``""``), or None."""
    if not op:
        return Rule("cut", "")
    try:
        kind = cut_kinds.kind_of(op)
    except KeyError:
        return None
    return Rule("cut", op) if getattr(kind, "sides", None) is not None else None


def _rules_for(what: str) -> list[str]:
    if what == "cut":
        return sorted(op for k in cut_kinds.KINDS if getattr(k, "sides", None) is not None
                      for op in k.ops)
    return sorted(kind for w, kind in RULES if w == what)


def _missing(what: str, kind: str) -> str:
    have = ", ".join(_rules_for(what)) or "none"
    return f"no numba rule for {_NAMES[what].format(kind=kind)} (rules for: {have})"


# --- the nodes of a plan and a request ----------------------------------------------


def _cut_op(cut) -> str:
    op = getattr(cut, "op", "") or ""
    if not op and getattr(cut, "more", ()):
        return "multi-threshold"  # several thresholds and no kind: none knows it
    return op


def _nodes(plan: Plan, request: Request) -> Iterator[tuple[str, str, str, Any, Plan]]:
    """``(what, kind, subject, node, plan)`` for every node of ``plan`` and ``request``
    the numba backend must compute (``plan``: the one the node belongs to)."""
    kind = request.kind
    yield "pass", kind, "this pass", None, plan
    yield "order", str(request.order), "this pass", None, plan
    if kind == "replicas" and request.replicas.what == "totals":
        return  # the replicas' totals read the weights only, no node of the plan
    for spec in plan.scores:
        yield "score", "network", f"learned score {spec.name!r}", spec, plan
    run = scorecols.bare(plan) if plan.scores else plan
    for obs in run.observables:
        for node in (obs.x, obs.y):
            if node is not None:
                yield "observable", node.kind, f"observable {obs.name!r}", node, run
    if kind in ("entries", "selected"):  # they read neither histograms nor regions
        run = dataclasses.replace(run, hists=(), regions=())
    regions = [("", run)] + [
        (f"channel region {r.name!r}: ", _region(run, r)) for r in run.regions]
    for i, (where, sub) in enumerate(regions):
        if i:
            yield "region", "channel", where.rstrip(": "), run.regions[i - 1], run
        for cut in [c for s in sub.sets.sets for c in s.cuts] + list(sub.event_cuts):
            op = _cut_op(cut)
            yield "cut", op, f"{where}a {op or 'threshold'} cut", cut, sub
        for count in sub.sets.model.counts:
            yield "count", "count", f"{where}count {count.op} {count.cap}", count, sub
    for spec in run.hists:
        yield "histogram", spec.node.kind, f"histogram {spec.key!r}", spec, run
        if spec.weight is not None:
            w = "scale factor" if run.weights[spec.weight].sf is not None else "factor"
            yield "weight", w, f"histogram {spec.key!r}", spec, run


def _region(plan: Plan, region) -> Plan:
    return dataclasses.replace(plan, hists=(), sets=region.sets,
                               event_cuts=region.event_cuts)


def refusal(plan: Plan, request: Request, options: Any) -> str | None:
    """``None`` when the numba backend (``options``: its options) computes ``plan`` and
    ``request``, else the first node without a rule, or whose rule's limit objects, as
    ``"<node>: <why>"``."""
    for what, kind, subject, node, sub in _nodes(plan, request):
        rule = cut_rule(kind) if what == "cut" else RULES.get((what, kind))
        if rule is None:
            return f"{subject}: {_missing(what, kind)}"
        if rule.limit is not None:
            why = rule.limit(node, sub, request, options)
            if why is not None:
                return f"{subject}: {why}"
    return None


# --- the rules -----------------------------------------------------------------------


def _reverse_pass(node, plan: Plan, request: Request, options) -> str | None:
    if not options.numba_reverse:
        return "the numba reverse pass is switched off (Backend(numba_reverse=False))"
    if request.kind == "pullback":
        from analysis.pipeline.backends.numba._fastpayload import reads

        name = reads(scorecols.bare(plan), request.pullback)
        if name is not None:
            return f"the objective reads {name} (they do not fit the plan's states)"
    return None


register("pass", "states")
register("pass", "entries")
register("pass", "selected")


def _every_point(node, plan: Plan, request: Request, options) -> str | None:
    if request.replicas.what != "lanes":
        return None  # one point: the plan's nodes are walked at it
    for theta in request.theta:  # the nodes whose limit reads the point, at each one
        why = refusal(plan, Request(theta, request.widths, order=0), options)
        if why is not None:
            return f"at parameter point {theta.tolist()}: {why}"
    return None


register("pass", "replicas", _every_point)
register("pass", "pullback", _reverse_pass)
register("pass", "yield_gradients", _reverse_pass)


register("order", "0")
# any number of trainable parameters: blocks of tangents (analysis.pipeline.backends.numba.blocks)
register("order", "1")


def _score(spec, plan: Plan, request: Request, options) -> str | None:
    if request.kind in ("pullback", "yield_gradients"):
        return None  # their columns' cotangents, then the network's vjp (fastreverse)
    if request.kind not in ("states", "entries", "selected", "replicas"):
        return f"the network runs in the JAX kernel for {request.kind} passes"
    if request.order:
        return "its Jacobian (the network's weights) runs in the JAX kernel"
    if not options.scores_on_numba:
        return "the network runs in the JAX kernel (Backend(scores_on_numba=False))"
    return None  # values: each network once on the chunk's rows, its column a field


register("score", "network", _score)

for _kind in ("field", "branch", "sum", "count"):
    register("observable", _kind)


def _indexed_sets(node, plan: Plan, request: Request, options) -> str | None:
    """One indexed set, or two of one or two collections (the numba walk of
    :mod:`analysis.pipeline.backends.numba.kernels._numba_lead`)."""
    names = list(dict.fromkeys(s for s, _ in node.slots))
    if len(names) > 2:
        return (f"{node.text!r} indexes {len(names)} sets (the numba kernel walks at most "
                "two indexed sets per expression)")
    return None


register("observable", "index", _indexed_sets)
register("observable", "call", _indexed_sets)


def _count_cap(count, plan: Plan, request: Request, options) -> str | None:
    theta = request.theta.reshape(-1)
    if theta.size != len(plan.param_names):  # a grid: not a numba pass
        return None
    i = plan.sets.model.counts.index(count)
    param, value = plan.sets.thresholds[i]
    n = float(theta[param]) if param is not None else float(value)
    cap = count.cap if count.op in (">=", "<") else count.cap - 1
    if not n <= cap:
        return f"count threshold {n} beyond its cap {count.cap} (NaN results)"
    return None


register("count", "count", _count_cap)


def _same_sets(region, plan: Plan, request: Request, options) -> str | None:
    if (region.sets.sets != plan.sets.sets
            or region.sets.model.sets != plan.sets.model.sets):
        return ("on other object sets than the selection (the numba histograms walk one "
                "set of objects)")
    return None


register("region", "channel", _same_sets)


def _states_only(spec, plan: Plan, request: Request, options) -> str | None:
    if request.kind == "pullback":
        from analysis.pipeline.backends.numba._revhistlead import KINDS

        node = spec.node
        if node.kind in KINDS:  # sum(): a set's field, never a score's column (config)
            return None  # the numba reverse pass pulls them back (numba/_revhistlead)
        return (f"x = {node.text!r}: the numba reverse pass pulls back histograms of "
                "kinds S.f, S[i].f, mass(S[0] + S[1]) and the like, sum(S.f), count(S) and "
                "branches")
    if request.kind not in ("states", "replicas"):  # a bootstrap pass's values are states
        return f"histograms in a {request.kind} pass run in the JAX kernel"
    return None  # soft bins and trainable edges too (numba/_histfills, _numba_esum)


for _kind in ("field", "branch", "sum", "count"):
    register("histogram", _kind, _states_only)


#: the per-event object whose fields are the learned event scores' columns (``score.NAME``:
#: :attr:`analysis.pipeline.score.ScoreSpec.column`)
_SCORES = "score"


def _leading(spec, plan: Plan, request: Request, options) -> str | None:
    why = _states_only(spec, plan, request, options)
    if why is not None:
        return why
    node = spec.node
    if node.kind != "index":  # candidate tuples: their own walk and ranking (numba/_histmulti)
        if request.kind == "pullback" and _SCORES in node.groups:
            return (f"x = {node.text!r} reads a learned score's column (the numba reverse "
                    "pass pulls back the tuples' weights, not their values)")
        return _indexed_sets(node, plan, request, options)
    sets = {s.name: s for s in plan.sets.sets}
    mine = sets[node.slots[0][0]]
    for other in plan.hists:
        if other.node.kind == "index":
            s = sets[other.node.slots[0][0]]
            if s.collection == mine.collection and s.rank_by != mine.rank_by:
                return (f"sets of {s.collection} indexed by two ranking fields (the numba "
                        "walk takes one order per collection)")
    return None


register("histogram", "index", _leading)
register("histogram", "call", _leading)
register("weight", "factor")

del _kind
