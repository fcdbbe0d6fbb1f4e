"""The ``likelihood`` section of an earlier run's results.json, checked before it is exported.

``diffcoffea export`` reads a results folder that may have been edited, truncated or
planted: :func:`check_section` validates the section against a strict schema (pydantic;
numbers must be JSON numbers, not strings or booleans; finite) and the cross-checks the
model relies on, and returns every problem as one line ``"likelihood.KEY: message"``:

* ``channels``: at least one; each with at least two finite, strictly increasing
  ``edges`` and at least one sample, whose ``nominal`` ``sumw`` / ``sumw2`` and every
  variation's ``up`` / ``down`` have one entry per bin (``sumw2 >= 0``);
* ``signal``: a non-empty list of datasets, each a sample of some channel;
* ``normalisations``: ``{name: {datasets, kappa}}`` with ``1/KAPPA_MAX <= kappa <=
  KAPPA_MAX`` and datasets that are samples;
* ``mc_stat`` a boolean, ``floor`` a positive number;
* every channel, sample and systematic name follows :mod:`analysis.spec.names` (it
  becomes a ROOT key and a datacard token) and is not reserved (``data_obs``, ``mu``,
  ``staterror_*``).

Extra keys (``significance``, ``fit``, ...) are not read by the export and not checked.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.limits import KAPPA_MAX
from analysis.spec.names import RESERVED_DATASETS, name_problem, reserved_systematic

__all__ = ["MAX_PROBLEMS", "check_section"]

#: problems listed (one line each); more are counted
MAX_PROBLEMS = 20


class _Strict(BaseModel):
    # strict: "1.5" or true for a number is a problem, never converted
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


class _Nominal(_Strict):
    sumw: list[float]
    sumw2: list[float]


class _Variation(_Strict):
    up: list[float]
    down: list[float]


class _Sample(_Strict):
    nominal: _Nominal
    variations: dict[str, _Variation] = {}


class _Channel(_Strict):
    edges: list[float] = Field(min_length=2)
    samples: dict[str, _Sample] = Field(min_length=1)


class _Normalisation(_Strict):
    datasets: list[str] = Field(min_length=1)
    kappa: float = Field(ge=1 / KAPPA_MAX, le=KAPPA_MAX)


class _Section(_Strict):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore")

    channels: dict[str, _Channel] = Field(min_length=1)
    signal: list[str] = Field(min_length=1)
    normalisations: dict[str, _Normalisation] = {}
    mc_stat: bool = False
    floor: float = Field(default=1e-9, gt=0)


def _where(loc: tuple) -> str:
    return ".".join(["likelihood", *(str(p) for p in loc)])


def _show(value: Any) -> str:
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def check_section(section: Any) -> list[str]:
    """Every problem of a results.json ``likelihood`` section (module docstring), one
    line each (at most :data:`MAX_PROBLEMS`, then a count); empty when it can be
    exported.

    Parameters
    ----------
    section : Any
        The parsed ``likelihood`` value of results.json.

    Returns
    -------
    list of str
        ``"likelihood.KEY: message"`` lines.
    """
    try:
        sec = _Section.model_validate(section)
    except ValidationError as exc:
        lines = [f"{_where(e['loc'])}: {e['msg']}" + (
            f", got {_show(e['input'])}" if e["type"] != "missing" else "")
            for e in exc.errors(include_url=False)]
        return _bounded(lines)
    problems: list[str] = []
    samples: set[str] = set()
    for ch, chan in sec.channels.items():
        problems += _names(f"likelihood.channels.{_show(ch)}", ch, "channel")
        edges = chan.edges
        bad = next((i for i in range(1, len(edges)) if not edges[i] > edges[i - 1]), None)
        if bad is not None:
            problems.append(f"likelihood.channels.{ch}.edges: expected strictly increasing "
                            f"edges, found edges[{bad}] = {edges[bad]:g} after "
                            f"{edges[bad - 1]:g}")
        n = len(edges) - 1
        for ds, t in chan.samples.items():
            samples.add(ds)
            where = f"likelihood.channels.{ch}.samples.{ds}"
            problems += _names(where, ds, "dataset")
            arrays = [("nominal.sumw", t.nominal.sumw), ("nominal.sumw2", t.nominal.sumw2)]
            for s, v in t.variations.items():
                problems += _names(f"{where}.variations.{_show(s)}", s, "systematic")
                arrays += [(f"variations.{s}.up", v.up), (f"variations.{s}.down", v.down)]
            for key, values in arrays:
                if len(values) != n:
                    problems.append(f"{where}.{key}: {len(values)} entries for {n} bins "
                                    f"(edges {len(edges)})")
            if any(not (w >= 0 and math.isfinite(w)) for w in t.nominal.sumw2):
                problems.append(f"{where}.nominal.sumw2: expected sums of squared weights "
                                ">= 0")
    for i, ds in enumerate(sec.signal):
        if ds not in samples:
            problems.append(f"likelihood.signal.{i}: {_show(ds)} is not a sample of any "
                            "channel")
    for name, norm in sec.normalisations.items():
        problems += _names(f"likelihood.normalisations.{_show(name)}", name, "systematic")
        for j, ds in enumerate(norm.datasets):
            if ds not in samples:
                problems.append(f"likelihood.normalisations.{name}.datasets.{j}: {_show(ds)} "
                                "is not a sample of any channel")
    return _bounded(problems)


def _names(where: str, name: str, what: str) -> list[str]:
    problem = name_problem(name)
    if problem is None and (name in RESERVED_DATASETS if what == "dataset" else
                            what == "systematic" and reserved_systematic(name)):
        problem = " is reserved (Combine's data_obs; pyhf's mu, staterror_CH)"
    return [] if problem is None else [f"{where}: {what} name {_show(name)}{problem}"]


def _bounded(lines: list[str]) -> list[str]:
    lines = list(dict.fromkeys(line.replace("\n", " ") for line in lines))
    if len(lines) > MAX_PROBLEMS:
        return lines[:MAX_PROBLEMS] + [f"(and {len(lines) - MAX_PROBLEMS} more problems)"]
    return lines
