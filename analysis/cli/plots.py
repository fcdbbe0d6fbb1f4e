"""PNG plots of an optimisation: objective and parameters per step, and histograms
of the main observable (the first in the config) at the initial and final selection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "histogram_range",
    "plot_histograms",
    "plot_history",
]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on these machines
    import matplotlib.pyplot as plt
    import mplhep

    plt.style.use(mplhep.style.CMS)
    return plt


def plot_history(history: list[dict[str, Any]], outdir: Path) -> list[Path]:
    """``objective.png`` (objective and significance vs step) and ``parameters.png``."""
    plt = _pyplot()
    outdir = Path(outdir)
    steps = [h["step"] for h in history]
    paths = []

    fig, ax = plt.subplots(figsize=(8, 6))
    ax.plot(steps, [h["objective"] for h in history], marker="o", ms=3, label="objective")
    ax.set_xlabel("step")
    ax.set_ylabel("objective (minimised)")
    if history and history[0].get("significance") is not None:
        ax2 = ax.twinx()
        ax2.plot(
            steps, [h["significance"] for h in history], color="C1", ls="--", label="significance"
        )
        ax2.set_ylabel("Asimov significance", color="C1")
    fig.tight_layout()
    paths.append(outdir / "objective.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    # cut parameters only: a learned score's weights (score.NAME...) are in score_NAME.npz
    names = [n for n in (history[0]["parameters"] if history else []) if not n.startswith("score.")]
    if names:
        fig, axes = plt.subplots(
            len(names), 1, figsize=(8, 2.6 * len(names) + 1), sharex=True, squeeze=False
        )
        for ax, name in zip(axes[:, 0], names):
            ax.plot(steps, [h["parameters"][name] for h in history], marker="o", ms=3)
            ax.set_ylabel(name, fontsize=14)
        axes[-1, 0].set_xlabel("step")
        fig.tight_layout()
        paths.append(outdir / "parameters.png")
        fig.savefig(paths[-1], dpi=80)
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
    import mplhep

    plt = _pyplot()
    bins, low, high = histogram_range(config, evaluator, initial, w0, states=initial_states)
    binning = {"index": 0, "bins": bins, "low": low, "high": high}
    before, after = evaluator.fill_histograms(
        [
            {**binning, "params": initial, "widths": w0},
            {**binning, "params": final, "widths": np.zeros_like(w0)},
        ]
    )
    name = config.observables[0].name
    paths = []
    for ds in config.datasets:
        fig, ax = plt.subplots(figsize=(8, 6))
        mplhep.histplot(before[ds], ax=ax, label="initial selection (soft)")
        mplhep.histplot(after[ds], ax=ax, label="final selection (hard)")
        ax.set_xlabel(f"{config.observables[0].x} ({name})")
        ax.set_ylabel("sum of weights")
        ax.set_title(ds)
        ax.legend(fontsize=14)
        fig.tight_layout()
        paths.append(Path(outdir) / f"hist_{ds}.png")
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths
