"""What a pullback payload asks of the numba reverse pass: the cotangents of each entry.

A payload (:func:`analysis.stats.pullback.pullback_payload`) gives per state of the merged
results ``(a, T_bar)``: the chunk's share of ``dL/dtheta`` is the gradient of
``<T_bar, T_c>`` with ``T_c`` the state's power sums about the constant ``a``
(:func:`analysis.stats.pullback.sums_about`): for ``Moments``, ``T_r = sum w (x - a)^r``
(``r <= 4``); for ``CoMoments``, ``(W, Sx, Sy, Sxx, Syy, Sxy)`` of ``w``, ``w e_x``,
``w e_y``, ``w e_x^2``, ``w e_y^2``, ``w e_x e_y`` (``e = x - a``). Both are sums over
the observable's entries, so the cotangent of each entry's weight and values is a
polynomial in its deviations (:func:`entry_cotangents`); the reverse pass
(:mod:`analysis.pipeline.backends.numba.fastreverse`) chains them to the objects' weights
and the pass probabilities (the walk's vector-Jacobian product) and to the score columns.
Entries here: observables of kinds ``S.f`` (and ``abs``) and branches; event sums and
indexed observables are pulled back through their walks
(:mod:`analysis.pipeline.backends.numba._revobs`); the pass pulls back every
observable kind (:func:`reads`: only a payload that does not fit the plan is refused).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from analysis.pipeline.backends.numba._fastrevhist import bar_key, per_event, split
from analysis.pipeline.plan import Plan
from analysis.pipeline.results import YIELDS, state_names

__all__: list[str] = []  # internal to the numba kernel


class Read(NamedTuple):
    """One observable state the payload reads."""

    index: int  # the observable's index in the plan
    state: str  # "moments" or "comoments"
    a: Any  # the anchor: a number, or (a_x, a_y)
    t_bar: tuple  # the power sums' cotangents


def parse(plan: Plan, payload: list) -> tuple[tuple[float, float], list[Read]] | str:
    """``((a1, a2), reads)``: the yields' cotangents and the observable states the payload
    reads (``plan``: without scores), or why the payload does not fit the plan's states."""
    if plan.hists:  # the histograms' states: _fastrevhist
        rest = split(plan, payload)
        if isinstance(rest, str):
            return rest
        payload = rest[0]
    names = state_names(plan)
    if len(names) != len(payload):
        return f"{len(payload)} payload entries for {len(names)} states"
    index = {o.name: i for i, o in enumerate(plan.observables)}
    a12 = [0.0, 0.0]
    reads = []
    for name, entry in zip(names, payload, strict=True):
        if entry is None:
            continue
        if name in YIELDS:
            a12[YIELDS.index(name)] = float(np.asarray(entry[1]))
            continue
        _, obs_name, state = name.split(".")
        i = index[obs_name]
        a, t_bar = entry
        a = (float(np.asarray(a[0])), float(np.asarray(a[1]))) if state == "comoments" \
            else float(np.asarray(a))
        reads.append(Read(i, state, a, tuple(np.asarray(t, np.float64) for t in t_bar)))
    return (a12[0], a12[1]), reads


def reads(plan: Plan, payload: list) -> str | None:
    """None when ``payload`` fits the states of ``plan``, else why not (:func:`parse`)."""
    out = parse(plan, payload)
    return out if isinstance(out, str) else None


