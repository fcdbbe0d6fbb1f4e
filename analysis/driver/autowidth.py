"""Cut widths from the data: what ``optimize`` gives a trainable threshold without a width.

A soft cut ``sigmoid((x - t) / w)`` has a gradient in ``t`` from the entries within a
few ``w`` of the threshold; too narrow a ``w`` leaves a handful of entries there (a
gradient that jumps from event to event), too wide a one makes the soft objective
another function than the hard-cut one (the optimiser climbs the wrong hill). A scale
that suits a pT cut in GeV does not suit a b-tag score in [0, 1], nor a sample of 200
events one of 10^6. So the width is read from the entries near the threshold:

    w = (q(F(t) + p/2) - q(F(t) - p/2)) / 8,   p = WINDOW = 0.5

``F`` is the cumulative distribution of the cut's variable over the entries (objects of
the cut's collection, or events for an event-level cut) inside the parameter's bounds,
before any cut, each dataset weighted by its event weights and normalised to one (so a
small signal sample shapes it as much as a large background: the gradient needs both
near the threshold); ``q`` its quantile function; ``t`` the initial threshold (the
window slides inward at the ends of the bounds). The window is the local
inter-quartile range: the middle half of the entries in rank around the threshold, a
robust spread (one far outlier does not move it, a standard deviation would) that
follows the local density (a falling pT spectrum gives a narrower width at 20 GeV than
at 100). The sigmoid's transition ``|x - t| < 2 w`` (its 12 %-88 % part) then spans
half of that range: about a quarter of the entries at the start, so the gradient sees
many events even in a sample of a few hundred, and with the default annealing (final
width factor 0.1) a few percent at the end, where the soft objective is close to the
hard one. On the demo's generated samples it gives 2.2 GeV, 0.37 and 0.050 for the pT,
|eta| and b-tag cuts (the demo's hand-tuned widths: 5, 0.2, 0.05). Floor: 1/1000 of the
bounds' range (a gap in the distribution at ``t``); a cut with no entries in its bounds
gets 1/20 of the range.

Rule and values are in results.json (``auto_widths``). One pass of an auxiliary config
(the datasets and object sets, no cuts, the variables as histograms of
:data:`BINS` bins over the bounds), run before the optimisation; ``width: auto`` asks
for it explicitly, a number still wins, count thresholds keep their integer smoothing
(width 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from analysis.config.loader import Config, config_from_dict
from analysis.driver.runner import Evaluator

__all__ = ["BINS", "RULE", "WINDOW", "auto_widths", "quantile_width"]

#: the fraction of the entries in the bounds that the window around the threshold holds
WINDOW = 0.5
#: histogram bins over the bounds (the quantiles' resolution: 1/BINS of the range)
BINS = 2000
RULE = (f"w = (q(F(t) + {WINDOW / 2:g}) - q(F(t) - {WINDOW / 2:g})) / 8 over the entries "
        "inside the bounds, each dataset normalised to one (analysis.driver.autowidth)")


def quantile_width(counts: np.ndarray, lo: float, hi: float, t: float) -> float:
    """The rule's width (module docstring) from a histogram ``counts`` of equal bins
    over ``[lo, hi]`` (summed over datasets, each normalised) and the threshold ``t``."""
    counts = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
    total = counts.sum()
    if not total > 0:
        return (hi - lo) / 20
    edges = np.linspace(lo, hi, len(counts) + 1)
    cdf = np.concatenate([[0.0], np.cumsum(counts) / total])
    at = float(np.interp(t, edges, cdf))
    a = min(max(at - WINDOW / 2, 0.0), 1.0 - WINDOW)
    # the inverse of the (piecewise linear) cdf: of a flat stretch (empty bins) the
    # last edge, where the next bin's entries start
    keep = np.concatenate([np.diff(cdf) > 0, [True]])
    q = np.interp([a, a + WINDOW], cdf[keep], edges[keep])
    return max(float(q[1] - q[0]) / 8, (hi - lo) / 1000)


def _targets(config: Config) -> list[tuple[Any, str, str, tuple[float, float], float]]:
    """``(cut, label, expression, bounds, threshold)`` of every cut that wants a width
    from the data (the first of its thresholds that is a trainable parameter)."""
    out = []

    def add(cut, label: str, x: str) -> None:
        for param, _ in cut.thresholds():
            # a fixed parameter needs no gradient: its cut stays hard
            if param is not None and config.parameters[param].trainable:
                p = config.parameters[param]
                bounds = p.bounds if p.bounds is not None else (p.init - 1.0, p.init + 1.0)
                out.append((cut, label, x, tuple(bounds), float(p.init)))
                return

    for name, s in config.objects.items():
        for cut in s.cuts:
            if cut.wants_auto_width:
                field = cut.var[4:] if cut.var.startswith("abs_") else cut.var
                x = f"{name}.{field}"
                add(cut, f"{name}.{cut.var}", f"abs({x})" if cut.var.startswith("abs_") else x)
    for e in config.selection.entries or []:
        if e.wants_auto_width:
            x = e.var[4:] if e.var.startswith("abs_") else e.var
            add(e, e.var, f"abs({x})" if e.var.startswith("abs_") else x)
    return out


def auto_widths(config: Config, **evaluator_options: Any) -> dict[str, Any] | None:
    """Fill in the widths of ``config``'s cuts that want one from the data (in place).

    Parameters
    ----------
    config : Config
        Changed in place: each such cut's ``width`` becomes the rule's number (so the
        plan, the checkpoint and results.json carry it).
    **evaluator_options
        Passed to the auxiliary pass's :class:`~analysis.driver.runner.Evaluator`.

    Returns
    -------
    dict or None
        ``{"rule", "window", "widths": {label: width}}``, None where no cut wants one
        (and no pass runs).
    """
    todo = _targets(config)
    if not todo:
        return None
    data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.update(parameters={}, scores=[], selection=[], output={})
    # the nominal spread only: no objective, and no likelihood nor its variations (a
    # config with systematics but no likelihood is refused)
    for key in ("objective", "likelihood", "systematics"):
        data.pop(key, None)
    data["objects"] = {name: {**s, "cuts": []} for name, s in data["objects"].items()}
    data["observables"] = []
    data["histograms"] = [{"name": f"w{k}", "x": x, "bins": {"n": BINS, "lo": lo, "hi": hi}}
                          for k, (_, _, x, (lo, hi), _) in enumerate(todo)]
    aux = config_from_dict(data, source=config.source, base_dir=config.base_dir)
    with Evaluator(aux, **evaluator_options) as ev:
        states = ev.run(order=0)
    widths = {}
    for k, (cut, label, _, (lo, hi), t) in enumerate(todo):
        counts = np.zeros(BINS)
        for st in states.values():
            # inside the bounds only (the flow bins are apart)
            h = np.asarray(st.derived.value["histograms"][f"w{k}"].sumw, dtype=np.float64)
            if h.sum() > 0:
                counts += h / h.sum()
        cut.width = quantile_width(counts, lo, hi, t)
        widths[label] = cut.width
    return {"rule": RULE, "window": WINDOW, "widths": widths}
