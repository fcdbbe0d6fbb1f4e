"""The sizes a config implies, checked against :func:`analysis.limits.memory_limit` before any chunk.

Lower bounds of the largest arrays a pass allocates per chunk, each from the config key
that sets it (one float64 per entry, ``E`` = events of the largest chunk, padded as the
kernels pad them: a power of two >= 64):

- count states: ``E * S`` with ``S`` the joint count states (single-collection form:
  ``cap + 1``, ``cap = floor(max(init, upper bound)) + 2``; object sets:
  ``prod (cap_v + 1)``), times the grid points of a scan;
  key: the count's ``value`` or its parameter's ``bounds``;
- candidates of an indexed observable on capped collections:
  ``E * prod C(max_objects, i + 1)``; key: ``objects.<set>.max_objects`` (the cap counts
  the objects a width-0 pre-selection leaves, :func:`analysis.data.columns.extract_columns`;
  the candidates are drawn from the objects that can be in the set, never more);
- histograms: ``bins + 2`` per dataset, times the grid points; key ``observables.<k>.hist.bins``;
- chunk buffers: ``E`` times the columns read (weight, event branches, object fields of
  the sets, at least one value per event each); key ``executor.chunksize``
  (or ``--chunksize``);
- learned scores: ``E`` times the sum of the hidden widths (one activation per layer
  and event, at least); key ``scores.<i>.mlp.hidden``;
- the binned likelihood's profile fit: its exact Hessian is ``N x N`` for ``N``
  nuisances (lnN, shapes, one MC-statistics factor per bin), and each of its ``N``
  tangents carries the ``(samples, bins)`` templates of every channel:
  ``max(N, samples x bins) x N`` entries; key ``likelihood.channels`` (the bins are
  the channels' histograms'); and its templates (nominal, up and down of each shape
  systematic) of every sample and bin, once per nuisance:
  ``samples x bins x (1 + 2 x shapes) x N`` entries; key ``systematics``.

Any one beyond the limit is a one-line :class:`~analysis.limits.ResourceError`.
"""

from __future__ import annotations

import math
from typing import Any

from analysis.limits import check_bytes

__all__ = ["check_fit", "check_sizes", "padded_events"]

_FLOAT = 8


def padded_events(n: int) -> int:
    """Events of a chunk of ``n`` as the kernels pad it (power of two, at least 64)."""
    return max(64, 1 << max(int(n) - 1, 0).bit_length())


def _count_key(config: Any, i: int, entry: Any, where: str) -> str:
    if entry.param is not None:
        return f"parameters.{entry.param}.bounds"
    return f"{where}.{i}.value"


def _count_states(config: Any, plan: Any) -> tuple[int, str]:
    """``(joint count states, key of the largest count)``."""
    params = config.parameters
    entries = [(i, e) for i, e in enumerate(config.selection.entries or []) if e.count]
    where = "selection"
    n_states = int(plan.sets.model.n_states)
    best, key = -math.inf, "selection"
    for i, e in entries:
        if e.param is not None:
            p = params[e.param]
            top = max(p.init, p.bounds[1] if p.bounds else p.init)
        else:
            top = e.value
        if top > best:
            best, key = top, _count_key(config, i, e, where)
    return n_states, key


def check_sizes(config: Any, plan: Any, *, events: int, grid_points: int = 1) -> None:
    """Check the sizes ``config`` (built into ``plan``) implies for chunks of ``events``.

    ``grid_points``: parameter points evaluated together (``scan``). Raises
    :class:`~analysis.limits.ResourceError` naming the key, the size and the limit.
    """
    src = config.source
    e = padded_events(events)
    g = max(int(grid_points), 1)
    columns = 1 + len(plan.event_keys) + sum(len(f) for _, f in plan.sets.fields)
    check_bytes(
        f"{src}: executor.chunksize", float(e) * columns * _FLOAT,
        f"{columns} columns x {e} events per chunk",
    )
    n_states, key = _count_states(config, plan)
    grid = f" x {g} grid points" if g > 1 else ""
    check_bytes(
        f"{src}: {key}", float(e) * n_states * g * _FLOAT,
        f"{n_states} count states x {e} events per chunk{grid}",
    )
    sets = plan.sets
    caps, cap_keys = sets.caps, sets.cap_keys
    for k, (x, y) in enumerate(sets.nodes):
        for node in (x, y):
            slots = node.slots if node is not None else ()
            colls = {sets.collection_of(s) for s, _ in slots}
            if not slots or not colls <= set(caps):
                continue  # uncapped: at most 4096 candidates per event (ObjectCapError)
            top: dict[str, int] = {}
            for s, i in slots:
                top[s] = max(top.get(s, -1), i)
            cands = math.prod(math.comb(caps[sets.collection_of(s)], i + 1)
                              for s, i in top.items())
            where = cap_keys[sets.collection_of(next(iter(top)))]
            check_bytes(
                f"{src}: {where}", float(e) * cands * g * _FLOAT,
                f"{cands} candidates of observables.{k} ({node.text}) x {e} events per chunk",
            )
    for i, sc in enumerate(getattr(config, "scores", None) or []):
        width = sum(sc.mlp.hidden)
        check_bytes(f"{src}: scores.{i}.mlp.hidden", float(e) * width * g * _FLOAT,
                    f"{width} activations x {e} events per chunk")
    check_fit(config)
    for k, obs in enumerate(config.observables):
        if obs.hist is not None:
            n = (obs.hist.bins + 2) * len(config.datasets) * g
            check_bytes(f"{src}: observables.{k}.hist.bins", float(n) * _FLOAT,
                        f"{n} histogram bins")


def check_fit(config: Any) -> None:
    """The profile fit's size (module docstring) against the memory limit."""
    lk = getattr(config, "likelihood", None)
    if lk is None:
        return
    hists = {h.name: h for h in config.histograms}
    samples = sum(d.role in ("signal", "background") for d in config.datasets.values())
    bins = sum(len(hists[ch.histogram].bin_edges()) - 1 for ch in lk.channels.values())
    n = len(config.systematics) + (bins if lk.mc_stat else 0)
    cells = samples * bins
    check_bytes(f"{config.source}: likelihood.channels", float(max(n, cells)) * n * _FLOAT,
                f"the profile fit's Hessian and tangents: {n} nuisances x {max(n, cells)} "
                f"({len(lk.channels)} channels, {bins} bins, {samples} samples)")
    # every template (nominal, and up and down of each shape systematic) of every sample
    # and bin, once per nuisance: the morphing's tangents in the fit's Hessian (forward
    # over reverse). A lower bound: 10,000 bins x 20 shapes, 2 samples: 131 MB estimated,
    # 455 MB measured (peak RSS of lk.significance; 279 MB against 26 MB at 2,000 bins)
    shapes = sum(s.type in ("shift", "weight") for s in config.systematics)
    templates = cells * (1 + 2 * shapes)
    check_bytes(f"{config.source}: systematics", float(templates) * max(n, 1) * _FLOAT,
                f"the profile fit's template tangents: {templates} template bins ({cells} "
                f"sample bins x (1 + 2 x {shapes} shape systematics)) x {n} nuisances")
