"""PNG plots of the binned likelihood from results.json's ``likelihood`` section.

* ``templates_CH.png`` per channel: the background templates stacked (mplhep), the
  signal (mu = 1) drawn on top of the stack as a line, and the total uncertainty band
  of signal + background: per bin the quadratic sum of the MC statistical
  uncertainty ``sqrt(sum sumw2)``, each shape variation's half difference
  ``|up - down| / 2`` summed over samples, and each lnN normalisation's
  ``(kappa - 1) x`` its samples' yield (pre-fit, uncorrelated between nuisances).
* ``pulls.png``: the nuisances of the ``mu = 0`` profile fit (the fit behind Z) as
  points with their post-fit uncertainties (``sqrt(C_ii)``, ``C`` the inverse Hessian
  of the NLL at the fit's minimum: results.json ``fit.uncertainties``) against the unit
  Gaussian prior band (+-1, +-2), and a line saying which fit that is: the
  background-only fit to Asimov signal + background data, where the nuisances that
  raise the background are pulled to absorb the signal (:func:`pulls_data`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.cli.figures import _per_width, _pyplot, _save, _stack_yscale
from analysis.cli.outdir import inside

__all__ = ["plot_likelihood", "pulls_data", "pulls_figure", "template_data", "templates_figure",
           "uncertainty_band"]


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
                  unit: str = "", noun: str = "events") -> dict[str, Any]:
    """What ``templates_CH.png`` draws: ``edges``, ``backgrounds`` ``{dataset: values}``
    (stacked), ``total`` (signal + background), ``band`` (:func:`uncertainty_band`),
    ``signal_label`` (naming the signal datasets), ``xlabel`` (``label`` with ``[unit]``)
    and ``ylabel`` (``"expected NOUN ..."``: ``noun`` "jets" for a per-object
    histogram). On variable-width bins every value is divided by its bin width
    (events per unit of x), else per bin (the width said on the axis)."""
    c = section["channels"][channel]
    edges = np.asarray(c["edges"], dtype=np.float64)
    widths, variable, scale = _per_width(edges)
    signal = [d for d in c["samples"] if d in set(section["signal"])]
    # an empty sample (no expected event in the channel) stays out of the legend
    bkg = {d: np.asarray(t["nominal"]["sumw"]) * scale for d, t in c["samples"].items()
           if d not in signal and np.any(np.asarray(t["nominal"]["sumw"]) != 0)}
    sig = np.sum([np.asarray(c["samples"][d]["nominal"]["sumw"]) for d in signal], axis=0)
    base = np.sum(list(bkg.values()), axis=0) if bkg else np.zeros(len(widths))
    u = f" {unit}" if unit else ""
    if variable:
        ylabel = f"expected {noun} / {unit}" if unit else f"expected {noun} per unit of x"
    else:
        ylabel = f"expected {noun} per bin ({widths[0]:g}{u})"
    return {
        "edges": edges,
        "backgrounds": bkg,
        "total": base + sig * scale,
        "band": uncertainty_band(section, channel) * scale,
        "signal_label": f"{', '.join(signal) or 'signal'} (signal, mu = 1) on the background",
        "xlabel": (label or channel) + (f" [{unit}]" if unit else ""),
        "ylabel": ylabel,
    }


def _figures_line(section: dict[str, Any]) -> str:
    """``"   Z = ...   mu_up = ... (95% CL)"``: the section's discovery significance and
    expected CLs limit, those it has."""
    z = (section.get("significance") or {}).get("value")
    lim = section.get("upper_limit") or {}
    out = f"   Z = {z:.3g}" if z is not None else ""
    if lim.get("value") is not None:
        cl = 100 * (1 - lim.get("level", 0.05))
        out += f"   expected limit $\\mu_{{up}}$ = {lim['value']:.3g} ({cl:g}% CL)"
    return out


def pulls_data(section: dict[str, Any]) -> dict[str, Any] | None:
    """What ``pulls.png`` draws, or None without nuisances: ``names`` (bottom to top),
    ``values`` (the fitted ``theta``: with a unit prior, the pull), ``errors`` (post-fit
    uncertainties, NaN where the section has none), ``description`` (which fit), the
    ``xlabel`` and the ``title``."""
    fit = section.get("fit") or {}
    nuis = fit.get("nuisances") or {}
    if not nuis:
        return None
    names = list(nuis)
    unc = fit.get("uncertainties") or {}
    errors = np.array([np.nan if unc.get(n) is None else float(unc[n]) for n in names])
    description = fit.get("description") or "background-only fit (mu = 0) to Asimov data"
    title = "nuisance parameters, post-fit" + (
        "" if fit.get("converged") else " (fit NOT converged)")
    return {
        "names": names,
        "values": np.array([float(nuis[n]) for n in names]),
        "errors": errors,
        "description": description,
        "xlabel": r"$\hat\theta$ $\pm$ post-fit uncertainty (prior: 0 $\pm$ 1)",
        "title": title,
    }


def templates_figure(section: dict[str, Any], channel: str, *, label: str | None = None,
                     unit: str = "", noun: str = "events"):
    """The matplotlib figure of ``templates_CH.png`` (:func:`template_data`); a log y
    axis where the contents (the background stack included) span more than two
    decades, so that a background far below the signal stays visible."""
    import mplhep

    plt = _pyplot()
    d = template_data(section, channel, label=label, unit=unit, noun=noun)
    edges, total, band = d["edges"], d["total"], d["band"]
    fig, ax = plt.subplots(figsize=(9, 7))
    if d["backgrounds"]:
        mplhep.histplot(list(d["backgrounds"].values()), edges, stack=True,
                        histtype="fill", label=list(d["backgrounds"]), ax=ax)
    mplhep.histplot(total, edges, histtype="step", color="red", linewidth=2,
                    label=d["signal_label"], ax=ax)
    ax.stairs(total + band, edges, baseline=total - band, fill=True, color="gray",
              alpha=0.4, hatch="///", label="pre-fit uncertainty (MC stat., systematics)")
    ax.set_xlabel(d["xlabel"])
    ax.set_ylabel(d["ylabel"])
    ax.set_title(f"channel {channel}" + _figures_line(section), fontsize=14)
    top = float(np.max(total + band, initial=0.0))
    base = (np.sum(list(d["backgrounds"].values()), axis=0) if d["backgrounds"]
            else np.zeros_like(total))
    _stack_yscale(ax, total, base, top, linear=1.35 * top or 1.0)
    ax.legend(fontsize=12)
    fig.tight_layout()
    return fig


def pulls_figure(section: dict[str, Any]):
    """The matplotlib figure of ``pulls.png`` (:func:`pulls_data`), None without
    nuisances."""
    import textwrap

    p = pulls_data(section)
    if p is None:
        return None
    plt = _pyplot()
    names = p["names"]
    errors = np.nan_to_num(p["errors"])
    fig, ax = plt.subplots(figsize=(10, max(5, 0.35 * len(names) + 3)))
    y = np.arange(len(names))
    ax.axvspan(-2, 2, color="yellow", alpha=0.5, label="prior $\\pm 2\\sigma$")
    ax.axvspan(-1, 1, color="limegreen", alpha=0.6, label="prior $\\pm 1\\sigma$")
    ax.axvline(0, color="0.3", lw=1)
    ax.errorbar(p["values"], y, xerr=errors, fmt="ko", ms=6, capsize=3,
                label="fitted value, post-fit uncertainty")
    ax.set_yticks(y, names, fontsize=10)
    ax.set_ylim(-0.8, len(names) + 0.6 + 0.05 * len(names))  # room for the legend
    ax.set_xlim(min(-2.5, float(np.min(p["values"] - errors)) - 0.3),
                max(2.5, float(np.max(p["values"] + errors)) + 0.3))
    ax.set_xlabel(p["xlabel"], fontsize=16)
    ax.set_title(p["title"], fontsize=14, loc="left")
    ax.legend(fontsize=10, loc="upper right", ncol=3)
    fig.text(0.02, 0.005, textwrap.fill(p["description"], 110), fontsize=9, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot_likelihood(
    section: dict[str, Any], outdir: Path, *, labels: dict[str, str] | None = None,
    units: dict[str, str] | None = None, nouns: dict[str, str] | None = None,
) -> list[Path]:
    """``templates_CH.png`` for every channel and ``pulls.png`` (module docstring);
    ``labels``: the x-axis label of each channel (default: the channel name), ``units``
    its unit, ``nouns`` what one entry is (:func:`template_data`). Returns the paths
    written."""
    plt = _pyplot()
    written = []
    figures = [(f"templates_{ch}.png",
                templates_figure(section, ch, label=(labels or {}).get(ch),
                                 unit=(units or {}).get(ch, ""),
                                 noun=(nouns or {}).get(ch, "events")))
               for ch in section["channels"]]
    figures.append(("pulls.png", pulls_figure(section)))
    for name, fig in figures:
        if fig is None:
            continue
        path = inside(outdir, name)  # names are checked at load; never outside outdir
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    return written
