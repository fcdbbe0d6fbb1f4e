"""The rules for names that become file names, ROOT keys, workspace names and datacard tokens.

A dataset, channel, systematic, histogram or observable name (a score's is an
identifier already) ends up as a plot's
file name (``hist_NAME.png``, ``templates_CH.png``, ``score_NAME.png``), a key of
``shapes.root`` (``CH/DATASET``, ``CH/DATASET_SYSTUp``), a pyhf channel, sample or
modifier name, or a token of Combine's datacard. :func:`check_names` refuses at load
time (one line naming the key, the name and the rule) every name that could not be
written faithfully there:

* characters (:mod:`analysis.spec.names`): printable, no whitespace (nor NUL, newline),
  none of ``/ \\ : ; $ #``, not starting with ``.`` or ``-`` (so never ``..``), at most
  :data:`MAX_NAME_BYTES` bytes;
* reserved: the dataset ``data_obs`` (Combine's observed data), the systematics ``mu``
  (the parameter of interest) and ``staterror_*`` (the MC-statistics modifiers), and
  Combine's datacard keywords as channel or systematic names (they start a line);
* a dataset named as another's shape variation ``DATASET_SYSTUp`` / ``Down`` (both
  would write that key of ``shapes.root``).

No JAX: the character rule is :mod:`analysis.spec.names`, shared with the reader of
an earlier run's results (:mod:`analysis.likelihood.section`).
"""

from __future__ import annotations

from typing import Any

from analysis.config.schema import _fail
from analysis.config.yamlsafe import show_value
from analysis.spec.names import (
    MAX_NAME_BYTES,
    NAME_RULE,
    RESERVED_DATASETS,
    name_problem,
    reserved_systematic,
)

__all__ = ["MAX_NAME_BYTES", "NAME_RULE", "RESERVED_DATASETS", "check_name", "check_names"]

# tokens that start a datacard line (a channel's autoMCStats line, a systematic's line)
_DATACARD_KEYWORDS = ("imax", "jmax", "kmax", "shapes", "bin", "observation", "process",
                      "rate")


def check_name(name: Any, where: str, what: str) -> None:
    """Refuse ``name`` (of key ``where``) unless it follows :data:`NAME_RULE`."""
    problem = name_problem(name)
    if problem is not None:
        raise _fail(where, f"{what} name {show_value(name)}{problem}")


def check_names(config: Any) -> None:
    """Every name of ``config`` that becomes a path, a key or a token (module docstring);
    raises the config's one-line validation error naming the key."""
    for name in config.datasets:
        check_name(name, "datasets", "dataset")
        if name in RESERVED_DATASETS:
            raise _fail("datasets", f"dataset name '{name}' is reserved (Combine's observed "
                        "data in shapes.root); rename the dataset")
    for i, h in enumerate(config.histograms):
        check_name(h.name, f"histograms.{i}.name", "histogram")
    for i, o in enumerate(config.observables):
        check_name(o.name, f"observables.{i}.name", "observable")
    channels = list(config.likelihood.channels) if config.likelihood is not None else []
    for ch in channels:
        check_name(ch, "likelihood.channels", "channel")
        if ch in _DATACARD_KEYWORDS:
            raise _fail("likelihood.channels", f"channel name '{ch}' is a datacard keyword "
                        f"({', '.join(_DATACARD_KEYWORDS)}); rename the channel")
    shapes = []
    for i, s in enumerate(config.systematics):
        where = f"systematics.{i}.name"
        check_name(s.name, where, "systematic")
        if reserved_systematic(s.name):
            raise _fail(where, f"systematic name '{s.name}' is reserved (pyhf's 'mu' is the "
                        "parameter of interest, 'staterror_CH' the MC statistics of channel "
                        "CH); rename the systematic")
        if s.name in _DATACARD_KEYWORDS:
            raise _fail(where, f"systematic name '{s.name}' is a datacard keyword "
                        f"({', '.join(_DATACARD_KEYWORDS)}); rename the systematic")
        if s.type in ("shift", "weight"):
            shapes.append(s)
    for s in shapes:
        for ds in s.datasets if s.datasets is not None else config.datasets:
            for side in ("Up", "Down"):
                key = f"{ds}_{s.name}{side}"
                if key in config.datasets:
                    raise _fail("datasets", f"dataset name '{key}' is the shapes.root key of "
                                f"the {side.lower()} template of systematic '{s.name}' of "
                                f"dataset '{ds}' (CH/{key}); rename the dataset")