def entry_cotangents(read: Read, x: np.ndarray, y: np.ndarray | None, w: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(dL/dw, dL/dx, dL/dy)`` per entry (values ``x``, ``y``, weights ``w``) of the
    state ``read`` (module docstring); ``dL/dy`` None for ``Moments``."""
    tb = [float(t) for t in read.t_bar]
    if read.state == "moments":
        d = x - read.a
        dw = tb[4] * d + tb[3]  # Horner: sum_r T_bar_r d^r
        for r in (2, 1, 0):
            dw = dw * d + tb[r]
        dd = 4.0 * tb[4] * d + 3.0 * tb[3]  # sum_r r T_bar_r d^(r - 1)
        for r in (2, 1):
            dd = dd * d + r * tb[r]
        return dw, w * dd, None
    assert y is not None
    ex, ey = x - read.a[0], y - read.a[1]
    dw = tb[0] + tb[1] * ex + tb[2] * ey + tb[3] * ex * ex + tb[4] * ey * ey + tb[5] * ex * ey
    return dw, w * (tb[1] + 2.0 * tb[3] * ex + tb[5] * ey), w * (tb[2] + 2.0 * tb[4] * ey
                                                                 + tb[5] * ex)


def _sign(node, cols, plan: Plan, flats: dict) -> np.ndarray | float:
    """``d|v|/dv = sign(v)`` of a node taken as ``abs``, else 1."""
    if node is None or not node.absolute:
        return 1.0
    v = (flats[plan.sets.collection_of(node.head)][node.field] if node.kind == "field"
         else cols.events[node.head])
    return np.sign(np.asarray(v, dtype=np.float64))


class Pulled(NamedTuple):
    """The observables' share of the cotangents, before the walk (module docstring)."""

    pbar: np.ndarray  # (E,) dL/dP_e from branch observables' entry weights ev_e P_e
    wbar: dict  # global set index -> (N_c,) dL/d(object weight), field observables
    # per read: (read, x, y, dL/dw per entry, the signs of abs(x), abs(y), and for a
    # field its set's global index and objects per event, else None and None)
    parts: list


def before_walk(reads: list[Read], plan: Plan, cols, flats: dict, coff: np.ndarray, tab,
                ev: np.ndarray) -> Pulled:
    """The cotangents of the pass probabilities and of the objects' weights the payload's
    ``reads`` of observables of kinds ``S.f`` and branches give (``plan`` without scores;
    ``flats``, ``coff``: the walk's
    fields and offsets per collection, ``tab`` its tables; ``ev`` ``(E,)`` the event
    weights times the soft branch cuts)."""
    from analysis.pipeline.backends.numba.fastkernel import _values

    pbar = np.zeros(ev.shape[0])
    wbar: dict = {}
    parts = []
    for read in reads:
        obs = plan.observables[read.index]
        x = _values(obs.x, cols, plan, flats, {})
        y = None if read.state == "moments" else _values(obs.y, cols, plan, flats, {})
        dw, _, _ = entry_cotangents(read, x, y, np.ones(1))
        signs = [_sign(node, cols, plan, flats) for node in (obs.x, obs.y)]
        gs = counts = None
        if obs.x.kind == "field":
            gs = tab.gidx[obs.x.head]
            counts = np.diff(coff[tab.collections.index(plan.sets.collection_of(obs.x.head))])
            wbar[gs] = wbar.get(gs, 0.0) + np.repeat(ev, counts) * dw
        else:
            pbar += ev * dw
        parts.append((read, x, y, dw, signs, gs, counts))
    return Pulled(pbar, wbar, parts)


def after_walk(pulled: Pulled, plan: Plan, ev: np.ndarray, walk, bars: dict) -> np.ndarray:
    """``(E,)`` ``dL/dev_e`` from the observables' entry weights, and their values'
    cotangents into the score columns' ``bars`` (one row) where a value is a score's
    column; ``walk``: the sensitivities' walk (its ``pe``, objects' weights ``ow``)."""
    evbar = np.zeros(ev.shape[0])
    for read, x, y, dw, signs, gs, counts in pulled.parts:
        obs = plan.observables[read.index]
        if gs is not None:  # a field: its objects' weights
            ow = walk.ow[gs]
            w = np.repeat(ev, counts) * ow
            evbar += per_event(counts, ow * dw)
        else:
            w = ev * walk.pe
            evbar += walk.pe * dw
        _, dx, dy = entry_cotangents(read, x, y, w)
        for node, d, sign in ((obs.x, dx, signs[0]), (obs.y, dy, signs[1])):
            key = bar_key(node, plan) if d is not None else None
            if key in bars:  # a score's column (d|v|/dv = sign(v))
                bars[key][:, : d.size] += d * sign
    return evbar
