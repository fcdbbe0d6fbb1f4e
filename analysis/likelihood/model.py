"""The description of a binned statistical model: what the likelihood is built from.

A :class:`Model` names what the likelihood is built from; the numbers come from
merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. ``{ds: d.value}``
of a coffea processor's ``{dataset: stats.Derived}``):

* :class:`Channel` ``(name, histogram, variations={syst: (up_key, down_key)}, datasets=None)``:
  the channel's nominal template of each dataset is ``states[ds][histogram]``; a shape
  systematic ``syst`` has up/down templates ``states[ds][up_key]`` / ``[down_key]``
  (every dataset of the channel must have them: a dataset unaffected by ``syst``
  carries its nominal histogram under those keys). ``datasets``: the samples of the
  channel (default: every dataset of the states).
* :class:`Normalisation` ``(name, datasets, kappa)``: an lnN uncertainty, the yields
  of ``datasets`` scaled by ``kappa ** theta``.
* ``Model(channels, signal, normalisations=(), mc_stat=True, floor=1e-9,
  clip_negative=False)``: ``signal`` are the datasets scaled by the signal strength
  ``mu``; ``mc_stat`` adds the Barlow-Beeston-lite factors; ``floor`` is the smallest
  expected count of a bin (see :mod:`analysis.likelihood.expected`); ``clip_negative``
  sets a negative total background bin to 0 (see
  :func:`~analysis.likelihood.histograms.templates`).

The templates of a model (:func:`~analysis.likelihood.histograms.templates`, their
edges and checks) are read from the states by :mod:`analysis.likelihood.histograms`.

Pure maths: knows :mod:`analysis.stats`, nothing of files, coffea or the config.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis.errors import LikelihoodError
from analysis.limits import KAPPA_MAX

__all__ = [
    "Channel",
    "FitError",
    "KAPPA_MAX",
    "LikelihoodError",
    "Model",
    "Normalisation",
]

#: ``mc_stat_CH[i]``: the name of channel CH's bin-i MC-statistics nuisance.
_MC_STAT = re.compile(r"mc_stat_(.*)\[(\d+)\]")


class FitError(LikelihoodError):
    """A profile fit did not converge: one line naming the step and the fit status.

    Parameters
    ----------
    message : str
        One line naming the step and the fit status.
    """


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise LikelihoodError(f"likelihood: {where}: expected a non-empty name, found {value!r}")
    return value


def _names(values: Any, where: str) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise LikelihoodError(f"likelihood: {where}: expected a list of names, found {values!r}")
    out = tuple(_name(v, f"{where}[{i}]") for i, v in enumerate(values))
    if len(set(out)) != len(out):
        raise LikelihoodError(f"likelihood: {where}: names repeat in {list(out)}")
    return out


@dataclass(frozen=True)
class Normalisation:
    """lnN normalisation uncertainty: the yields of ``datasets`` times ``kappa ** theta``
    (pyhf ``normsys`` with ``hi = kappa``, ``lo = 1 / kappa``), ``kappa > 0``.

    Parameters
    ----------
    name : str
        The nuisance's name (non-empty; unique among the model's nuisances).
    datasets : tuple of str
        The datasets whose yields it scales (no repeats).
    kappa : float
        Finite and ``> 0``: the scale factor at ``theta = 1``.

    Raises
    ------
    LikelihoodError
        One line, for a bad name, dataset list or kappa.
    """

    name: str
    datasets: tuple[str, ...]
    kappa: float

    def __post_init__(self) -> None:
        _name(self.name, "normalisation name")
        object.__setattr__(
            self, "datasets", _names(self.datasets, f"normalisation {self.name!r}: datasets")
        )
        k = self.kappa
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k <= 0:
            raise LikelihoodError(
                f"likelihood: normalisation {self.name!r}: kappa = {k!r}; expected a finite "
                "number > 0"
            )
        if not 1 / KAPPA_MAX <= k <= KAPPA_MAX:
            raise LikelihoodError(
                f"likelihood: normalisation {self.name!r}: kappa = {k!r}; expected "
                f"{1 / KAPPA_MAX:g} <= kappa <= {KAPPA_MAX:g} (beyond, the constraint no longer "
                "constrains: use a free normalisation instead)"
            )
        object.__setattr__(self, "kappa", float(k))


@dataclass(frozen=True)
class Channel:
    """One channel: the state key of its histogram, its shape variations
    ``{syst: (up_key, down_key)}`` and optionally its datasets (default: all).

    Parameters
    ----------
    name : str
        The channel's name (non-empty).
    histogram : str
        The key of the channel's nominal histogram in every dataset's states.
    variations : Mapping[str, tuple of str] or sequence of pairs, optional
        Shape systematics ``{syst: (up_key, down_key)}`` (default none); stored as a
        sorted tuple of ``(syst, up_key, down_key)``.
    datasets : tuple of str or None, optional
        The channel's samples (default None: every dataset of the states).

    Raises
    ------
    LikelihoodError
        One line, for a bad name, key or variation.
    """

    name: str
    histogram: str
    variations: Any = field(default=())
    datasets: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _name(self.name, "channel name")
        _name(self.histogram, f"channel {self.name!r}: histogram")
        raw = self.variations
        items = raw.items() if isinstance(raw, Mapping) else raw
        out = []
        for item in items:
            try:
                syst, pair = item
                if isinstance(pair, str) or len(pair) != 2:
                    raise ValueError
                up, down = pair
            except (TypeError, ValueError):
                raise LikelihoodError(
                    f"likelihood: channel {self.name!r}: variations: expected "
                    f"{{name: (up_key, down_key)}}, found {item!r}"
                ) from None
            where = f"channel {self.name!r}: variation {syst!r}"
            out.append(
                (
                    _name(syst, f"channel {self.name!r}: variation"),
                    _name(up, where),
                    _name(down, where),
                )
            )
        out.sort()
        names = [v[0] for v in out]
        if len(set(names)) != len(names):
            raise LikelihoodError(f"likelihood: channel {self.name!r}: variations repeat: {names}")
        object.__setattr__(self, "variations", tuple(out))
        if self.datasets is not None:
            object.__setattr__(
                self, "datasets", _names(self.datasets, f"channel {self.name!r}: datasets")
            )

    @property
    def shapes(self) -> tuple[str, ...]:
        """The channel's shape systematics' names, sorted."""
        return tuple(v[0] for v in self.variations)


@dataclass(frozen=True)
class Model:
    """Channels, signal datasets (scaled by ``mu``), lnN normalisations, MC statistics.

    Frozen and hashable (a static argument of jitted functions). ``floor``: the
    expected count of a bin is ``max(lambda, floor)`` (documented in
    :mod:`analysis.likelihood.expected`).

    Parameters
    ----------
    channels : tuple of Channel
        One or more channels with distinct names.
    signal : tuple of str
        The signal datasets (at least one; every channel must have one), scaled by ``mu``.
    normalisations : tuple of Normalisation, optional
        lnN uncertainties (default none).
    mc_stat : bool, optional
        Add Barlow-Beeston-lite MC-statistics factors, one per bin (default True).
    floor : float, optional
        The smallest expected count of a bin, ``> 0`` (default ``1e-9``).
    clip_negative : bool, optional
        Set every negative total background bin (nominal or a variation) to 0 rather
        than refuse it (default False: only those within
        :data:`~analysis.likelihood.histograms.NEGATIVE_TOLERANCE` of 0 are).

    Raises
    ------
    LikelihoodError
        One line, for an inconsistent model.
    """

    channels: tuple[Channel, ...]
    signal: tuple[str, ...]
    normalisations: tuple[Normalisation, ...] = ()
    mc_stat: bool = True
    floor: float = 1e-9
    clip_negative: bool = False

    def __post_init__(self) -> None:
        chans = tuple(self.channels)
        if not chans or not all(isinstance(c, Channel) for c in chans):
            raise LikelihoodError(
                f"likelihood: channels: expected one or more Channel, found {self.channels!r}"
            )
        names = [c.name for c in chans]
        if len(set(names)) != len(names):
            raise LikelihoodError(f"likelihood: channels: names repeat in {names}")
        object.__setattr__(self, "channels", chans)
        object.__setattr__(self, "signal", _names(self.signal, "signal"))
        if not self.signal:
            raise LikelihoodError("likelihood: signal: expected at least one signal dataset")
        norms = tuple(self.normalisations)
        if not all(isinstance(n, Normalisation) for n in norms):
            raise LikelihoodError(
                f"likelihood: normalisations: expected Normalisation entries, found {norms!r}"
            )
        object.__setattr__(self, "normalisations", norms)
        clash = set(self.norm_names) & set(self.shape_names)
        if len(set(self.norm_names)) != len(self.norm_names) or clash:
            raise LikelihoodError(
                f"likelihood: nuisance names repeat: normalisations {list(self.norm_names)}, "
                f"shapes {list(self.shape_names)}"
            )
        if not isinstance(self.mc_stat, bool):
            raise LikelihoodError(
                f"likelihood: mc_stat: expected true or false, found {self.mc_stat!r}"
            )
        if self.mc_stat:  # a nuisance named as an MC-statistics factor would merge with it
            for n in (*self.norm_names, *self.shape_names):
                m = _MC_STAT.fullmatch(n)
                if m and m.group(1) in names:
                    raise LikelihoodError(
                        f"likelihood: nuisance name {n!r} is the name of the MC-statistics "
                        f"nuisance of channel {m.group(1)!r}, bin {m.group(2)}; rename it"
                    )
        _check_keys(chans)
        if not isinstance(self.clip_negative, bool):
            raise LikelihoodError(
                f"likelihood: clip_negative: expected true or false, found {self.clip_negative!r}"
            )
        if not (
            isinstance(self.floor, (int, float)) and self.floor > 0 and math.isfinite(self.floor)
        ):
            raise LikelihoodError(f"likelihood: floor: expected a number > 0, found {self.floor!r}")
        for c in chans:
            if c.datasets is not None and not set(c.datasets) & set(self.signal):
                raise LikelihoodError(
                    f"likelihood: channel {c.name!r} has no signal dataset (datasets "
                    f"{list(c.datasets)}, signal {list(self.signal)}); every channel needs one"
                )

    @property
    def norm_names(self) -> tuple[str, ...]:
        """Normalisation nuisances: the names of ``normalisations``, in order."""
        return tuple(n.name for n in self.normalisations)

    @property
    def shape_names(self) -> tuple[str, ...]:
        """Shape nuisances: every variation name of every channel, sorted."""
        return tuple(sorted({s for c in self.channels for s in c.shapes}))

    def datasets(self, channel: Channel, states: Mapping[str, Any]) -> tuple[str, ...]:
        """The samples of ``channel``: its ``datasets``, else every key of ``states``."""
        return tuple(channel.datasets) if channel.datasets is not None else tuple(states)


def _check_keys(channels: Sequence[Channel]) -> None:
    """Refuse a state key that stands for two different templates (a channel's nominal
    and a variation, or the variations of two systematics or sides): one would silently
    replace the other. The same template in two channels is allowed."""
    role: dict[str, tuple[tuple[str, str], str]] = {}

    def claim(key: str, kind: tuple[str, str], what: str) -> None:
        prev = role.get(key)
        if prev is not None and prev[0] != kind:
            raise LikelihoodError(
                f"likelihood: histogram key {key!r} is both the {prev[1]} and the {what}; "
                "rename the channel or the systematic"
            )
        role[key] = (kind, what)

    for c in channels:
        claim(c.histogram, ("", ""), f"nominal template of channel {c.name!r}")
        for s, up, dn in c.variations:
            for key, side in ((up, "up"), (dn, "down")):
                claim(key, (s, side), f"{side} template of systematic {s!r} in channel {c.name!r}")
