"""Derived edges on the numba kernel: cut kinds whose one-sided thresholds are functions of their bounds.

A cut kind with ``sides`` runs on the numba loops as one-sided threshold cuts
(:func:`analysis.pipeline.backends.numba._fasttables.one_sided`); where its thresholds
are its bounds, a bound's tangent is its parameter's lane. A kind that also declares
``edges(op, bounds)`` (:mod:`analysis.select.cuts`: a window ``c - d < x < c + d`` of a
centre ``c`` and a half-width ``d``) has thresholds *derived* from its bounds. Here,
once per pass and in one place, :func:`lower` turns each such cut into one-sided cuts on
*pseudo-parameters*, one per derived edge, appended to the parameter vector (the
kernels read ``theta[param]`` and seed the lane of its position in ``trainable``, for
any number of them: :mod:`analysis.pipeline.backends.numba.blocks`); the edges' values
and their derivatives ``D[k, j] = d edge_k / d theta[trainable[j]]`` come from the
kind's own ``edges`` (``jax.jacfwd``, one compiled program per structure), and
:meth:`Lowered.chain` multiplies the pseudo-parameters' Jacobian columns (or gradient
entries, reverse mode) by ``D`` and adds them to the parameters':
``J = J_theta + J_edges D``. Exact (the chain rule), float64.

Every pass the numba backend runs reads the lowered plan: states (object sets, branch
cuts, joint counts, leading objects, histograms, channel regions), entries, selected
weights, Poisson-bootstrap replicas (their points' passes, each lowered) and reverse
mode's yield gradients and pullbacks (the pseudo-parameters' gradient entries, chained
the same way). The original trainable parameters keep their lanes (a parameter may
also be read by another cut or a count), so each derived edge whose bounds move adds
one lane.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.plan import Plan, threshold_value
from analysis.pipeline.request import Request
from analysis.select import cuts as cut_kinds

__all__ = ["Lowered", "derives", "lower"]

#: a derived cut: its op and its bounds' ``(param, value)``
Key = tuple[str, tuple[tuple[int | None, float | None], ...]]


def derives(cut: Any) -> bool:
    """Whether ``cut``'s kind derives its one-sided thresholds from its bounds (``edges``)."""
    op = getattr(cut, "op", "") or ""
    if not op:
        return False
    try:
        kind = cut_kinds.kind_of(op)
    except KeyError:
        return False
    return getattr(kind, "sides", None) is not None and getattr(kind, "edges", None) is not None


@dataclass(frozen=True, eq=False)
class Lowered:
    """A pass with its derived edges as pseudo-parameters (module docstring).

    ``plan``/``request``: what the loops run (the parameter vector extended by the edges'
    values; trainable: the plan's trainable parameters that the loops still read, at
    positions ``kept`` of ``names``, then the pseudo-parameters whose edges move);
    ``inner``: that pass, prepared by the backend; ``names``: the original trainable
    parameters; ``jac``: ``D``, ``(moving edges, len(names))``.
    """

    plan: Plan
    request: Request
    names: tuple[str, ...]
    kept: tuple[int, ...]
    jac: np.ndarray
    inner: Any = None

    def chain(self, out: Any) -> Any:
        """``out`` of the lowered pass (a :class:`~analysis.pipeline.results.DatasetState`
        of states or gradients; entries and selected weights as they are) with the
        derivatives in the original parameters: ``J_theta + J_edges D`` on the trailing
        parameter axis, named ``names``."""
        derived = getattr(out, "derived", None)
        if derived is None:
            return out  # entries, selected weights: values only
        n, d, kept = len(self.kept), self.jac, list(self.kept)

        def back(leaf: Any) -> np.ndarray:
            a = np.asarray(leaf, dtype=np.float64)
            out = a[..., n:] @ d  # J_edges D, then J_theta where the loops read theta
            out[..., kept] += a[..., :n]
            return out

        if hasattr(derived, "grad"):  # reverse mode: a Pullback
            derived = type(derived)(self.names, derived.value, back(derived.grad))
        else:
            jac = None if derived.jac is None else jax.tree_util.tree_map(back, derived.jac)
            derived = type(derived)(self.names, derived.value, jac)
        out.derived = derived
        return out


def _all_cuts(plan: Plan) -> list[Any]:
    """Every cut of ``plan``: its sets' and event cuts, then its channel regions'."""
    cuts = [c for s in plan.sets.sets for c in s.cuts] + list(plan.event_cuts)
    for region in plan.regions:
        cuts += [c for s in region.sets.sets for c in s.cuts] + list(region.event_cuts)
    return cuts


def _keys(plan: Plan) -> list[Key]:
    """The derived cuts of ``plan`` (selection and channel regions), each once."""
    return list(dict.fromkeys((c.kind_op, c.bounds) for c in _all_cuts(plan) if derives(c)))


