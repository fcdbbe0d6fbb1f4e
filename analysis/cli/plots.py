"""PNG plots of an optimisation: objective and parameters per step, and histograms
of the main observable (the first in the config) at the initial and final selection.

Axes carry units (:mod:`analysis.cli.units`); parameter traces show their bounds
(outside shaded) and the final hard-cut value; histograms are "per bin" with the bin
width, errors from the sum of squared weights (none on empty bins, no Poisson bars on
weighted samples), and a log y axis when the contents span more than two decades
(bins below 1e-3 of their histogram's largest, such as a soft selection's far
tails, aside). A learned score's distribution for signal and background before and
after, with its cut (:func:`plot_scores`, ``score_NAME.png``).

``signal_background.png`` (:func:`overlay_data`): signal and background of the
main observable together, at the initial (left) and the final (right) selection, in
expected events per bin width: the backgrounds stacked (mplhep), the signal drawn on
top of the stack and named. A per-object observable (``Jet.pt``) has one entry per
object: the axis says "expected jets", not events.
"""


from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.figures import _crop, _per_width, _pyplot, _save, _stack_yscale
from analysis.cli.historyplots import plot_history, plot_objective, plot_parameters
from analysis.cli.outdir import inside
from analysis.cli.scoreplots import plot_scores, score_cuts
from analysis.cli.units import axis_label, lumi_label, observable_unit

__all__ = [
    "OVERLAY",
    "draw_histogram",
    "draw_overlay",
    "entries_noun",
    "histogram_data",
    "histogram_range",
    "overlay_data",
    "overlay_figure",
    "plot_histograms",
    "plot_history",
    "plot_objective",
    "plot_parameters",
    "plot_scores",
    "score_cuts",
]


#: The overlay's file: no ``hist_`` prefix, so that no dataset's ``hist_NAME.png`` is it.
OVERLAY = "signal_background.png"


def histogram_range(
    config, evaluator, params: dict[str, float], widths, *, states: dict | None = None
) -> tuple[int, float, float]:
    """Binning of the main observable: from its config ``hist``, else
    :data:`_FINE_BINS` bins over mean - 5 std .. mean + 8 std of the states at
    ``params`` and ``widths`` (``states`` if given: a pass's states at exactly those
    values, e.g. an optimisation's step 0; else a values-only pass), which
    :func:`plot_histograms` crops to the range the filled histograms occupy (the
    observed support); an observable in GeV (pT, mass, HT, ...) or a count never
    starts below 0."""
    obs = config.observables[0]
    if obs.hist is not None:
        return obs.hist.bins, obs.hist.range[0], obs.hist.range[1]
    from analysis.stats import _statefns

    if states is None:
        states = evaluator.run(params, widths=widths, order=0)
    lows, highs = [], []
    for st in states.values():
        if "moments" not in st.observables[obs.name]:
            continue
        values = st.taylor()[0]["observables"][obs.name]["moments"]
        mean = float(_statefns.state_mean(values))
        std = float(_statefns.state_std(values))
        if np.isfinite(mean) and np.isfinite(std):
            lows.append(mean - 5 * std)
            highs.append(mean + 8 * std)
    if not lows:
        return 40, 0.0, 1.0
    low, high = auto_range(lows, highs, nonnegative=nonnegative(obs))
    if not high > low:
        return 40, low - 0.5, low + 0.5
    return _FINE_BINS, low, high


#: fine bins of an automatic range, cropped to the occupied ones and merged to ~40
_FINE_BINS = 400


def crop_to_support(hists: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{dataset: hist.Hist}]`` on one fine binning, each cut to the bins where any of
    them holds more than 1e-4 of its largest bin (a soft selection's far tails aside:
    the observed support) and rebinned to about 40 bins (:func:`_crop`)."""
    import hist as hist_

    flat = [h for per in hists for h in per.values()]
    if not flat:
        return hists
    first, stop, merge = _crop([np.asarray(h.values(), dtype=np.float64) for h in flat], [])
    merge = max(1, merge)
    return [{d: h[first:stop:hist_.rebin(merge)] for d, h in per.items()} for per in hists]


def nonnegative(obs) -> bool:
    """Whether observable ``obs`` cannot be negative: in GeV (momenta, masses, energies,
    HT: :func:`analysis.cli.units.observable_unit`) or a count."""
    x = obs.x.strip()
    return observable_unit(obs) == "GeV" or x.startswith("count(")


def auto_range(lows, highs, *, nonnegative: bool) -> tuple[float, float]:
    """``(low, high)`` covering every dataset's ``[low, high]``, cut at 0 for a
    non-negative observable."""
    low, high = min(lows), max(highs)
    if nonnegative:
        low = max(low, 0.0)
    return low, high


def _draw(ax, h, label: str, color: str, norm: float | None = None) -> np.ndarray:
    """A step histogram with errors sqrt(sum of squared weights), none on empty bins;
    ``norm`` scales the contents (and the errors) to expected events."""
    import mplhep

    k = 1.0 if norm is None else float(norm)
    values = k * h.values()
    variances = k * k * h.variances()
    err = np.where(values != 0, np.sqrt(np.clip(variances, 0, None)), 0.0)
    mplhep.histplot(values, h.axes[0].edges, yerr=err, ax=ax, label=label, color=color)
    return values


def plot_histograms(
    evaluator,
    config,
    initial: dict[str, float],
    w0,
    final: dict[str, float],
    outdir: Path,
    *,
    initial_states: dict | None = None,
    norms: dict[str, float] | None = None,
) -> list[Path]:
    """``hist_<dataset>.png``: the main observable at the initial and the final
    selection, both with hard cuts (width 0), filled in one pass. ``initial_states``: the states at ``initial``
    and ``w0`` if already computed (for the binning when the config gives none).
    ``norms``: per dataset ``xsec x lumi / sum of weights`` (as the yields): the
    histograms are then in expected events and the axis says so. With every dataset
    normalised, also ``signal_background.png`` (:func:`overlay_figure`).
    :func:`histogram_data` (the pass) then :func:`draw_histogram` per dataset and
    :func:`draw_overlay`."""
    data = histogram_data(evaluator, config, initial, w0, final,
                          initial_states=initial_states, norms=norms)
    paths = [draw_histogram(data, ds, outdir) for ds in data["datasets"]]
    overlay = draw_overlay(data, outdir)
    return paths + ([overlay] if overlay is not None else [])


def histogram_data(
    evaluator,
    config,
    initial: dict[str, float],
    w0,
    final: dict[str, float],
    *,
    initial_states: dict | None = None,
    norms: dict[str, float] | None = None,
) -> dict[str, Any]:
    """What :func:`plot_histograms` draws, as plain data (no matplotlib): the main
    observable filled at the initial and final selection (hard cuts both) in one pass,
    per dataset ``{"before", "after"}`` (``hist.Hist``), ``"norm"`` and ``"weighted"``;
    the axis labels, legend title and the overlay's panels (:func:`overlay_data`, None
    unless every dataset is normalised). Arguments as for :func:`plot_histograms`."""
    bins, low, high = histogram_range(config, evaluator, initial, w0, states=initial_states)
    binning = {"index": 0, "bins": bins, "low": low, "high": high}
    before, after = evaluator.fill_histograms(
        [
            # hard against hard: the initial cuts at width 0 beside the final ones (a
            # soft selection's smeared edges beside hard ones would compare two things)
            {**binning, "params": initial, "widths": np.zeros_like(w0)},
            {**binning, "params": final, "widths": np.zeros_like(w0)},
        ]
    )
    obs = config.observables[0]
    if obs.hist is None and bins == _FINE_BINS:  # an automatic range: the observed support
        before, after = crop_to_support([before, after])
        edges = next(iter(before.values())).axes[0].edges
        low, high, bins = float(edges[0]), float(edges[-1]), len(edges) - 1
    unit = observable_unit(obs)
    width = (high - low) / bins
    noun = entries_noun(evaluator.plan, 0)
    overlay = None
    if norms and all(d in norms for d in config.datasets):
        overlay = (overlay_data(before, config, norms, noun=noun, unit=unit),
                   overlay_data(after, config, norms, noun=noun, unit=unit))
    return {
        "datasets": {ds: {"before": before[ds], "after": after[ds],
                          "norm": (norms or {}).get(ds),
                          "weighted": config.datasets[ds].weight is not None}
                     for ds in config.datasets},
        "xlabel": axis_label(obs.name, unit),
        "per_bin": f"{width:.3g} {unit}".strip(),
        "noun": noun,
        "legend_title": f"{obs.name} = {obs.x}",
        "lumi": config.lumi,
        "overlay": overlay,
    }


def draw_histogram(data: dict[str, Any], ds: str, outdir: Path) -> Path:
    """``hist_<ds>.png`` from :func:`histogram_data`'s ``data``: the initial and the
    final selection (hard cuts both), errors from the sum of squared weights; its path."""
    plt = _pyplot()
    d = data["datasets"][ds]
    norm = d["norm"]
    fig, ax = plt.subplots(figsize=(9, 6.5))
    a = _draw(ax, d["before"], "initial selection (hard cuts)", "C0", norm)
    b = _draw(ax, d["after"], "final selection (hard cuts)", "C3", norm)
    ax.set_xlabel(data["xlabel"])
    what = "sum of weights" if d["weighted"] else "entries"
    if norm is not None:
        what = f"expected {data['noun']}"
    ax.set_ylabel(f"{what} / {data['per_bin']}")
    both = np.concatenate([a, b])
    # the soft selection's far tails (1e-8 of an event) are not "contents": bins
    # below 1e-3 of each histogram's largest do not decide the scale
    positive = np.concatenate([v[v >= 1e-3 * v.max()] for v in (a, b) if v.size and v.max() > 0]
                              or [both[:0]])
    if positive.size and both.min() >= 0 and positive.max() > 100 * positive.min():
        ax.set_yscale("log")
        ax.set_ylim(positive.min() / 3, positive.max() * 30)  # room for the legend
    elif both.size and both.max() > both.min():
        top = max(both.max(), 0.0)
        ax.set_ylim(min(both.min(), 0.0) * 1.2, top + 0.45 * (top - min(both.min(), 0.0)))
    ax.set_title(ds + (f"   {lumi_text(data['lumi'])}" if norm is not None else ""),
                 fontsize=18, loc="left")
    ax.legend(fontsize=14, title=data["legend_title"], title_fontsize=13)
    fig.tight_layout()
    path = inside(outdir, f"hist_{ds}.png")
    _save(fig, path)
    plt.close(fig)
    return path


def draw_overlay(data: dict[str, Any], outdir: Path) -> Path | None:
    """``signal_background.png`` from :func:`histogram_data`'s ``data``
    (:func:`overlay_figure`); its path, None where there is nothing to draw."""
    if data["overlay"] is None:
        return None
    plt = _pyplot()
    fig = overlay_figure(*data["overlay"], xlabel=data["xlabel"], lumi=data["lumi"])
    if fig is None:
        return None
    path = inside(outdir, OVERLAY)
    _save(fig, path)
    plt.close(fig)
    return path


#: the plural of what one entry of a per-object observable of a collection is
_OBJECT_NOUNS = {"Jet": "jets", "FatJet": "large-R jets", "Muon": "muons",
                 "Electron": "electrons", "Photon": "photons", "Tau": "taus",
                 "GenPart": "generator particles", "GenJet": "generator jets"}


def entries_noun(plan, index: int | str) -> str:
    """What one entry of an observable is: ``index`` an observable's position in the
    plan, or an expression (``"bjets.pt"``, a histogram's ``x``). ``"events"``, or for a
    per-object observable (``Jet.pt``, ``jets.pt``: one entry per object) the objects
    of its collection (``"jets"``, ``"muons"``, else ``"COLLECTION objects"``)."""
    names = {s.name for s in plan.sets.sets}
    if isinstance(index, str):
        from analysis.select import exprs

        try:
            node = exprs.resolve(exprs.parse(index), names)
        except ValueError:
            return "events"
    else:
        node = plan.observables[index].x
    if getattr(node, "level", "event") != "object" or node.head is None:
        return "events"
    coll = plan.sets.collection_of(node.head) if node.head in names else node.head
    return _OBJECT_NOUNS.get(coll, f"{coll} objects")


def lumi_text(lumi: float) -> str:
    """``"L = 0.02 pb^-1"`` (mathtext) for a title: what ``xsec x L`` was scaled to."""
    return f"$L$ = {lumi_label(lumi)} (xsec $\\times$ $L$)"


def overlay_data(hists: dict[str, Any], config, norms: dict[str, float], *,
                 noun: str = "events", unit: str = "") -> dict[str, Any]:
    """What one panel of ``signal_background.png`` draws, from ``{dataset:
    hist.Hist}``: ``edges``, ``backgrounds`` ``{dataset: values}`` (stacked, smallest
    first), ``signal`` ``{dataset: values}``, ``signal_label``, ``ylabel``; every value in
    expected entries (``norms[dataset] x sum of weights``) per unit of x (``/ GeV``) on
    variable-width bins, else per bin with its width said on the axis."""
    first = next(iter(hists.values()))
    edges = np.asarray(first.axes[0].edges, dtype=np.float64)
    widths, variable, scale = _per_width(edges)
    roles = {d: config.datasets[d].role for d in hists}
    values = {d: float(norms[d]) * np.asarray(h.values(), dtype=np.float64) * scale
              for d, h in hists.items()}
    # an empty sample (nothing selected) is no part of the stack nor of its legend
    bkg = {d: v for d, v in values.items() if roles[d] != "signal" and np.any(v != 0)}
    bkg = dict(sorted(bkg.items(), key=lambda kv: float(np.sum(kv[1]))))
    sig = {d: v for d, v in values.items() if roles[d] == "signal"}
    if variable:
        ylabel = f"expected {noun} / {unit}" if unit else f"expected {noun} per unit of x"
    else:
        ylabel = f"expected {noun} / {f'{widths[0]:.3g} {unit}'.strip()}"
    return {"edges": edges, "backgrounds": bkg, "signal": sig,
            "signal_label": f"{', '.join(sig) or 'signal'} (signal) on the background",
            "ylabel": ylabel}


def overlay_figure(before: dict[str, Any], after: dict[str, Any], *, xlabel: str,
                   lumi: float):
    """The figure of ``signal_background.png``: :func:`overlay_data` of the initial
    (left) and final (right) selection, backgrounds stacked (filled), the signal on top of
    the stack (a red line), a log y axis where the contents span more than two decades.
    None when there is neither signal nor background."""
    import mplhep

    if not before["backgrounds"] and not before["signal"]:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(17, 7))
    for ax, d, what in ((axes[0], before, "initial selection (hard cuts)"),
                        (axes[1], after, "final selection (hard cuts)")):
        edges = d["edges"]
        base = (np.sum(list(d["backgrounds"].values()), axis=0) if d["backgrounds"]
                else np.zeros(edges.size - 1))
        if d["backgrounds"]:
            mplhep.histplot(list(d["backgrounds"].values()), edges, stack=True,
                            histtype="fill", label=list(d["backgrounds"]), ax=ax)
        total = base + (np.sum(list(d["signal"].values()), axis=0) if d["signal"] else 0.0)
        if d["signal"]:
            mplhep.histplot(total, edges, histtype="step", color="red", linewidth=2,
                            label=d["signal_label"], ax=ax)
        top = float(np.max(total, initial=0.0))
        _stack_yscale(ax, total, base, top, linear=1.45 * top)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(d["ylabel"])
        ax.set_title(what, fontsize=16, loc="left")
        ax.set_title(f"$L$ = {lumi_label(lumi)}", fontsize=14, loc="right")
        ax.legend(fontsize=12)
    fig.tight_layout()
    return fig
