"""YAML schema of soft histograms, systematic variations and the binned likelihood.

The names are a contract (held-out configs are written with exactly these)::

    histograms:
      - {name: ht, x: "sum(jets.pt)", edges: [100, 200, 300, 450, 700]}
      - {name: m3j, x: "mass(jets[0] + jets[1] + jets[2])", bins: {n: 20, lo: 0, hi: 600}}
    systematics:
      - {name: jes, type: shift, field: Jet.pt, up: 1.03, down: 0.97}
      - {name: ps, type: weight, up: PS_up, down: PS_down}
      - {name: bkg_norm, type: lnN, datasets: [dy], kappa: 1.10}
    likelihood:
      channels: {sr: {histogram: ht}}   # a channel may add `selection:` (extra conditions)
      mc_stat: true
      upper_limit: false                # true: the expected CLs limit in results.json
      floor: null                       # a number: the smallest background count to accept
      clip_negative: false              # true: clip negative total background bins to 0

* A histogram's ``x`` is any observable expression (:mod:`analysis.select.exprs`); its
  state is the exact expectation of the hard-cut histogram
  (:mod:`analysis.stats.histogram`).
* ``shift``: the field ``C.f`` of collection ``C`` (or the per-event branch ``X.f``)
  times ``up`` / ``down`` before the soft cuts, so selection and observables move
  together; ``weight``: per-event factors (a branch, ``B[i]`` of a per-event array
  branch, numbers and ``+ - * /`` of them) times the nominal event weight; ``lnN``: the
  yields of ``datasets`` times ``kappa ** theta``. ``datasets`` (shift, weight;
  optional): the samples the variation applies to (the others carry their nominal
  template).
* A channel's ``selection`` entries are those of the selection list, added to it for
  that channel (its own soft pass probability: the exact expectation of the hard
  region). The model's samples are the datasets with ``role: signal`` (scaled by mu)
  or ``role: background``.

:func:`check_likelihood` cross-checks these sections against the rest of the config;
:func:`build_model` is the :class:`analysis.likelihood.Model` they describe, whose
histogram-state keys are :func:`state_key`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from analysis.config.factors import parse_factor
from analysis.config.histograms import (
    BinsConfig,
    HistogramConfig,
    edge_parameters,
    is_edge_parameter,
)
from analysis.config.schema import _fail, _Model
from analysis.errors import first_line
from analysis.extras import missing
from analysis.limits import KAPPA_MAX, regular_file
from analysis.select import exprs

if TYPE_CHECKING:
    from analysis.likelihood import Model

__all__ = [
    "BinsConfig",
    "ChannelConfig",
    "CorrectionConfig",
    "HistogramConfig",
    "LikelihoodConfig",
    "LnNConfig",
    "ShiftConfig",
    "SystematicConfig",
    "WeightConfig",
    "build_model",
    "check_likelihood",
    "edge_parameters",
    "is_edge_parameter",
    "model_states",
    "parse_factor",
    "shape_systematics",
    "state_key",
]


class _Systematic(_Model):
    name: str = Field(min_length=1)
    datasets: list[str] | None = None


class ShiftConfig(_Systematic):
    """``field`` (``Collection.field`` or a per-event ``Group.field``) times ``up``/``down``."""

    type: Literal["shift"] = "shift"
    field: str
    up: float = Field(gt=0, allow_inf_nan=False)
    down: float = Field(gt=0, allow_inf_nan=False)

    @field_validator("field")
    @classmethod
    def _field(cls, v: str) -> str:
        head, _, tail = v.partition(".")
        if not (head.isidentifier() and tail.isidentifier()):
            raise ValueError(f"expected Collection.field (e.g. Jet.pt), got {v!r}")
        return v


class CorrectionConfig(_Model):
    """A per-object scale factor from a correctionlib JSON file: correction ``key`` of
    ``file``, evaluated for every object of the collection of ``set`` with the fields
    ``inputs`` (``abs_eta``: ``|eta|``) as its numeric inputs, in order, and the
    weight's ``up`` / ``down`` as its one string input."""

    file: str
    key: str
    set: str
    inputs: list[str] = Field(min_length=1)