def _read(plan: Plan) -> set[int]:
    """The parameters a plan's loops read (a parameter enters a plan only so): cut and
    count thresholds, trainable histogram edges, learned scores' weights."""
    out = {p for c in _all_cuts(plan) for p, _ in c.bounds if p is not None}
    for sets in [plan.sets] + [r.sets for r in plan.regions]:
        out |= {p for p, _ in sets.thresholds if p is not None}
    for h in plan.hists:
        out |= set(h.edge_params or ())
    for spec in plan.scores:
        out |= set(range(spec.start, spec.start + spec.n_weights))
    return out


@lru_cache(maxsize=32)
def _edge_program(keys: tuple[Key, ...], kinds: tuple[Any, ...]):
    """``theta -> (edges, d edges / d theta)`` of the derived cuts ``keys`` (their kinds
    ``kinds``: part of the key, a kind registered later is a new program), compiled;
    each cut's edges in its kind's ``sides`` order."""

    def edges(theta):
        out = []
        for (op, bounds), kind in zip(keys, kinds, strict=True):
            values = [threshold_value(theta, p, v) for p, v in bounds]
            mine = cut_kinds.edges_of(kind, op, values)
            if len(mine) != len(kind.sides(op)):
                raise ValueError(f"cut kind {op!r}: {len(mine)} edges but "
                                 f"{len(kind.sides(op))} sides")
            out += [jnp.asarray(e, dtype=theta.dtype) for e in mine]
        return jnp.stack(out)

    return jax.jit(lambda theta: (edges(theta), jax.jacfwd(edges)(theta)))


def _cuts(cuts: tuple, first: dict[Key, int]) -> tuple:
    """``cuts`` with each derived one as its one-sided cuts on its pseudo-parameters
    (``first``: the index of each derived cut's first edge)."""
    out: list[Any] = []
    for c in cuts:
        if not derives(c):
            out.append(c)
            continue
        op, start = c.kind_op, first[c.kind_op, c.bounds]
        kind: Any = cut_kinds.kind_of(op)  # one with sides and edges (derives)
        out += [dataclasses.replace(c, greater=g, inclusive=i, param=start + k, value=None,
                                    op="", more=())
                for k, (g, i) in enumerate(kind.sides(op))]
    return tuple(out)


def _sets(sets: Any, first: dict[Key, int]) -> Any:
    specs = tuple(dataclasses.replace(s, cuts=_cuts(s.cuts, first)) for s in sets.sets)
    return dataclasses.replace(sets, sets=specs)


def lower(plan: Plan, request: Request) -> Lowered | None:
    """``plan`` and ``request`` with each derived edge a pseudo-parameter (module
    docstring), or None where no cut derives its edges. ``request.theta``: one point."""
    keys = tuple(_keys(plan))
    if not keys:
        return None
    kinds: tuple[Any, ...] = tuple(cut_kinds.kind_of(op) for op, _ in keys)
    theta = np.asarray(request.theta, dtype=np.float64).reshape(-1)
    with jax.default_device(jax.devices("cpu")[0]):
        values, slope = _edge_program(keys, kinds)(theta)
    values, slope = np.asarray(values, np.float64), np.asarray(slope, np.float64)
    n_par = len(plan.param_names)
    if theta.size != n_par:
        raise ValueError(f"theta has {theta.size} entries, the plan {n_par} parameters")
    first: dict[Key, int] = {}
    k = 0
    names, moving = list(plan.param_names), []
    trainable: list[int] = []
    for (op, bounds), kind in zip(keys, kinds, strict=True):
        n_edges = len(kind.sides(op))
        first[op, bounds] = n_par + k
        moves = any(p is not None and p in plan.trainable for p, _ in bounds)
        for e in range(n_edges):
            names.append(f"{op} edge {e} of {bounds}")
            if moves:
                trainable.append(n_par + k + e)
                moving.append(k + e)
        k += n_edges
    run = dataclasses.replace(
        plan, param_names=tuple(names), integer=tuple(plan.integer) + (False,) * k,
        event_cuts=_cuts(plan.event_cuts, first), sets=_sets(plan.sets, first),
        regions=tuple(dataclasses.replace(r, sets=_sets(r.sets, first),
                                          event_cuts=_cuts(r.event_cuts, first))
                      for r in plan.regions))
    # a parameter that only derived edges read takes no lane of its own
    read = _read(run)
    kept = tuple(j for j, p in enumerate(plan.trainable) if p in read)
    run = dataclasses.replace(run, trainable=tuple(plan.trainable[j] for j in kept)
                              + tuple(trainable))
    ext = dataclasses.replace(request, theta=np.concatenate([theta, values]))
    jac = slope[np.asarray(moving, np.int64)][:, np.asarray(plan.trainable, np.int64)]
    return Lowered(run, ext, plan.trainable_names, kept,
                   jac.reshape(len(moving), len(plan.trainable)))
