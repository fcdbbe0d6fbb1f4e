"""The templates of a :class:`~analysis.likelihood.model.Model` from histogram states.

:func:`templates` turns states into the template pytree (JAX, traceable, the layout of
the ``likelihood`` section of results.json) ``{channel: {dataset: {"nominal": {"sumw",
"sumw2"}, "variations": {syst: {"up", "down"}}}}}`` (in-range bins, flow dropped;
negative total background bins clipped, see below);
:func:`check_templates` refuses, in one line naming the bin, what would make the
likelihood meaningless (non-finite values, negative sums of squared weights, a
negative total background). :func:`floor_report` says how much of Z comes from bins
with signal whose background is the model's floor alone (:func:`floor_share`). :func:`edges`
gives each channel's bin edges, checking that every template of the channel has them.

**Negative background bins.** Negative-weight MC (NLO samples) can make a channel's
total background ``B_b = sum_{s background} h_sb`` negative in a bin, of the nominal
template or of a variation's. Where ``B_b < 0`` and either ``model.clip_negative`` or
``-B_b <= NEGATIVE_TOLERANCE * scale`` (``scale``: the channel's nominal ``sum_s sum_b
|h_sb|``, signal included: a soft tail's ``-1e-8`` against yields of order one), every
background sample's entry of that template in bin ``b`` is set to 0 (the nominal's
``sumw2`` too), so the total is 0 and the model's floor applies: ``h'_sb = h_sb [B_b >=
0]``, like ``max(B_b, 0)`` a clip whose gradient is 0 where it clips (and the identity
elsewhere: bins with ``B_b >= 0`` are passed through unchanged, bit for bit). A larger
negative total is refused by :func:`check_templates`, naming ``clip_negative`` as the
remedy (combine and pyhf users clip such templates to 0 in the same way).

Pure maths: knows :mod:`analysis.stats`, nothing of files, coffea or the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from analysis.errors import LikelihoodError
from analysis.likelihood.model import Model
from analysis.stats.histogram import Histogram

__all__ = ["FLOOR_SHARE", "NEGATIVE_TOLERANCE", "check_templates", "edges", "floor_report",
           "floor_share", "templates"]

Templates = dict[str, dict[str, dict[str, Any]]]

#: a negative total background bin within this fraction of the channel's nominal scale
#: (module docstring) is clipped to 0 by default: a soft tail's rounding, not a result
NEGATIVE_TOLERANCE = 1e-6


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
        out[c.name] = _clip_negative(chan, model)
    missing = set(model.signal) - {ds for chan in out.values() for ds in chan}
    for n in model.normalisations:
        missing |= set(n.datasets) - {ds for chan in out.values() for ds in chan}
    if missing:
        raise LikelihoodError(
            f"likelihood: datasets {sorted(missing)} of the model are in no channel"
        )
    return out


def _clip_negative(chan: dict[str, Any], model: Model) -> dict[str, Any]:
    """A channel's templates with its negative total background bins clipped to 0
    (module docstring: ``model.clip_negative``, else within :data:`NEGATIVE_TOLERANCE`)."""
    background = [ds for ds in chan if ds not in model.signal]
    if not background:
        return chan
    scale = sum(jnp.sum(jnp.abs(t["nominal"]["sumw"])) for t in chan.values())
    limit = -jnp.inf if model.clip_negative else -NEGATIVE_TOLERANCE * scale

    def kept(rows: list[Any]) -> Any:
        # clipped: a finite negative total within the limit; kept as is: the rest (>= 0;
        # too negative, or not finite: check_templates refuses those)
        total = sum(rows)
        return ~((total < 0) & (total >= limit) & jnp.isfinite(total))

    out = dict(chan)
    keep = kept([chan[ds]["nominal"]["sumw"] for ds in background])
    for ds in background:
        nom = chan[ds]["nominal"]
        out[ds] = {"nominal": {k: jnp.where(keep, nom[k], 0.0) for k in ("sumw", "sumw2")},
                   "variations": {s: dict(v) for s, v in chan[ds]["variations"].items()}}
    for s in {s for ds in background for s in chan[ds]["variations"]}:
        for side in ("up", "down"):
            keep = kept([chan[ds]["variations"][s][side] for ds in background])
            for ds in background:
                var = out[ds]["variations"][s]
                var[side] = jnp.where(keep, var[side], 0.0)
    return out


def _bin_name(bin_edges: Mapping[str, Sequence[float]] | None, ch: str, i: int) -> str:
    """``bin i`` with its range where the edges are known."""
    if bin_edges is None:
        return f"bin {i}"
    e = bin_edges[ch]
    return f"bin {i} [{e[i]:g}, {e[i + 1]:g})"


#: the remedy a refused negative background names
_CLIP = "set likelihood: {clip_negative: true} to clip such bins to 0"


def floor_share(tmpl: Mapping[str, Any], model: Model) -> tuple[float, tuple | None]:
    """The share of the Asimov ``q0`` that comes from bins whose background is the
    model's floor alone, and the bin that gives most of it.

    Per bin, with the nominal totals ``s`` (signal) and ``B`` (background) and ``b =
    max(B, floor)``: ``q0_b = 2 [(s + b) ln(1 + s / b) - s]`` (0 where ``s <= 0``; the
    one-bin Asimov ``q0`` without nuisances). A bin is *floor-only* where ``s > floor``
    and ``B <= floor``: its expected count at ``mu = 0`` is the floor alone, so its
    ``q0_b ~ 2 s ln(s / floor)`` measures the floor, not the analysis.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`templates` (concrete float64 arrays ``(nbins,)``).
    model : Model
        The model.

    Returns
    -------
    tuple
        ``(share, worst)``: the floor-only bins' ``sum q0_b`` over every bin's (0.0
        where none has signal), and ``(channel, bin, s, B)`` of the floor-only bin with
        the largest ``q0_b`` (None where there is none).
    """
    total, floored, worst, most = 0.0, 0.0, None, -1.0
    for ch, chan in tmpl.items():
        nb = np.asarray(next(iter(chan.values()))["nominal"]["sumw"]).shape[0]
        sums = {g: np.zeros(nb) for g in ("signal", "background")}
        for ds, t in chan.items():
            sums["signal" if ds in model.signal else "background"] += np.asarray(
                t["nominal"]["sumw"], dtype=np.float64)
        s, big_b = sums["signal"], sums["background"]
        b = np.maximum(big_b, model.floor)
        with np.errstate(divide="ignore", invalid="ignore"):
            q0 = np.where(s > 0, 2.0 * ((s + b) * np.log1p(s / b) - s), 0.0)
        only = (s > model.floor) & (big_b <= model.floor)
        total += float(np.sum(q0))
        floored += float(np.sum(q0[only]))
        for i in np.flatnonzero(only):
            if q0[i] > most:
                most, worst = float(q0[i]), (ch, int(i), float(s[i]), float(big_b[i]))
    return (floored / total if total > 0 else 0.0), worst


#: the share of the Asimov q0 beyond which bins whose background is the floor alone make
#: Z a measure of the floor (:func:`floor_report`): a tail bin that a background sample
#: does not reach and that adds a little signal stays below it
FLOOR_SHARE = 0.05


def floor_report(
    tmpl: Mapping[str, Any], model: Model, bin_edges: Mapping[str, Sequence[float]] | None = None
) -> dict[str, Any] | None:
    """What results.json says of the floor-only bins (:func:`floor_share`): ``{"share",
    "channel", "bin", "signal", "background", "message"}`` (the share of ``q0`` they
    carry, the one carrying most, and one line naming it, its background datasets and
    the remedies), or None where no bin with signal has only the floor as background.
    Above :data:`FLOOR_SHARE` Z measures the floor, not the analysis (a semileptonic
    selection that keeps no Drell-Yan event gives Z ~ 30 from ``floor = 1e-9``): the
    commands say ``message`` as a warning at the start and at the end.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`templates` (concrete float64 arrays ``(nbins,)``).
    model : Model
        The model.
    bin_edges : Mapping[str, sequence of float] or None, optional
        ``{channel: edges}`` (:func:`edges`) to name the bins by their ranges.

    Returns
    -------
    dict or None
        The report (floats, ints and the line), or None.
    """
    share, worst = floor_share(tmpl, model)
    if worst is None:
        return None
    ch, i, s, b = worst
    names = [ds for ds in tmpl[ch] if ds not in model.signal]
    message = (
        f"likelihood: channel {ch!r}, {_bin_name(bin_edges, ch, i)}: signal {s:g} over a "
        f"background of {b:g} ({', '.join(names) or 'no background dataset'}): "
        f"{100 * share:.3g} % of the Asimov q0 comes from bins whose background is the "
        f"model's floor ({model.floor:g}) alone, so Z measures the floor there, not the "
        "analysis; remedies: more background MC, a wider region (looser cuts, wider bins), "
        "or likelihood: {floor: N} (the smallest background count to accept)"
    )
    return {"share": share, "channel": ch, "bin": i, "signal": s, "background": b,
            "message": message}


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
    negative) is negative (naming the systematic too; a negative background names
    ``clip_negative``: :func:`templates` has clipped those it may). Empty background
    bins are allowed (the ``floor`` of the model applies; :func:`floor_report` says
    how much of Z they carry).

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
        return _bin_name(bin_edges, ch, i)

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
                f"merge bins, change the edges, or {_CLIP})"
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
                        + (f" ({_CLIP})" if group == "background" else "")
                    )