class WeightConfig(_Systematic):
    """Per-event factors ``up``/``down`` (expressions of per-event branches) x the weight;
    with ``correction``: per-object scale factors of a set (``up``/``down`` the
    correction's string input), the event weighed by ``prod_{j in set} sf_j``."""

    type: Literal["weight"] = "weight"
    up: str
    down: str
    correction: CorrectionConfig | None = None

    @field_validator("up", "down", mode="before")
    @classmethod
    def _text(cls, v: Any) -> str:
        text = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
        if not isinstance(text, str):
            raise ValueError(f"expected a branch or an expression of branches, got {v!r}")
        return text

    @model_validator(mode="after")
    def _factors(self) -> WeightConfig:
        if self.correction is None:
            for side in ("up", "down"):
                try:
                    parse_factor(getattr(self, side))
                except ValueError as err:
                    raise _fail(side, str(err)) from None
        return self


class LnNConfig(_Model):
    """An lnN normalisation uncertainty: yields of ``datasets`` times ``kappa ** theta``."""

    name: str = Field(min_length=1)
    type: Literal["lnN"] = "lnN"
    datasets: list[str] = Field(min_length=1)
    kappa: float = Field(gt=0, allow_inf_nan=False)

    @field_validator("kappa")
    @classmethod
    def _kappa(cls, v: float) -> float:
        if not 1 / KAPPA_MAX <= v <= KAPPA_MAX:
            raise ValueError(f"expected {1 / KAPPA_MAX:g} <= kappa <= {KAPPA_MAX:g}, got {v!r} "
                             "(beyond, the constraint no longer constrains)")
        return v


SystematicConfig = Annotated[
    Union[ShiftConfig, WeightConfig, LnNConfig], Field(discriminator="type")  # noqa: UP007
]


class ChannelConfig(_Model):
    """One channel: the histogram it uses, extra selection conditions, its datasets."""

    histogram: str
    # the selection list's entries (the loader resolves the name: model_rebuild)
    selection: list[SelectionEntryConfig] = []  # noqa: F821
    datasets: list[str] | None = None


class LikelihoodConfig(_Model):
    """The binned model: channels, MC statistics (Barlow-Beeston lite); ``upper_limit``:
    write the expected CLs limit in results.json without a ``cls_upper_limit`` term;
    ``floor``: the smallest expected count of a bin (None: 1e-9, and the commands warn
    where bins whose background is that floor alone carry Z:
    :func:`analysis.likelihood.floor_report`; a number: that count, accepted without
    the warning); ``clip_negative``: a negative total background bin is set to 0 rather
    than refused (:func:`analysis.likelihood.templates`)."""

    channels: dict[str, ChannelConfig] = Field(min_length=1)
    mc_stat: bool = True
    upper_limit: bool = False
    floor: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    clip_negative: bool = False

    @model_validator(mode="before")
    @classmethod
    def _installed(cls, data: Any) -> Any:
        # before the channels: without the extra, nothing else of the section matters
        module = missing("likelihood")
        if module is not None:
            raise _fail("", f"needs the 'likelihood' extra ({module} is not installed): "
                            "pip install 'diffcoffea[likelihood]'")
        return data


# --- cross-checks and the model ------------------------------------------------------


def state_key(channel: str, syst: str | None = None, side: str | None = None) -> str:
    """The histogram-state key of a channel's nominal template or of a variation."""
    return channel if syst is None else f"{channel}:{syst}:{side}"


def shape_systematics(config: Any) -> list[Any]:
    """The shift and weight systematics (the shape variations of every channel)."""
    return [s for s in config.systematics if s.type in ("shift", "weight")]


def model_datasets(config: Any) -> list[str]:
    """The samples of the model: datasets with role signal or background."""
    return [n for n, d in config.datasets.items() if d.role in ("signal", "background")]


