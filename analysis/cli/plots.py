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

import math
from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.outdir import inside
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


def _save(fig, path: Path) -> None:
    """``fig`` as a PNG, atomically (a full disk: one line naming the path, no partial file)."""
    from analysis.data.atomic import atomic_open

    with atomic_open(path, what="plot") as f:
        fig.savefig(f, format="png", dpi=100)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on these machines
    import matplotlib.pyplot as plt
    import mplhep

    plt.style.use(mplhep.style.CMS)
    return plt


def _per_width(edges: np.ndarray) -> tuple[np.ndarray, bool, np.ndarray]:
    """``(widths, variable, scale)`` of bin ``edges``: on variable-width bins every value
    is multiplied by ``scale = 1 / width`` (entries per unit of x), else by 1 (per bin)."""
    widths = np.diff(edges)
    variable = not np.allclose(widths, widths[0], rtol=1e-9, atol=0.0)
    return widths, variable, (1.0 / widths if variable else np.ones_like(widths))


def _stack_yscale(ax, total: np.ndarray, base: np.ndarray, top: float, linear: float) -> None:
    """A log y axis where the stack (``total``, and the background ``base`` under it,
    which may be 1e-3 of the signal after the cuts) spans more than two decades, else
    linear up to ``linear``; a soft selection's far tails (below 1e-5 of ``top``) do
    not decide the scale."""
    both = np.concatenate([total, base])
    positive = both[both > 1e-5 * top] if top > 0 else both[:0]
    if positive.size and positive.max() > 100 * positive.min():
        ax.set_yscale("log")
        ax.set_ylim(positive.min() / 3, top * 50)  # room for the legend
    elif linear > 0:
        ax.set_ylim(0, linear)


def _is_minus_significance(history: list[dict[str, Any]]) -> bool:
    """The objective is ``-Z_A`` at every step (a lone significance term)."""
    return bool(history) and all(
        h.get("significance") is not None
        and h.get("objective") is not None
        and math.isclose(h["objective"], -h["significance"], rel_tol=1e-9, abs_tol=1e-12)
        for h in history
    )


def plot_history(report: dict[str, Any], outdir: Path) -> list[Path]:
    """``objective.png`` and ``parameters.png`` from an ``optimize`` results.json ``report``
    (:func:`plot_objective`, then :func:`plot_parameters`); their paths."""
    paths = [plot_objective(report, outdir)]
    parameters = plot_parameters(report, outdir)
    return paths + ([parameters] if parameters is not None else [])


