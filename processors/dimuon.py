"""Invariant mass of opposite-charge muon pairs with soft muon cuts: a coffea processor.

Uses only the public API (:mod:`analysis.stats`, :mod:`analysis.soft`) and ``vector``::

    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    from analysis import stats
    from processors.dimuon import DimuonProcessor

    fileset = {"dy": ["../shared/data/nano_dy.root"]}
    runner = processor.Runner(executor=processor.FuturesExecutor(workers=2), schema=NanoAODSchema)
    out = runner(fileset, DimuonProcessor(), treename="Events")
    out["dy"].value_and_grad(lambda s: stats.mean(s["mass"]))

Muon ``i`` passes with probability
``p_i = soft_cut(pt, ">", mu_pt_min) * soft_cut(|eta|, "<", mu_abs_eta_max)
* soft_cut(pfRelIso04_all, "<", mu_iso_max)`` (each with its width).
Every opposite-charge pair of muons of an event (hard: charge is discrete) whose
invariant mass (``vector`` ``Momentum4D`` from pt, eta, phi, mass; float64) lies in
the Z window ``low < m < high`` (hard: the mass does not depend on the cuts) weighs
``p_i * p_j``. Output per dataset: ``stats.derive`` of ``{"mass": stats.moments of
the pair masses, "pairs": sum of pair weights}``; with widths 0 these are the
moments over pairs of muons that pass hard cuts.
"""

from __future__ import annotations

from collections.abc import Mapping

import awkward as ak
import numpy as np
import vector
from coffea import processor

from analysis import stats
from analysis.soft import soft_cut
from processors import _options

__all__ = ["DEFAULT_THETA", "DEFAULT_WIDTHS", "DimuonProcessor"]

DEFAULT_THETA = {"mu_pt_min": 20.0, "mu_abs_eta_max": 2.4, "mu_iso_max": 0.15}
DEFAULT_WIDTHS = {"mu_pt_min": 1.0, "mu_abs_eta_max": 0.05, "mu_iso_max": 0.02}


def _momenta(muons):
    fields = {k: ak.values_astype(muons[k], np.float64) for k in ("pt", "eta", "phi", "mass")}
    return vector.zip(fields)  # Momentum4D records


