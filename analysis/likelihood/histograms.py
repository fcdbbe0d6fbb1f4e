"""The templates of a :class:`~analysis.likelihood.model.Model` from histogram states.

:func:`templates` turns states into the template pytree (JAX, traceable, the layout of
the ``likelihood`` section of results.json) ``{channel: {dataset: {"nominal": {"sumw",
"sumw2"}, "variations": {syst: {"up", "down"}}}}}`` (in-range bins, flow dropped);
:func:`check_templates` refuses, in one line naming the bin, what would make the
likelihood meaningless (non-finite values, negative sums of squared weights, a
negative total background). :func:`edges` gives each channel's bin edges, checking that every template of the
channel has them.

Pure maths: knows :mod:`analysis.stats`, nothing of files, coffea or the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from analysis.errors import LikelihoodError
from analysis.likelihood.model import Model
from analysis.stats.histogram import Histogram

__all__ = ["check_templates", "edges", "templates"]

Templates = dict[str, dict[str, dict[str, Any]]]


def _histogram(states: Mapping[str, Any], ds: str, key: str, where: str) -> Histogram:
    if ds not in states:
        raise LikelihoodError(
            f"likelihood: {where}: dataset {ds!r} not in the states (found {sorted(states)})"
        )
    got = states[ds]
    if not isinstance(got, Mapping) or key not in got:
        found = sorted(got) if isinstance(got, Mapping) else type(got).__name__
        raise LikelihoodError(
            f"likelihood: {where}: dataset {ds!r} has no histogram {key!r} (found {found})"
        )
    h = got[key]
    if not isinstance(h, Histogram):
        raise LikelihoodError(
            f"likelihood: {where}: states[{ds!r}][{key!r}] is a {type(h).__name__}; expected a "
            "stats.Histogram"
        )
    return h


def edges(states: Mapping[str, Any], model: Model) -> dict[str, list[float]]:
    """``{channel: bin edges}``, checking that every template of a channel has them.

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.

    Returns
    -------
    dict of str to list of float
        ``{channel: edges}``; :class:`LikelihoodError` names the template whose edges
        differ or that is missing.
    """
    out = {}
    for c in model.channels:
        ref: tuple[float, ...] | None = None
        for ds in model.datasets(c, states):
            keys = [(c.histogram, "nominal")] + [
                (k, f"{s} {side}")
                for s, up, dn in c.variations
                for k, side in ((up, "up"), (dn, "down"))
            ]
            for key, what in keys:
                e = tuple(_histogram(states, ds, key, f"channel {c.name!r}").edges.tolist())
                if ref is None:
                    ref = e
                elif e != ref:
                    raise LikelihoodError(
                        f"likelihood: channel {c.name!r}: dataset {ds!r} {what} histogram "
                        f"{key!r} has edges {list(e)}; expected {list(ref)} (as the others)"
                    )
        assert ref is not None
        out[c.name] = list(ref)
    return out


def templates(states: Mapping[str, Any], model: Model) -> Templates:
    """Template pytree ``{channel: {dataset: {"nominal": {"sumw", "sumw2"}, "variations":
    {syst: {"up", "down"}}}}}`` of the in-range bins of the states (JAX-traceable:
    only indexing). Missing datasets or keys raise :class:`LikelihoodError` naming them.

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.

    Returns
    -------
    dict
        ``{channel: {dataset: {"nominal": {"sumw": ..., "sumw2": ...}, "variations":
        {syst: {"up": ..., "down": ...}}}}}``, float64 arrays ``(nbins,)`` (the states'
        leaves, so JAX tracers under ``jax.grad``).
    """
    out: Templates = {}
    for c in model.channels:
        where = f"channel {c.name!r}"
        chan: dict[str, Any] = {}
        for ds in model.datasets(c, states):
            nom = _histogram(states, ds, c.histogram, where)
            chan[ds] = {
                "nominal": {"sumw": nom.sumw, "sumw2": nom.sumw2},
                "variations": {
                    s: {
                        "up": _histogram(states, ds, up, f"{where}: variation {s!r}").sumw,
                        "down": _histogram(states, ds, dn, f"{where}: variation {s!r}").sumw,
                    }
                    for s, up, dn in c.variations
                },
            }
        if not set(chan) & set(model.signal):
            raise LikelihoodError(
                f"likelihood: channel {c.name!r} has no signal dataset (datasets {sorted(chan)}, "
                f"signal {list(model.signal)}); every channel needs one"
            )
        out[c.name] = chan
    missing = set(model.signal) - {ds for chan in out.values() for ds in chan}
    for n in model.normalisations:
        missing |= set(n.datasets) - {ds for chan in out.values() for ds in chan}
    if missing:
        raise LikelihoodError(
            f"likelihood: datasets {sorted(missing)} of the model are in no channel"
        )
    return out


def _first(mask: np.ndarray) -> int | None:
    """Index of the first True entry, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def check_templates(
    tmpl: Mapping[str, Any], model: Model, bin_edges: Mapping[str, Sequence[float]] | None = None
) -> None:
    """Refuse, in one line naming channel, dataset and bin, concrete templates with a
    non-finite value, a negative ``sumw2``, a negative total background, or an up/down
    variation whose total background (or total signal, where the nominal one is not
    negative) is negative (naming the systematic too). Empty background bins are
    allowed (the ``floor`` of the model applies).

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`templates` ``{channel: {dataset: {"nominal": ...,
        "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model.
    bin_edges : Mapping[str, sequence of float] or None, optional
        ``{channel: edges}`` (:func:`edges`) to name the bins by their ranges (default
        None: by index).

    Returns
    -------
    None
        Returns if the templates are usable; raises :class:`LikelihoodError` otherwise.
    """

    def bin_name(ch: str, i: int) -> str:
        if bin_edges is None:
            return f"bin {i}"
        e = bin_edges[ch]
        return f"bin {i} [{e[i]:g}, {e[i + 1]:g})"

    for ch, chan in tmpl.items():
        background = None
        for ds, sample in chan.items():
            arrays = [
                ("nominal sumw", sample["nominal"]["sumw"]),
                ("nominal sumw2", sample["nominal"]["sumw2"]),
            ]
            for s, var in sample["variations"].items():
                arrays += [
                    (f"variation {s!r} up", var["up"]),
                    (f"variation {s!r} down", var["down"]),
                ]
            for what, arr in arrays:
                a = np.asarray(arr, dtype=np.float64)
                i = _first(~np.isfinite(a))
                if i is not None:
                    raise LikelihoodError(
                        f"likelihood: channel {ch!r}, dataset {ds!r}, {what}, {bin_name(ch, i)}: "
                        f"{a[i]}; expected a finite number"
                    )
            w2 = np.asarray(sample["nominal"]["sumw2"], dtype=np.float64)
            i = _first(w2 < 0)
            if i is not None:
                raise LikelihoodError(
                    f"likelihood: channel {ch!r}, dataset {ds!r}, {bin_name(ch, i)}: sumw2 = "
                    f"{w2[i]:g}; expected >= 0"
                )
            if ds not in model.signal:
                w = np.asarray(sample["nominal"]["sumw"], dtype=np.float64)
                background = w if background is None else background + w
        i = None if background is None else _first(background < 0)
        if background is not None and i is not None:
            raise LikelihoodError(
                f"likelihood: channel {ch!r}, {bin_name(ch, i)}: total background sumw = "
                f"{background[i]:g}; expected >= 0 (negative weights dominate the bin: "
                "merge bins or change the edges)"
            )
        _check_variations(ch, chan, model, bin_name)


def _check_variations(ch: str, chan: Mapping[str, Any], model: Model, bin_name: Any) -> None:
    """Refuse an up/down template whose total background (or total signal, where the
    nominal one is >= 0) is negative in a bin: checked like the nominal, naming the
    systematic, the dataset with the most negative yield there, and the bin."""
    nominal = {ds: np.asarray(t["nominal"]["sumw"], dtype=np.float64) for ds, t in chan.items()}
    shapes = sorted({s for t in chan.values() for s in t["variations"]})
    for group, members in (
        ("background", [ds for ds in chan if ds not in model.signal]),
        ("signal", [ds for ds in chan if ds in model.signal]),
    ):
        if not members:
            continue
        base = np.sum([nominal[ds] for ds in members], axis=0)
        for s in shapes:
            for side in ("up", "down"):
                rows = {
                    ds: np.asarray(chan[ds]["variations"][s][side], dtype=np.float64)
                    if s in chan[ds]["variations"] else nominal[ds]
                    for ds in members
                }
                total = np.sum(list(rows.values()), axis=0)
                bad = total < 0 if group == "background" else (total < 0) & (base >= 0)
                i = _first(bad)
                if i is not None:
                    ds = min(rows, key=lambda d: rows[d][i])
                    raise LikelihoodError(
                        f"likelihood: channel {ch!r}, systematic {s!r} {side}, dataset {ds!r}, "
                        f"{bin_name(ch, i)}: {side} template sumw = {rows[ds][i]:g} makes the "
                        f"total {group} {total[i]:g} (nominal {base[i]:g}); expected >= 0"
                    )