def check_likelihood(config: Any, sets: dict) -> None:
    """Cross-check ``histograms``, ``systematics`` and ``likelihood`` against the config
    (raises pydantic custom errors naming the key)."""
    names: set[str] = set()
    for i, h in enumerate(config.histograms):
        if h.name in names:
            raise _fail(f"histograms.{i}.name", f"duplicate histogram name '{h.name}'")
        names.add(h.name)
        try:
            node = exprs.resolve(exprs.parse(h.x), sets)
        except ValueError as err:
            raise _fail(f"histograms.{i}.x", str(err)) from None
        del node
    collections = set(_collections(config))
    seen: set[str] = set()
    for i, s in enumerate(config.systematics):
        if s.name in seen:
            raise _fail(f"systematics.{i}.name", f"duplicate systematic name '{s.name}'")
        seen.add(s.name)
        for j, ds in enumerate(s.datasets or []):
            if ds not in config.datasets:
                raise _fail(f"systematics.{i}.datasets.{j}",
                            f"unknown dataset '{ds}'; expected one of {', '.join(config.datasets)}")
        if s.type == "weight" and s.correction is not None:
            check_correction(config, s, f"systematics.{i}.correction", sets)
        if s.type == "shift":
            head = s.field.split(".", 1)[0]
            if head in sets and head not in collections:
                raise _fail(f"systematics.{i}.field", f"'{head}' is an object set; a shift "
                            f"names its collection ({', '.join(sorted(collections))})")
    lk = config.likelihood
    if lk is None:
        if config.systematics:
            raise _fail("systematics", "systematic variations need a 'likelihood:' section")
        return
    if not config.histograms:
        raise _fail("likelihood", "a likelihood needs histograms under 'histograms:'")
    samples = model_datasets(config)
    signal = [n for n in samples if config.datasets[n].role == "signal"]
    if not signal:
        raise _fail("likelihood", "no dataset has role: signal (the datasets scaled by mu)")
    for name, ch in lk.channels.items():
        if ch.histogram not in names:
            raise _fail(f"likelihood.channels.{name}.histogram",
                        f"unknown histogram '{ch.histogram}'; expected one of "
                        f"{', '.join(sorted(names))}")
        for j, ds in enumerate(ch.datasets or []):
            if ds not in samples:
                raise _fail(f"likelihood.channels.{name}.datasets.{j}",
                            f"'{ds}' is not a signal or background dataset "
                            f"({', '.join(samples)})")
        chosen = ch.datasets if ch.datasets is not None else samples
        if not set(chosen) & set(signal):
            raise _fail(f"likelihood.channels.{name}",
                        f"channel has no signal dataset (datasets {chosen}, signal {signal})")
    _check_derived_names(config)
    for i, s in enumerate(config.systematics):
        for j, ds in enumerate(s.datasets if s.type == "lnN" else []):
            if ds not in samples:
                raise _fail(f"systematics.{i}.datasets.{j}",
                            f"'{ds}' is not a signal or background dataset "
                            f"({', '.join(samples)})")


def _check_derived_names(config: Any) -> None:
    """Refuse names whose derived names collide: template keys (``CH``, ``CH:SYST:up``)
    of two templates, or a systematic named as an MC-statistics nuisance
    (``mc_stat_CH[i]``): one template or nuisance would silently replace the other."""
    lk = config.likelihood
    shapes = [s.name for s in shape_systematics(config)]
    keys: dict[str, str] = {}
    for name in lk.channels:
        derived = [(state_key(name), f"channel '{name}'")] + [
            (state_key(name, s, side), f"the {side} template of systematic '{s}' in channel "
             f"'{name}'") for s in shapes for side in ("up", "down")]
        for key, what in derived:
            if key in keys:
                raise _fail(f"likelihood.channels.{name}",
                            f"template key '{key}' of {what} is also that of {keys[key]}; "
                            "rename the channel or the systematic")
            keys[key] = what
    if not lk.mc_stat:
        return
    for i, s in enumerate(config.systematics):
        m = re.fullmatch(r"mc_stat_(.*)\[(\d+)\]", s.name)
        if m and m.group(1) in lk.channels:
            raise _fail(f"systematics.{i}.name", f"'{s.name}' is the name of the "
                        f"MC-statistics nuisance of channel '{m.group(1)}', bin {m.group(2)}; "
                        "rename it")


