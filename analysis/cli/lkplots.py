"""PNG plots of the binned likelihood from results.json's ``likelihood`` section.

* ``templates_CH.png`` per channel: the background templates stacked (mplhep), the
  signal (mu = 1) drawn on top of the stack as a line, and the total uncertainty band
  of signal + background: per bin the quadratic sum of the MC statistical
  uncertainty ``sqrt(sum sumw2)``, each shape variation's half difference
  ``|up - down| / 2`` summed over samples, and each lnN normalisation's
  ``(kappa - 1) x`` its samples' yield (pre-fit, uncorrelated between nuisances).
* ``pulls.png``: the nuisances of the ``mu = 0`` profile fit (the fit behind Z) as
  points against the unit Gaussian prior band (+-1, +-2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.plots import _pyplot, _save

__all__ = ["plot_likelihood", "template_data", "uncertainty_band"]


def uncertainty_band(section: dict[str, Any], channel: str) -> np.ndarray:
    """Per-bin total pre-fit uncertainty of signal + background (module docstring)."""
    c = section["channels"][channel]
    samples = c["samples"]
    var = np.zeros(len(c["edges"]) - 1)
    if section.get("mc_stat", True):
        var += np.sum([np.asarray(t["nominal"]["sumw2"]) for t in samples.values()], axis=0)
    shapes = sorted({s for t in samples.values() for s in t["variations"]})
    for s in shapes:
        half = np.sum([np.abs(np.asarray(t["variations"][s]["up"])
                              - np.asarray(t["variations"][s]["down"])) / 2
                       for t in samples.values() if s in t["variations"]], axis=0)
        var += half**2
    for norm in section.get("normalisations", {}).values():
        yields = np.sum([np.asarray(samples[d]["nominal"]["sumw"])
                         for d in norm["datasets"] if d in samples], axis=0)
        var += ((norm["kappa"] - 1.0) * np.asarray(yields)) ** 2
    return np.sqrt(var)


def template_data(section: dict[str, Any], channel: str, *, label: str | None = None,
                  unit: str = "") -> dict[str, Any]:
    """What ``templates_CH.png`` draws: ``edges``, ``backgrounds`` ``{dataset: values}``
    (stacked), ``total`` (signal + background), ``band`` (:func:`uncertainty_band`),
    ``signal_label`` (naming the signal datasets), ``xlabel`` (``label`` with ``[unit]``)
    and ``ylabel``. On variable-width bins every value is divided by its bin width
    (events per unit of x), else per bin (the width said on the axis)."""
    c = section["channels"][channel]
    edges = np.asarray(c["edges"], dtype=np.float64)
    widths = np.diff(edges)
    variable = not np.allclose(widths, widths[0], rtol=1e-9, atol=0.0)
    scale = 1.0 / widths if variable else np.ones_like(widths)
    signal = [d for d in c["samples"] if d in set(section["signal"])]
    bkg = {d: np.asarray(t["nominal"]["sumw"]) * scale for d, t in c["samples"].items()
           if d not in signal}
    sig = np.sum([np.asarray(c["samples"][d]["nominal"]["sumw"]) for d in signal], axis=0)
    base = np.sum(list(bkg.values()), axis=0) if bkg else np.zeros(len(widths))
    u = f" {unit}" if unit else ""
    if variable:
        ylabel = f"expected events / {unit}" if unit else "expected events per unit of x"
    else:
        ylabel = f"expected events per bin ({widths[0]:g}{u})"
    return {
        "edges": edges,
        "backgrounds": bkg,
        "total": base + sig * scale,
        "band": uncertainty_band(section, channel) * scale,
        "signal_label": f"{', '.join(signal) or 'signal'} (signal, mu = 1) on the background",
        "xlabel": (label or channel) + (f" [{unit}]" if unit else ""),
        "ylabel": ylabel,
    }


def plot_likelihood(
    section: dict[str, Any], outdir: Path, *, labels: dict[str, str] | None = None,
    units: dict[str, str] | None = None,
) -> list[Path]:
    """``templates_CH.png`` for every channel and ``pulls.png`` (module docstring);
    ``labels``: the x-axis label of each channel (default: the channel name), ``units``
    its unit (:func:`template_data`). Returns
    the paths written."""
    import mplhep

    plt = _pyplot()
    written = []
    for ch in section["channels"]:
        d = template_data(section, ch, label=(labels or {}).get(ch),
                          unit=(units or {}).get(ch, ""))
        edges, total, band = d["edges"], d["total"], d["band"]
        fig, ax = plt.subplots(figsize=(9, 7))
        if d["backgrounds"]:
            mplhep.histplot(list(d["backgrounds"].values()), edges, stack=True,
                            histtype="fill", label=list(d["backgrounds"]), ax=ax)
        mplhep.histplot(total, edges, histtype="step", color="red", linewidth=2,
                        label=d["signal_label"], ax=ax)
        ax.stairs(total + band, edges, baseline=total - band, fill=True, color="gray",
                  alpha=0.4, hatch="///", label="total uncertainty")
        ax.set_xlabel(d["xlabel"])
        ax.set_ylabel(d["ylabel"])
        z = section.get("significance", {}).get("value")
        ax.set_title(f"channel {ch}" + (f"   Z = {z:.3g}" if z is not None else ""),
                     fontsize=14)
        ax.legend(fontsize=12)
        path = Path(outdir) / f"templates_{ch}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    nuis = section.get("fit", {}).get("nuisances", {})
    if nuis:
        names = list(nuis)
        fig, ax = plt.subplots(figsize=(9, max(4, 0.35 * len(names) + 2)))
        y = np.arange(len(names))
        ax.axvspan(-2, 2, color="yellow", alpha=0.5)
        ax.axvspan(-1, 1, color="limegreen", alpha=0.6)
        ax.plot([nuis[n] for n in names], y, "ko")
        ax.set_yticks(y, names, fontsize=10)
        ax.set_xlabel("pull (mu = 0 fit; prior width 1)")
        fit = section["fit"]
        ax.set_title("pulls" + ("" if fit.get("converged") else " (fit NOT converged)"),
                     fontsize=14)
        fig.tight_layout()
        path = Path(outdir) / "pulls.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written
