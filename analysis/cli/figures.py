"""What every figure of the command line shares: matplotlib with the CMS style, the one
atomic PNG writer, per-bin-width scaling and the log-or-linear choice of a stack's y axis
(used by :mod:`analysis.cli.plots`, :mod:`analysis.cli.historyplots`,
:mod:`analysis.cli.scoreplots` and :mod:`analysis.cli.lkplots`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

__all__: list[str] = []  # private helpers of the plot modules

_SCORE_BINS = 40  # about this many bins after a fine binning is cropped and merged


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