def plot_objective(report: dict[str, Any], outdir: Path) -> Path:
    """``objective.png`` from an ``optimize`` results.json ``report``: the soft Asimov
    significance per step when the objective is ``-Z_A``, else the objective, with the
    hard-cut value at the start and the end; its path."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    history = report["history"]
    status = report.get("status") or {}
    steps = [h["step"] for h in history]
    last = (steps[-1] + 1) if steps else 1

    fig, ax = plt.subplots(figsize=(9, 6))
    if _is_minus_significance(history):
        y = [h["significance"] for h in history]
        label, ylabel, hard = "soft cuts (annealed widths)", r"Asimov significance $Z_A$", (
            status.get("hard_significance") or {}
        )
    else:
        y = [h["objective"] for h in history]
        label, ylabel, hard = "soft cuts (annealed widths)", "objective (minimised)", (
            status.get("hard_objective") or {}
        )
    ax.plot(steps, y, marker="o", ms=4, label=label)
    for x, key, marker, text in ((0, "initial", "s", "hard cuts, initial"),
                                 (last, "final", "*", "hard cuts, final")):
        if hard.get(key) is not None:
            ax.plot([x], [hard[key]], ls="none", marker=marker, ms=14, label=text,
                    color="C3" if key == "final" else "C2")
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    end = "converged" if status.get("converged") else "not converged"
    if status:
        ax.set_title(f"{end} after {status.get('steps_run', len(steps))} steps", fontsize=18)
    ax.legend(fontsize=16)
    fig.tight_layout()
    path = inside(outdir, "objective.png")
    _save(fig, path)
    plt.close(fig)
    return path


def plot_parameters(report: dict[str, Any], outdir: Path) -> Path | None:
    """``parameters.png`` from an ``optimize`` results.json ``report``: one panel per
    trainable cut parameter, its value per step, bounds drawn (outside shaded) and the
    final hard-cut value marked; its path, None without a cut parameter."""
    history = report["history"]
    units = report.get("units") or {}
    steps = [h["step"] for h in history]
    last = (steps[-1] + 1) if steps else 1
    names = list(report.get("trainable") or (history[0]["parameters"] if history else []))
    # cut parameters only: a learned score's weights (score.NAME...) are in score_NAME.npz
    names = [n for n in names if not n.startswith("score.")]
    path = None
    if names:
        plt = _pyplot()
        from matplotlib.ticker import MaxNLocator

        ncols = 1 if len(names) <= 2 else 2
        nrows = math.ceil(len(names) / ncols)
        fig, axes = plt.subplots(
            nrows, ncols, figsize=(8 * ncols, 3.6 * nrows + 0.8), sharex=True, squeeze=False
        )
        bounds = report.get("bounds") or {}
        final = (report.get("final") or {}).get("hard", {}).get("parameters", {})
        for k, ax in enumerate(axes.flat):
            if k >= len(names):
                ax.set_visible(False)
                continue
            name = names[k]
            ax.plot(steps, [h["parameters"][name] for h in history], marker="o", ms=4,
                    label="per step")
            if name in bounds:
                lo, hi = bounds[name]
                pad = 0.06 * (hi - lo)
                ax.set_ylim(lo - pad, hi + pad)
                ax.axhspan(lo - pad, lo, color="0.8", zorder=0)
                ax.axhspan(hi, hi + pad, color="0.8", zorder=0, label="outside bounds")
                ax.axhline(lo, color="0.4", lw=1)
                ax.axhline(hi, color="0.4", lw=1)
            if name in final:
                ax.plot([last], [final[name]], ls="none", marker="*", ms=16, color="C3",
                        label="final, hard cuts")
                ax.annotate(f"{final[name]:.4g}", (last, final[name]), xytext=(10, 0),
                            textcoords="offset points", va="center", fontsize=14)
                ax.set_xlim(right=last + 0.2 * max(last, 1))  # room for the value
            ax.set_ylabel(axis_label(name, units.get(name, "")), fontsize=18)
        for ax in axes[-1]:
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=15,
                   frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (3.6 * nrows + 0.8)))
        path = inside(outdir, "parameters.png")
        _save(fig, path)
        plt.close(fig)
    return path


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


_SCORE_FINE_BINS = 2000  # filled once, then cropped to the occupied range and merged
_SCORE_BINS = 40
_SCORE_UNBOUNDED = 100.0  # range +- this for activations without a bound (relu, ...)


def _score_bound(spec, theta) -> float:
    """``|score| <= |b| + sum |W|`` of the output layer for bounded hidden activations
    (tanh, sigmoid: ``|h| <= 1``); :data:`_SCORE_UNBOUNDED` otherwise."""
    if spec.activation not in ("tanh", "sigmoid"):
        return _SCORE_UNBOUNDED
    from analysis.pipeline.score import network

    net, _ = network(spec, np.asarray(theta, dtype=np.float64))
    last = net.layers[-1]
    bound = float(np.sum(np.abs(np.asarray(last.weight))) + np.sum(np.abs(np.asarray(last.bias))))
    return bound if np.isfinite(bound) and bound > 0 else _SCORE_UNBOUNDED


def score_cuts(config, name: str) -> list[tuple[str, list[tuple[str | None, float | None]]]]:
    """The cuts on ``score.NAME`` in the config: ``(op, thresholds)`` each, ``thresholds``
    ``(parameter name, constant)`` pairs (:meth:`CutKeys.thresholds`)."""
    var = f"score.{name}"
    found = [c for s in config.objects.values() for c in s.cuts if c.var == var]
    found += [c for c in (config.selection.entries or []) if c.var == var]
    return [(c.op, list(c.thresholds())) for c in found]


def _crop(contents: list[np.ndarray], keep: list[int]) -> tuple[int, int, int]:
    """``(first, stop, merge)``: the fine-bin range holding every content above 1e-4 of
    its largest (and the bins in ``keep``), widened to a multiple of ``merge`` bins, about
    :data:`_SCORE_BINS` bins after merging."""
    n = contents[0].size
    used = set(keep)
    for v in contents:
        top = np.max(np.abs(v), initial=0.0)
        if top > 0:
            used.update(np.flatnonzero(np.abs(v) > 1e-4 * top).tolist())
    if not used:
        return 0, n, n // _SCORE_BINS
    first, stop = min(used), max(used) + 1
    merge = max(1, math.ceil((stop - first) / _SCORE_BINS))
    stop = first + merge * math.ceil((stop - first) / merge)
    if stop > n:
        first, stop = max(0, first - (stop - n)), n
    return first, stop, merge


def plot_scores(
    evaluator, config, initial: dict[str, float], final: dict[str, float], outdir: Path,
    *, sumw: dict[str, float],
) -> list[Path]:
    """``score_<NAME>.png`` per learned score: its distribution for signal and
    background (``role``), at the initial (left) and final (right) parameters, with the
    cut on it at each. Object-level scores per object of their collection, event-level
    ones per event, before any cut (the distribution the cut acts on); each dataset
    scaled by its normalisation (``xsec * lumi / sumw``,
    :func:`analysis.optimize.objectives.dataset_norm`; ``sumw``: its sum of weights),
    each role summed and normalised to unit area. One pass fills every score at both
    parameter points. Roles without datasets are left out; entries outside the drawn
    range (an unbounded activation) are counted in the legend."""
    import mplhep

    from analysis.optimize.objectives import dataset_norm

    plan = evaluator.plan
    if not plan.scores:
        return []
    plt = _pyplot()
    points = {"initial": initial, "final": final}
    thetas = {k: evaluator.theta_and_widths(p)[0] for k, p in points.items()}
    specs = []
    for spec in plan.scores:
        bound = max(_score_bound(spec, th) for th in thetas.values())
        for p in points.values():
            specs.append({"index": spec.name, "bins": _SCORE_FINE_BINS, "low": -bound,
                          "high": bound, "params": p})
    filled = evaluator.fill_histograms(specs)
    roles = {r: [d for d, ds in config.datasets.items() if ds.role == r]
             for r in ("signal", "background")}
    paths = []
    for k, spec in enumerate(plan.scores):
        hists = dict(zip(points, filled[2 * k : 2 * k + 2]))
        edges = hists["initial"][next(iter(config.datasets))].axes[0].edges
        drawn: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, float]] = {}
        for point, per_ds in hists.items():
            for role, names in roles.items():
                if not names:
                    continue
                flow = sum(dataset_norm(config, d, sumw.get(d, 0.0))
                           * per_ds[d].values(flow=True) for d in names)
                var = sum(dataset_norm(config, d, sumw.get(d, 0.0)) ** 2
                          * per_ds[d].variances(flow=True) for d in names)
                total = float(np.sum(flow))
                scale = 1.0 / total if total else 0.0
                outside = float(flow[0] + flow[-1]) * scale
                drawn[point, role] = (flow[1:-1] * scale, var[1:-1] * scale**2, outside)
        cuts = score_cuts(config, spec.name)
        lines = {point: [(op, (p[n] if n is not None else c)) for op, ths in cuts
                         for n, c in ths] for point, p in points.items()}
        keep = [int(np.clip(np.searchsorted(edges, v) - 1, 0, edges.size - 2))
                for vs in lines.values() for _, v in vs if np.isfinite(v)]
        first, stop, merge = _crop([v for v, _, _ in drawn.values()], keep)
        e = edges[first : stop + 1 : merge]
        per = f"{spec.collection} object" if spec.collection else "event"
        fig, axes = plt.subplots(1, 2, figsize=(16, 6.5), sharey=True)
        for ax, point in zip(axes, points):
            for role, color in (("signal", "C0"), ("background", "C3")):
                if (point, role) not in drawn:
                    continue
                v, var, outside = drawn[point, role]
                v = v[first:stop].reshape(-1, merge).sum(axis=1)
                err = np.sqrt(np.clip(var[first:stop].reshape(-1, merge).sum(axis=1), 0, None))
                label = f"{role} ({', '.join(roles[role])})"
                if outside > 0:
                    label += f", {outside:.1%} outside"
                mplhep.histplot(v, e, yerr=np.where(v != 0, err, 0.0), ax=ax, label=label,
                                color=color)
            for op, value in lines[point]:
                ax.axvline(value, color="k", ls="--", lw=1.5, label=f"cut: score.{spec.name} {op} {value:.3g}")
            ax.set_title(f"{point} parameters, one entry per {per}", fontsize=16, loc="left")
            ax.set_xlabel(f"score.{spec.name}")
            ax.legend(fontsize=12)
        axes[0].set_ylabel(f"fraction of weight / {(e[1] - e[0]):.3g}")
        fig.tight_layout()
        paths.append(inside(outdir, f"score_{spec.name}.png"))
        _save(fig, paths[-1])
        plt.close(fig)
    return paths
