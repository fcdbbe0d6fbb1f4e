"""A learned score's distribution as a PNG (``score_NAME.png``): signal and background
before and after, with the cut on it. Exported by :mod:`analysis.cli.plots`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.cli.figures import _crop, _pyplot, _save
from analysis.cli.outdir import inside

__all__ = ["plot_scores", "score_cuts"]


_SCORE_FINE_BINS = 2000  # filled once, then cropped to the occupied range and merged
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