class DimuonProcessor(processor.ProcessorABC):
    """``{dataset: stats.Derived}`` of Z-window dimuon mass moments with soft muon cuts.

    ``theta``: cut values (default :data:`DEFAULT_THETA`; missing keys take the
    default); ``widths``: soft-cut widths (default :data:`DEFAULT_WIDTHS`, 0 = hard);
    ``window``: the mass window in GeV; ``order``: 1 for gradients, 2 for Hessians.

    Parameters
    ----------
    theta : Mapping[str, float], PassTheta or None, optional
        Cut values ``mu_pt_min`` (GeV), ``mu_abs_eta_max`` and ``mu_iso_max``; None
        (default) or missing keys take :data:`DEFAULT_THETA`. A
        :class:`~analysis.stats.PassTheta` (reverse mode of
        :func:`~analysis.stats.differentiable`) is kept as it is.
    widths : Mapping[str, float] or None, optional
        Keyword-only. Soft-cut widths by parameter name (default :data:`DEFAULT_WIDTHS`).
    window : tuple of float, optional
        Keyword-only. ``(low, high)`` of the opposite-charge dimuon mass in GeV (default
        ``(60.0, 120.0)``).
    order : int, optional
        Keyword-only. 0 (values), 1 (gradients, default) or 2 (and Hessians).

    Notes
    -----
    :meth:`process` returns ``{dataset: stats.Derived}`` with ``"mass"``, the
    :class:`~analysis.stats.Moments` of the pairs' mass weighted by the product of the
    two muons' pass probabilities, and ``"pairs"``, the sum of those weights (float64),
    derived with respect to ``theta``. A chunk without pairs gives a ``W = 0`` state and
    a zero sum (the merge's neutral element).
    """

    def __init__(
        self,
        theta: Mapping[str, float] | None = None,
        *,
        widths: Mapping[str, float] | None = None,
        window: tuple[float, float] = (60.0, 120.0),
        order: int = 1,
    ) -> None:
        # A stats.PassTheta (reverse mode) travels to stats.derive as it is: it carries
        # what the second pass needs; a plain mapping is completed with the defaults.
        # Unknown names (a typo would keep the default cut), non-finite values and an
        # empty or NaN window (no pair, silently) refused.
        owner = type(self).__name__
        self.theta = (
            theta if isinstance(theta, stats.PassTheta)
            else _options.options(theta, DEFAULT_THETA, "theta", owner=owner)
        )
        self.widths = _options.options(widths, DEFAULT_WIDTHS, "widths", owner=owner, minimum=0.0)
        self.window = _options.window(window, owner=owner)
        self.order = _options.integer(order, "order", owner=owner, allowed=range(3))

    def process(self, events):
        """``{dataset: stats.derive(chunk_function(events), theta, order=order)}``."""
        fn = self.chunk_function(events)
        return {events.metadata["dataset"]: stats.derive(fn, self.theta, order=self.order)}

    def chunk_function(self, events):
        """``fn(theta) -> states`` of one chunk (what ``process`` derives; for tests)."""
        muons = events.Muon
        # Pairs as indices into the flat muon arrays: event start + index within the event.
        local = ak.argcombinations(muons, 2)
        n_pairs = ak.to_numpy(ak.num(local, axis=1))
        first = np.concatenate([[0], np.cumsum(ak.to_numpy(ak.num(muons, axis=1)))])[:-1]
        i1 = np.repeat(first, n_pairs) + ak.to_numpy(ak.flatten(local["0"]))
        i2 = np.repeat(first, n_pairs) + ak.to_numpy(ak.flatten(local["1"]))
        p4 = _momenta(muons)
        mass = ak.to_numpy(ak.flatten((p4[local["0"]] + p4[local["1"]]).mass)).astype(np.float64)
        charge = ak.to_numpy(ak.flatten(muons.charge))
        keep = (charge[i1] != charge[i2]) & (mass > self.window[0]) & (mass < self.window[1])
        # The kept pairs as lists per event (stats.Jagged), each muon's columns read at
        # both ends of the pair: fn is then elementwise Jagged arithmetic that
        # stats.derive compiles once per bucket of chunk sizes.
        event = np.repeat(np.arange(len(n_pairs)), n_pairs)[keep]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(event, minlength=len(n_pairs)))])
        i1, i2 = i1[keep], i2[keep]

        def pairs(values):
            return stats.Jagged(np.asarray(values, dtype=np.float64), offsets)

        columns = {k: ak.to_numpy(ak.flatten(v)) for k, v in
                   (("pt", muons.pt), ("abs_eta", abs(muons.eta)), ("iso", muons.pfRelIso04_all))}
        ends = [{k: pairs(v[i]) for k, v in columns.items()} for i in (i1, i2)]
        pair_mass = pairs(mass[keep])
        widths = dict(self.widths)

        def fn(theta):
            def passes(mu):
                return (
                    soft_cut(mu["pt"], ">", theta["mu_pt_min"], widths["mu_pt_min"])
                    * soft_cut(mu["abs_eta"], "<", theta["mu_abs_eta_max"], widths["mu_abs_eta_max"])
                    * soft_cut(mu["iso"], "<", theta["mu_iso_max"], widths["mu_iso_max"])
                )

            pair_w = passes(ends[0]) * passes(ends[1])
            mass_state = stats.moments(pair_mass, weight=pair_w)
            return {"mass": mass_state, "pairs": mass_state.sumw}

        return fn

    def postprocess(self, accumulator):
        """The merged output, unchanged."""
        return accumulator
