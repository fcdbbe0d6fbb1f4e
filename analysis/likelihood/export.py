"""The binned model of a ``likelihood`` section, written for pyhf and CMS Combine.

Input: the ``likelihood`` section of results.json (:mod:`analysis.likelihood.summary`:
plain JSON types; the templates at the evaluated parameters). Nothing here reads or
writes files (:mod:`analysis.cli.export` does); every function returns plain data.

* :func:`pyhf_workspace`: a pyhf JSON workspace (``version 1.0.0``): one channel per
  channel, one sample per dataset, with the modifiers the model uses (module
  :mod:`analysis.likelihood.expected`):

  - the signal datasets: ``normfactor`` ``mu`` (the parameter of interest);
  - a shape systematic (``shift`` or ``weight``): ``histosys`` (``hi_data`` / ``lo_data``
    the up / down templates) on each sample it changes; our morphing is pyhf's
    ``code4p``, pyhf's default for ``histosys``;
  - an lnN normalisation: ``normsys`` with ``hi = kappa``, ``lo = 1 / kappa``; our
    ``kappa ** theta`` is pyhf's ``code1`` (pyhf's default is ``code4``, a polynomial
    for ``|theta| < 1``: load with ``modifier_settings={"normsys": {"interpcode":
    "code1"}}`` for the exact model);
  - MC statistics: ``staterror`` ``staterror_CH`` with ``data = sqrt(sumw2)`` on every
    sample of the channel (pyhf's relative width ``sqrt(sum sumw2) / sum sumw`` is ours);
  - observations: the Asimov data of the Z in results.json, ``sum_s sumw_s`` per bin
    (the expectation at ``mu = 1``, nominal nuisances).

* :func:`combine_inputs`: ``(datacard text, {path: (sumw, sumw2)})``: a shape datacard
  reading ``shapes.root`` (``CH/PROCESS``, ``CH/PROCESS_SYSTUp`` / ``Down``,
  ``CH/data_obs``), with ``rate -1`` replaced by each template's integral, an ``lnN``
  line per normalisation (symmetric ``kappa``), a ``shape`` line per shape systematic
  and ``autoMCStats 0 1 1`` per channel (Barlow-Beeston-lite including the signal).

A shape variation equal to the nominal template (a dataset it does not apply to) is
written as no modifier (pyhf) and ``-`` (datacard).

**The floor.** The model counts ``max(floor, lambda)`` per bin (``floor``: the section's,
default 1e-9), which neither pyhf nor Combine has; a bin with signal and no background
would make their likelihood infinite at ``mu = 0``. Where the floor holds at the nominal
point (total nominal background below ``floor``: the signal-only bins of a hard-cut
result, the nearly empty ones of a soft result), the channel gets one more sample,
``model_floor`` (``floor`` in those bins, 0 elsewhere, no modifiers), and where the total
background is below ``floor`` in every variation too, its entries are written as 0; so
pyhf's expectation there is the model's (``floor`` at ``mu = 0``, ``s + floor`` against
``max(floor, s + b)`` at ``mu = 1``), and where a variation lifts the background above
the floor, ``b(theta) + floor`` against ``max(floor, b(theta))``. Channels without
such a bin are written as they are. Not representable: a morphing that drives a bin's
total background negative (the model floors it; pyhf's likelihood is then undefined). Empty input (no channels) is refused
by the model before a section exists; a section without ``channels`` raises
:class:`~analysis.errors.LikelihoodError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from analysis.errors import LikelihoodError

__all__ = ["FLOOR_SAMPLE", "POI", "combine_inputs", "pyhf_workspace", "staterror_name"]

POI = "mu"
FLOOR_SAMPLE = "model_floor"


def staterror_name(channel: str) -> str:
    """The MC-statistics modifier of ``channel`` (pyhf ``staterror``)."""
    return f"staterror_{channel}"


def _channels(section: Mapping[str, Any]) -> Mapping[str, Any]:
    chans = section.get("channels") if isinstance(section, Mapping) else None
    if not isinstance(chans, Mapping) or not chans:
        found = sorted(section) if isinstance(section, Mapping) else type(section).__name__
        raise LikelihoodError(
            f"likelihood section: expected 'channels' with templates, found keys {found}"
        )
    return chans


def _floats(a: Any) -> list[float]:
    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def _changes(sample: Mapping[str, Any], syst: str) -> bool:
    """Whether the variation ``syst`` of ``sample`` differs from its nominal template."""
    nom = np.asarray(sample["nominal"]["sumw"], dtype=np.float64)
    v = sample["variations"][syst]
    return not (np.array_equal(v["up"], nom) and np.array_equal(v["down"], nom))


def _observed(chan: Mapping[str, Any]) -> list[float]:
    """Asimov data of a channel: the sum of the nominal templates (mu = 1)."""
    return _floats(sum(np.asarray(s["nominal"]["sumw"], dtype=np.float64)
                       for s in chan["samples"].values()))


def _floored(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{channel: {"edges", "samples"}}`` with the floor written out (module docstring):
    background entries of bins below the floor set to 0, and a ``model_floor`` sample
    (flagged ``"floor": True``) in the channels that have such a bin."""
    floor = float(section.get("floor", 1e-9))
    signal = set(section.get("signal", ()))
    out: dict[str, dict[str, Any]] = {}
    for ch, chan in _channels(section).items():
        samples: dict[str, dict[str, Any]] = {ds: {"nominal": {k: np.asarray(t["nominal"][k], dtype=np.float64)
                                    for k in ("sumw", "sumw2")},
                        "variations": {s: {k: np.asarray(v[k], dtype=np.float64)
                                           for k in ("up", "down")}
                                       for s, v in t["variations"].items()}}
                   for ds, t in chan["samples"].items()}
        nbins = len(chan["edges"]) - 1
        bkg = [t for ds, t in samples.items() if ds not in signal]
        totals = [sum((t["nominal"]["sumw"] for t in bkg), np.zeros(nbins))]
        for s in {s for t in bkg for s in t["variations"]}:
            for k in ("up", "down"):
                totals.append(sum((t["variations"][s][k] if s in t["variations"]
                                   else t["nominal"]["sumw"] for t in bkg), np.zeros(nbins)))
        low = np.all(np.abs(np.stack(totals)) < floor, axis=0)
        floored = totals[0] < floor  # where the floor holds at theta = 0
        if floored.any():
            for t in bkg:
                for k in ("sumw", "sumw2"):
                    t["nominal"][k] = np.where(low, 0.0, t["nominal"][k])
                for v in t["variations"].values():
                    for k in ("up", "down"):
                        v[k] = np.where(low, 0.0, v[k])
            name = FLOOR_SAMPLE
            while name in samples:
                name += "_"
            samples[name] = {"nominal": {"sumw": np.where(floored, floor, 0.0),
                                         "sumw2": np.zeros(nbins)},
                             "variations": {}, "floor": True}
        out[ch] = {"edges": chan["edges"], "samples": samples}
    return out


