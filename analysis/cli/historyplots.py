"""The optimisation's history as PNGs: ``objective.png`` (the objective, or the
significance, per step with the hard-cut values at the start and the end) and
``parameters.png`` (each trainable cut parameter per step, its bounds and its final
hard-cut value). Exported by :mod:`analysis.cli.plots`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from analysis.cli.figures import _pyplot, _save
from analysis.cli.outdir import inside
from analysis.cli.units import axis_label

__all__ = ["plot_history", "plot_objective", "plot_parameters"]


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
