"""PNG plots of an optimisation: objective and parameters per step, and histograms
of the main observable (the first in the config) at the initial and final selection.

Axes carry units (:mod:`analysis.cli.units`); parameter traces show their bounds
(outside shaded) and the final hard-cut value; histograms are "per bin" with the bin
width, errors from the sum of squared weights (none on empty bins, no Poisson bars on
weighted samples), and a log y axis when the contents span more than two decades
(bins below 1e-3 of their histogram's largest, such as a soft selection's far
tails, aside).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.units import axis_label, observable_unit

__all__ = [
    "histogram_range",
    "plot_histograms",
    "plot_history",
]


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


def _is_minus_significance(history: list[dict[str, Any]]) -> bool:
    """The objective is ``-Z_A`` at every step (a lone significance term)."""
    return bool(history) and all(
        h.get("significance") is not None
        and h.get("objective") is not None
        and math.isclose(h["objective"], -h["significance"], rel_tol=1e-9, abs_tol=1e-12)
        for h in history
    )


def plot_history(report: dict[str, Any], outdir: Path) -> list[Path]:
    """``objective.png`` and ``parameters.png`` from an ``optimize`` results.json ``report``.

    One objective curve: the soft Asimov significance per step when the objective is
    ``-Z_A``, else the objective, with the hard-cut value at the start and the end.
    One panel per trainable parameter: its value per step, bounds drawn (outside
    shaded) and the final hard-cut value marked."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    outdir = Path(outdir)
    history = report["history"]
    status = report.get("status") or {}
    units = report.get("units") or {}
    steps = [h["step"] for h in history]
    last = (steps[-1] + 1) if steps else 1
    paths = []

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
    paths.append(outdir / "objective.png")
    _save(fig, paths[-1])
    plt.close(fig)

    names = list(report.get("trainable") or (history[0]["parameters"] if history else []))
    # cut parameters only: a learned score's weights (score.NAME...) are in score_NAME.npz
    names = [n for n in names if not n.startswith("score.")]
    if names:
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
        paths.append(outdir / "parameters.png")
        _save(fig, paths[-1])
        plt.close(fig)
    return paths


def histogram_range(
    config, evaluator, params: dict[str, float], widths, *, states: dict | None = None
) -> tuple[int, float, float]:
    """Binning of the main observable: from its config ``hist``, else mean +- a few std
    of the states at ``params`` and ``widths`` (``states`` if given: a pass's states at
    exactly those values, e.g. an optimisation's step 0; else a values-only pass)."""
    obs = config.observables[0]
    if obs.hist is not None:
        return obs.hist.bins, obs.hist.range[0], obs.hist.range[1]
    from analysis.stats import _core

    if states is None:
        states = evaluator.run(params, widths=widths, order=0)
    lows, highs = [], []
    for st in states.values():
        if "moments" not in st.observables[obs.name]:
            continue
        values = st.taylor()[0]["observables"][obs.name]["moments"]
        mean = float(_core.state_mean(values))
        std = float(_core.state_std(values))
        if np.isfinite(mean) and np.isfinite(std):
            lows.append(mean - 2.5 * std)
            highs.append(mean + 4 * std)
    if not lows:
        return 40, 0.0, 1.0
    return 40, min(lows), max(highs)


def _draw(ax, h, label: str, color: str) -> np.ndarray:
    """A step histogram with errors sqrt(sum of squared weights), none on empty bins."""
    import mplhep

    values = h.values()
    variances = h.variances()
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
) -> list[Path]:
    """``hist_<dataset>.png``: the main observable at the initial (soft) and final (hard)
    selection, both filled in one pass. ``initial_states``: the states at ``initial``
    and ``w0`` if already computed (for the binning when the config gives none)."""
    plt = _pyplot()
    bins, low, high = histogram_range(config, evaluator, initial, w0, states=initial_states)
    binning = {"index": 0, "bins": bins, "low": low, "high": high}
    before, after = evaluator.fill_histograms(
        [
            {**binning, "params": initial, "widths": w0},
            {**binning, "params": final, "widths": np.zeros_like(w0)},
        ]
    )
    obs = config.observables[0]
    unit = observable_unit(obs)
    width = (high - low) / bins
    per_bin = f"{width:.3g} {unit}".strip()
    paths = []
    for ds in config.datasets:
        fig, ax = plt.subplots(figsize=(9, 6.5))
        a = _draw(ax, before[ds], "initial selection (soft cuts)", "C0")
        b = _draw(ax, after[ds], "final selection (hard cuts)", "C3")
        ax.set_xlabel(axis_label(obs.name, unit))
        weighted = config.datasets[ds].weight is not None
        what = "sum of weights" if weighted else "entries"
        ax.set_ylabel(f"{what} / {per_bin}")
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
        ax.set_title(ds, fontsize=18, loc="left")
        ax.legend(fontsize=14, title=f"{obs.name} = {obs.x}", title_fontsize=13)
        fig.tight_layout()
        paths.append(Path(outdir) / f"hist_{ds}.png")
        _save(fig, paths[-1])
        plt.close(fig)
    return paths
