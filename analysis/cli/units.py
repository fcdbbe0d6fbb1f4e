"""Units of parameters and observables, for plot axes and tables.

One table of known NanoAOD fields (:data:`KNOWN_UNITS`: momenta, masses, energies in
GeV; angles, b-tag scores, counts dimensionless); a ``unit:`` in the config (on a
parameter or an observable) overrides it. An observable's unit comes from its name
(``ht``, ``m3j``, ``mll``, ...) or its expression (``mass(...)``, ``mt(...)``: GeV;
``count(...)``, ``deltaR(...)``, ``deltaPhi(...)``: none; else the last field of
``Jet.pt`` or ``sum(jets.pt)``); a parameter's from the
cut it is the threshold of (``jet_pt_min`` on ``pt``: GeV), else from its name.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["KNOWN_UNITS", "axis_label", "expression_unit", "lumi_label", "observable_unit",
           "parameter_unit", "units_of"]

_GEV = "GeV"
#: field or observable name (lower case) -> unit ("" for dimensionless)
KNOWN_UNITS: dict[str, str] = {
    **dict.fromkeys(
        ["pt", "mass", "m", "e", "energy", "et", "ht", "met", "sumet", "mt", "px", "py",
         "pz", "m3j", "mjj", "mll", "mbb", "mbjj", "m4l", "mt2"],
        _GEV,
    ),
    **dict.fromkeys(
        ["eta", "abs_eta", "phi", "dr", "deltar", "btag", "count", "n", "charge"], ""
    ),
}
#: the unit of what an expression function returns (sum(...) has its argument's)
_FUNCTION_UNITS = {"count": "", "mass": _GEV, "mt": _GEV, "deltaR": "", "deltaPhi": "",
                   "deltaEta": ""}
_FIELD = re.compile(r"\.(\w+)\s*\)*\s*$")


def _lookup(name: str) -> str | None:
    """Unit of a field or name: the whole name, else its last ``_`` part that is known
    (``lead_jet_pt`` -> ``pt``; ``MET_pt`` -> ``pt``); ``btag...`` is a score."""
    key = name.lower()
    if key in KNOWN_UNITS:
        return KNOWN_UNITS[key]
    if key.startswith("btag"):
        return ""
    for part in reversed(key.split("_")):
        if part in KNOWN_UNITS:
            return KNOWN_UNITS[part]
    return None


def expression_unit(x: str, name: str | None = None, *, bivariate: bool = False) -> str:
    """Unit of an expression ``x`` (``jets[0].pt``, ``sum(jets.pt)``, ``mass(...)``):
    its function's, else that of ``name`` when known (not for a bivariate observable),
    else that of the expression's last field; ``""`` when none is known."""
    x = x.strip()
    function = x.split("(", 1)[0] if "(" in x else ""
    if function in _FUNCTION_UNITS:
        return _FUNCTION_UNITS[function]
    by_name = _lookup(name) if name else None
    if by_name is not None and not bivariate:
        return by_name
    m = _FIELD.search(x)
    found = _lookup(m.group(1)) if m else None
    return found or ""


def observable_unit(obs: Any) -> str:
    """Unit of observable ``obs``'s ``x`` (config ``unit:`` first)."""
    given = getattr(obs, "unit", None)
    if given is not None:
        return given
    return expression_unit(obs.x, obs.name, bivariate=obs.y is not None)


def _params(c: Any) -> list[str]:
    """The parameters a cut's thresholds name (one, or a window's two ends)."""
    pairs = c.thresholds() if hasattr(c, "thresholds") else ((c.param, c.value),)
    return [p for p, _ in pairs if p is not None]


def _cuts(config: Any):
    """Every ``(var, params, is_count)`` of the config's cuts, both config forms."""
    for s in (getattr(config, "objects", None) or {}).values():
        for c in s.cuts:
            yield c.var, _params(c), False
    sel = getattr(config, "selection", None)
    if sel is None:
        return
    objects = getattr(sel, "objects", None)
    for c in getattr(objects, "cuts", None) or []:
        yield c.var, _params(c), False
    for e in list(getattr(sel, "events", None) or []) + list(getattr(sel, "entries", None) or []):
        yield e.var, _params(e), getattr(e, "count", None) is not None


def parameter_unit(config: Any, name: str) -> str:
    """Unit of parameter ``name``: config ``unit:``, else the unit of the field it cuts
    on (a count threshold: none), else from its name."""
    given = getattr(config.parameters[name], "unit", None)
    if given is not None:
        return given
    for var, params, is_count in _cuts(config):
        if name in params:
            if is_count:
                return ""
            found = _lookup(var)
            if found is not None:
                return found
    return _lookup(name) or ""


def units_of(config: Any) -> dict[str, str]:
    """``{name: unit}`` for every parameter and observable of ``config`` (``""``: none)."""
    out = {n: parameter_unit(config, n) for n in config.parameters}
    out.update({o.name: observable_unit(o) for o in config.observables})
    return out


def axis_label(text: str, unit: str) -> str:
    """``"text [unit]"``, or ``text`` for a dimensionless quantity."""
    return f"{text} [{unit}]" if unit else text


#: inverse-cross-section units of an integrated luminosity, in pb^-1 each
_LUMI_UNITS = (("ab", 1e6), ("fb", 1e3), ("pb", 1.0), ("nb", 1e-3), ("$\\mu$b", 1e-6))


def lumi_label(lumi_pb: float, *, mathtext: bool = True) -> str:
    """An integrated luminosity given in pb^-1, in the unit that reads best: the largest
    of ab^-1, fb^-1, pb^-1, nb^-1, ub^-1 in which it is at least 1 (``0.0075`` ->
    ``"7.5 nb$^{-1}$"``, ``140000`` -> ``"140 fb$^{-1}$"``).

    Parameters
    ----------
    lumi_pb : float
        The luminosity in pb^-1 (the config's ``lumi``).
    mathtext : bool, optional
        Keyword-only. matplotlib mathtext (default) or plain text (``"7.5 nb^-1"``).

    Returns
    -------
    str
    """
    value = float(lumi_pb)
    name, scale = next(((n, s) for n, s in _LUMI_UNITS if abs(value) >= s), _LUMI_UNITS[-1])
    if value == 0:
        name, scale = "pb", 1.0
    if not mathtext:
        name = name.replace("$\\mu$", "u")
    power = "$^{-1}$" if mathtext else "^-1"
    return f"{value / scale:.3g} {name}{power}"