def pyhf_workspace(section: Mapping[str, Any], *, measurement: str = "diffcoffea") -> dict:
    """A pyhf workspace (dict, JSON types) of the section (module docstring).

    Parameters
    ----------
    section : Mapping[str, Any]
        The ``likelihood`` section of results.json.
    measurement : str, optional
        Keyword-only. The name of the workspace's one measurement (POI ``mu``).

    Returns
    -------
    dict
        ``{"version", "channels", "observations", "measurements"}``, valid against
        pyhf's ``workspace.json`` schema.
    """
    chans = _floored(section)
    signal = set(section.get("signal", ()))
    norms = section.get("normalisations", {})
    channels, observations = [], []
    for ch, chan in chans.items():
        samples = []
        for ds, t in chan["samples"].items():
            mods: list[dict[str, Any]] = []
            if t.get("floor"):  # the model's floor: no modifier (module docstring)
                samples.append({"name": ds, "data": _floats(t["nominal"]["sumw"]),
                                "modifiers": []})
                continue
            if ds in signal:
                mods.append({"name": POI, "type": "normfactor", "data": None})
            for n, norm in norms.items():
                if ds in norm["datasets"]:
                    k = float(norm["kappa"])
                    mods.append({"name": n, "type": "normsys", "data": {"hi": k, "lo": 1.0 / k}})
            for s in sorted(t["variations"]):
                if _changes(t, s):
                    v = t["variations"][s]
                    mods.append({"name": s, "type": "histosys",
                                 "data": {"hi_data": _floats(v["up"]),
                                          "lo_data": _floats(v["down"])}})
            if section.get("mc_stat"):
                mods.append({"name": staterror_name(ch), "type": "staterror",
                             "data": _floats(np.sqrt(np.asarray(t["nominal"]["sumw2"],
                                                                dtype=np.float64)))})
            samples.append({"name": ds, "data": _floats(t["nominal"]["sumw"]), "modifiers": mods})
        channels.append({"name": ch, "samples": samples})
        observations.append({"name": ch, "data": _observed(chan)})
    return {
        "version": "1.0.0",
        "channels": channels,
        "observations": observations,
        "measurements": [{"name": measurement,
                          "config": {"poi": POI, "parameters": _bounds(section)}}],
    }