def _collections(config: Any) -> list[str]:
    out = []
    for s in config.objects.values():
        if s.collection is not None and s.collection not in out:
            out.append(s.collection)
    return out


def build_model(config: Any) -> Model | None:
    """The :class:`analysis.likelihood.Model` of ``config`` (None without ``likelihood``)."""
    lk = config.likelihood
    if lk is None:
        return None
    # here, not at the top: the likelihood package loads evermore, optimistix and flax
    # (~2 s), which a config without a likelihood never needs
    from analysis.likelihood import Channel, Model, Normalisation

    samples = model_datasets(config)
    shapes = [s.name for s in shape_systematics(config)]
    channels = tuple(
        Channel(
            name,
            state_key(name),
            {s: (state_key(name, s, "up"), state_key(name, s, "down")) for s in shapes},
            tuple(ch.datasets) if ch.datasets is not None else tuple(samples),
        )
        for name, ch in lk.channels.items()
    )
    norms = tuple(
        Normalisation(s.name, tuple(s.datasets), s.kappa)
        for s in config.systematics if s.type == "lnN"
    )
    signal = tuple(n for n in samples if config.datasets[n].role == "signal")
    floor = {} if lk.floor is None else {"floor": lk.floor}
    return Model(channels, signal, norms, mc_stat=lk.mc_stat, clip_negative=lk.clip_negative,
                 **floor)


def model_states(stats: dict[str, Any], config: Any) -> dict[str, dict[str, Any]]:
    """``{dataset: {key: Histogram}}`` of the model's samples from the objective's
    statistics (their normalised ``templates``); a shape systematic with ``datasets``
    leaves the other samples at their nominal template."""
    only = {s.name: set(s.datasets) for s in shape_systematics(config) if s.datasets is not None}
    channels = list(config.likelihood.channels) if config.likelihood is not None else []
    out = {}
    for ds in model_datasets(config):
        t = dict(stats[ds]["templates"])
        for name, allowed in only.items():
            if ds not in allowed:
                for ch in channels:
                    for side in ("up", "down"):
                        t[state_key(ch, name, side)] = t[state_key(ch)]
        out[ds] = t
    return out


def load_correction(path: str, key: str, where: str) -> Any:
    """The correction ``key`` of the correctionlib JSON file ``path``, or a one-line
    error naming file and key."""
    import correctionlib

    from analysis.errors import ConfigError

    try:  # a FIFO, a device (/dev/zero), a directory, a loop, or a huge file: one line
        regular_file(path, "correction file")
    except ConfigError as err:
        raise _fail(where + ".file", str(err)) from None
    try:
        cset = correctionlib.CorrectionSet.from_file(path)
    except FileNotFoundError:
        raise _fail(where + ".file", f"{path}: no such correction file") from None
    except Exception as err:  # noqa: BLE001  (any parse error of the file: one line)
        raise _fail(where + ".file",
                    f"{path}: not a correctionlib JSON file ({first_line(err)})") from None
    names = sorted(cset.keys())
    if key not in names:
        raise _fail(where + ".key", f"{path} has no correction '{key}'; it has "
                    f"{', '.join(names) or 'none'}")
    return cset[key]


def check_correction(config: Any, s: Any, where: str, sets: dict) -> None:
    """File, key, set and inputs of a scale-factor weight."""
    c = s.correction
    if c.set not in sets:
        raise _fail(where + ".set", f"unknown set '{c.set}'; expected one of {', '.join(sets)}")
    corr = load_correction(config.resolve_path(c.file), c.key, where)
    numeric = [v for v in corr.inputs if v.type in ("real", "int")]
    strings = [v for v in corr.inputs if v.type == "string"]
    if len(numeric) != len(c.inputs) or len(strings) != 1:
        raise _fail(where + ".inputs", f"correction '{c.key}' takes "
                    f"{', '.join(f'{v.name} ({v.type})' for v in corr.inputs)}; expected "
                    f"{len(c.inputs)} numbers (inputs: {c.inputs}) and one string (up/down)")
