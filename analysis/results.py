"""Per-dataset accumulators and the statistics computed from them.

A chunk's output for one dataset is a :class:`DatasetState`: event count, sum of
event weights, and mergeable states (yields, centred moment sums, co-moments), each
with its Jacobian (and optionally Hessian) with respect to the trainable
parameters. ``DatasetState.__add__`` merges exactly (:mod:`analysis.stats.merge`),
so coffea's ``processor.accumulate`` gives the same result for any chunking,
executor or merge order.

Statistics are computed once, at the end, by a JAX function of the merged states.
Their derivatives follow from the states' Taylor expansion: for states
``s(theta0 + d) = s0 + J d + d^T H d / 2 + ...``, any function ``g`` of the states has
``grad g = d/dd g(s0 + J d) at d = 0`` (and the Hessian likewise), which
:func:`derivatives` evaluates with ``jax.jacfwd``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.plan import Plan
from analysis.stats import _core
from analysis.stats.merge import Dual, merge_comoments, merge_moments
from analysis.stats.registry import observable_statistics

# In a Moments / CoMoments tuple these positions hold constant centres, not Duals.
_CENTRES = {"moments": (1,), "comoments": (1, 3)}
_NAMED = {"moments": _core.Moments, "comoments": _core.CoMoments}


def _leaves_to_duals(kind: str, value: tuple, jac: tuple, hess: tuple | None) -> tuple:
    out = []
    for i, v in enumerate(value):
        if i in _CENTRES[kind]:
            out.append(np.array(v, dtype=np.float64))
        else:
            out.append(Dual(v, jac[i], None if hess is None else hess[i]))
    return tuple(out)


class DatasetState:
    """Mergeable per-dataset result of one or more chunks (see the module docstring)."""

    def __init__(
        self,
        *,
        events: int,
        sumw: float,
        chunks: int,
        yields: dict[str, Dual],
        observables: dict[str, dict[str, tuple]],
    ) -> None:
        self.events = int(events)
        self.sumw = float(sumw)
        self.chunks = int(chunks)
        self.yields = yields
        self.observables = observables

    @classmethod
    def from_chunk(
        cls,
        value: dict,
        jac: dict | None,
        hess: dict | None,
        *,
        events: int,
        sumw: float,
        n_params: int,
    ) -> DatasetState:
        """Build from :func:`analysis.kernel.evaluate_chunk` output for one chunk."""
        if jac is None:
            jac = jax.tree_util.tree_map(lambda v: np.zeros(np.shape(v) + (n_params,)), value)
        yields = {
            k: Dual(value[k], jac[k], None if hess is None else hess[k])
            for k in ("selected_sumw", "selected_sumw2")
        }
        observables = {}
        for name, entry in value["observables"].items():
            observables[name] = {
                kind: _leaves_to_duals(
                    kind,
                    tuple(entry[kind]),
                    tuple(jac["observables"][name][kind]),
                    None if hess is None else tuple(hess["observables"][name][kind]),
                )
                for kind in entry
            }
        return cls(events=events, sumw=sumw, chunks=1, yields=yields, observables=observables)

    def __add__(self, other: DatasetState) -> DatasetState:
        if not isinstance(other, DatasetState):
            return NotImplemented
        merge = {"moments": merge_moments, "comoments": merge_comoments}
        observables = {}
        for name in self.observables.keys() | other.observables.keys():
            a, b = self.observables.get(name), other.observables.get(name)
            if a is None or b is None:
                observables[name] = a if b is None else b
                continue
            observables[name] = {kind: merge[kind](a[kind], b[kind]) for kind in a}
        return DatasetState(
            events=self.events + other.events,
            sumw=self.sumw + other.sumw,
            chunks=self.chunks + other.chunks,
            yields={k: self.yields[k] + other.yields[k] for k in self.yields},
            observables=observables,
        )

    @property
    def n_params(self) -> int:
        return self.yields["selected_sumw"].grad.shape[-1]

    def taylor(self) -> tuple[dict, dict, dict | None]:
        """``(values, jacobians, hessians)`` pytrees of the states (JAX-ready, float64).

        Leaves of ``values`` are arrays; Moments/CoMoments keep their NamedTuple type.
        """

        def split(x, part):
            if isinstance(x, Dual):
                return getattr(x, part)
            p = self.n_params
            if part == "value":
                return x
            return np.zeros(np.shape(x) + ((p,) if part == "grad" else (p, p)))

        has_hess = self.yields["selected_sumw"].hess is not None
        parts = ("value", "grad", "hess") if has_hess else ("value", "grad")
        trees = []
        for part in parts:
            tree = {k: split(v, part) for k, v in self.yields.items()}
            tree["observables"] = {
                name: {
                    kind: _NAMED[kind](*(split(x, part) for x in t)) for kind, t in entry.items()
                }
                for name, entry in self.observables.items()
            }
            trees.append(tree)
        return trees[0], trees[1], (trees[2] if has_hess else None)


def statistics(states: dict, plan: Plan) -> dict:
    """JAX function: the statistics of one dataset from its (merged) states.

    Returns ``{"selected_sumw", "selected_sumw2", "observables": {name: {stat: value}}}``
    with ``linear_fit`` a dict of intercept, slope and their errors.
    """
    return {
        "selected_sumw": states["selected_sumw"],
        "selected_sumw2": states["selected_sumw2"],
        "observables": {
            obs.name: observable_statistics(states["observables"][obs.name], obs.statistics)
            for obs in plan.observables
        },
    }


def derivatives(
    fn: Callable[[Any], Any], values: Any, jacs: Any, hesses: Any = None, *, order: int = 1
) -> tuple[Any, Any, Any]:
    """Value, gradient and (``order=2``) Hessian of ``fn(states)`` w.r.t. the parameters.

    ``values``/``jacs``/``hesses`` are matching pytrees (jacobian leaves have a
    trailing parameter axis ``P``; Hessian leaves ``(P, P)``). Output leaves get
    trailing ``(P,)`` and ``(P, P)`` axes. Exact by the chain rule: the states'
    second-order Taylor polynomial has the same first and second derivatives.
    """
    p = jax.tree_util.tree_leaves(jacs)[0].shape[-1]

    def expanded(d):
        def one(v, j, h=None):
            out = v + j @ d
            if h is not None:
                out = out + 0.5 * jnp.einsum("...ij,i,j->...", h, d, d)
            return out

        if hesses is None:
            return jax.tree_util.tree_map(one, values, jacs)
        return jax.tree_util.tree_map(one, values, jacs, hesses)

    def g(d):
        return fn(expanded(d))

    d0 = jnp.zeros(p, dtype=jnp.float64)
    value = fn(jax.tree_util.tree_map(jnp.asarray, values))
    grad = jax.jacfwd(g)(d0)
    hess = jax.hessian(g)(d0) if order >= 2 else None
    return value, grad, hess


def _num(x: Any) -> float | None:
    """JSON number; NaN (undefined statistic) becomes ``null``."""
    x = float(x)
    return None if math.isnan(x) else x


def _grad_dict(g: np.ndarray, names: tuple[str, ...]) -> dict[str, float | None]:
    return {n: _num(v) for n, v in zip(names, np.asarray(g).reshape(-1))}


def dataset_report(state: DatasetState, plan: Plan, *, order: int = 1) -> dict:
    """The ``results.json`` entry of one dataset: values and gradients of every statistic."""
    values, jacs, hesses = state.taylor()
    val, grad, hess = derivatives(lambda s: statistics(s, plan), values, jacs, hesses, order=order)
    names = plan.trainable_names
    out: dict[str, Any] = {"events": state.events, "chunks": state.chunks, "sumw": state.sumw}
    for key in ("selected_sumw", "selected_sumw2"):
        out[key] = _num(val[key])
        out[f"{key}_grad"] = _grad_dict(grad[key], names)
    obs_out: dict[str, Any] = {}
    for name, stats in val["observables"].items():
        entry: dict[str, Any] = {}
        for stat, v in stats.items():
            g = grad["observables"][name][stat]
            if isinstance(v, dict):
                entry[stat] = {k: {"value": _num(v[k]), "grad": _grad_dict(g[k], names)} for k in v}
            else:
                entry[stat] = {"value": _num(v), "grad": _grad_dict(g, names)}
        obs_out[name] = entry
    out["observables"] = obs_out
    return out