#: pyhf's default bounds: +-5 for normsys and histosys, (1e-10, 10) for staterror's gamma.
PYHF_BOUND = 5.0
PYHF_GAMMA_MAX = 10.0


def _widened(value: float, default: float) -> float:
    """``default``, or twice ``|value|`` rounded up to a multiple of 5 where that is larger."""
    need = 5.0 * np.ceil(2.0 * abs(value) / 5.0)
    return float(max(default, need))


def _bounds(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Explicit pyhf parameter bounds where the section's mu = 0 fit (unbounded, as the
    model's) went beyond pyhf's defaults: twice the fitted value, so that pyhf's fits
    reach the same minimum and its Z is ours (with the defaults a nuisance pulled to
    +19 sigma stops at +5 and pyhf's Z differs by 20 %); none where the fit stayed
    inside them."""
    nuis = (section.get("fit") or {}).get("nuisances") or {}
    out: list[dict[str, Any]] = []
    gammas: dict[str, dict[int, float]] = {}
    for name, value in nuis.items():
        if name.startswith("mc_stat_") and name.endswith("]"):
            ch, i = name[len("mc_stat_"):-1].rsplit("[", 1)
            gammas.setdefault(ch, {})[int(i)] = float(value)
            continue
        bound = _widened(float(value), PYHF_BOUND)
        if bound > PYHF_BOUND:
            out.append({"name": name, "bounds": [[-bound, bound]]})
    chans = section.get("channels") or {}
    for ch, thetas in gammas.items():
        samples = [t for t in (chans.get(ch) or {}).get("samples", {}).values()]
        if not samples:
            continue
        sumw = np.sum([np.asarray(t["nominal"]["sumw"], dtype=np.float64) for t in samples], axis=0)
        sumw2 = np.sum([np.asarray(t["nominal"]["sumw2"], dtype=np.float64) for t in samples], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            width = np.where(sumw > 0, np.sqrt(sumw2) / sumw, 0.0)
        upper = [PYHF_GAMMA_MAX] * len(width)
        for i, theta in thetas.items():
            if i < len(width):
                upper[i] = _widened(1.0 + float(width[i]) * abs(theta), PYHF_GAMMA_MAX)
        if max(upper) > PYHF_GAMMA_MAX:
            out.append({"name": staterror_name(ch), "bounds": [[1e-10, u] for u in upper]})
    return out


def _fmt(x: float) -> str:
    return repr(float(x))


def combine_inputs(
    section: Mapping[str, Any], *, shapes_file: str = "shapes.root"
) -> tuple[str, dict[str, tuple[list[float], list[float], list[float]]]]:
    """A Combine shape datacard and the histograms it reads (module docstring).

    Parameters
    ----------
    section : Mapping[str, Any]
        The ``likelihood`` section of results.json.
    shapes_file : str, optional
        Keyword-only. The ROOT file name the datacard's ``shapes`` line names.

    Returns
    -------
    tuple of (str, dict)
        ``(datacard, histograms)``: the datacard text and
        ``{"CH/NAME": (edges, sumw, sumw2)}`` for every template it names (variations
        carry the nominal ``sumw2`` scaled by ``(sumw_var / sumw_nom) ** 2`` bin by bin,
        0 where the nominal is empty; ``data_obs`` the Asimov counts with
        ``sumw2 = sumw``). The datacard's rates are the histograms' integrals
        (``sum sumw``).
    """
    chans = _floored(section)
    signal = [ds for ds in section.get("signal", ())]
    norms = section.get("normalisations", {})
    hists: dict[str, tuple[list[float], list[float], list[float]]] = {}
    columns: list[tuple[str, str, float]] = []  # (channel, process, rate)
    shape_systs = sorted({s for c in chans.values() for t in c["samples"].values()
                          for s in t["variations"]})
    affected: dict[tuple[str, str], set[str]] = {}
    observations = []
    for ch, chan in chans.items():
        edges = _floats(chan["edges"])
        obs = _observed(chan)
        hists[f"{ch}/data_obs"] = (edges, obs, obs)
        observations.append((ch, sum(obs)))
        # signal first (Combine: process index <= 0), then backgrounds, each in section order
        order = [ds for ds in chan["samples"] if ds in signal]
        order += [ds for ds in chan["samples"] if ds not in signal]
        for ds in order:
            t = chan["samples"][ds]
            nom = np.asarray(t["nominal"]["sumw"], dtype=np.float64)
            w2 = np.asarray(t["nominal"]["sumw2"], dtype=np.float64)
            hists[f"{ch}/{ds}"] = (edges, _floats(nom), _floats(w2))
            columns.append((ch, ds, float(nom.sum())))
            affected[(ch, ds)] = set()
            for s, v in t["variations"].items():
                if not _changes(t, s):
                    continue
                affected[(ch, ds)].add(s)
                for side, key in (("Up", "up"), ("Down", "down")):
                    var = np.asarray(v[key], dtype=np.float64)
                    ratio = np.divide(var, nom, out=np.zeros_like(var), where=nom != 0)
                    hists[f"{ch}/{ds}_{s}{side}"] = (edges, _floats(var), _floats(w2 * ratio**2))
    sig_index = {ds: -i for i, ds in enumerate(signal)}
    bkgs = [ds for c in chans.values() for ds in c["samples"] if ds not in signal]
    bkg_index = {ds: i + 1 for i, ds in enumerate(dict.fromkeys(bkgs))}
    index = {**sig_index, **bkg_index}

    def row(label: str, cells: list[str]) -> str:
        return " ".join([f"{label:<24}", *(f"{c:>14}" for c in cells)])

    rule = "-" * 60
    lines = [
        "# written by diffcoffea from the likelihood section of results.json",
        "# observations: the Asimov data (mu = 1) of the Z in results.json",
        f"imax {len(chans)} number of channels",
        f"jmax {len(bkg_index)} number of backgrounds",
        "kmax * number of nuisance parameters",
        rule,
        f"shapes * * {shapes_file} $CHANNEL/$PROCESS $CHANNEL/$PROCESS_$SYSTEMATIC",
        rule,
        row("bin", [ch for ch, _ in observations]),
        row("observation", [_fmt(n) for _, n in observations]),
        rule,
        row("bin", [ch for ch, _, _ in columns]),
        row("process", [ds for _, ds, _ in columns]),
        row("process", [str(index[ds]) for _, ds, _ in columns]),
        row("rate", [_fmt(r) for _, _, r in columns]),
        rule,
    ]
    for n, norm in norms.items():
        k = _fmt(norm["kappa"])
        lines.append(row(f"{n} lnN", [k if ds in norm["datasets"] else "-"
                                      for _, ds, _ in columns]))
    for s in shape_systs:
        cells = ["1" if s in affected[(ch, ds)] else "-" for ch, ds, _ in columns]
        if any(c != "-" for c in cells):
            lines.append(row(f"{s} shape", cells))
    if section.get("mc_stat"):
        lines += [f"{ch} autoMCStats 0 1 1" for ch in chans]
    return "\n".join(lines) + "\n", hists
