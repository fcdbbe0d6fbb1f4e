"""Moments of jet pT and HT with soft jet cuts: a hand-written coffea processor.

Uses only the public API (:mod:`analysis.stats`, :mod:`analysis.soft`)::

    from coffea import processor
    from coffea.nanoevents import NanoAODSchema
    from analysis import stats
    from processors.jet_moments import JetMomentsProcessor

    fileset = {"ttbar": ["../shared/data/nanoAOD_2015_CMS_Open_Data_ttbar.root"]}
    runner = processor.Runner(executor=processor.IterativeExecutor(), schema=NanoAODSchema)
    out = runner(fileset, JetMomentsProcessor(), treename="Events")
    d = out["ttbar"]                      # a stats.Derived, merged over all chunks
    d.value_and_grad(lambda s: stats.mean(s["jet_pt"]))   # (value, {name: gradient})

Per event, jet ``i`` passes with probability
``p_i = soft_cut(pt_i, ">", jet_pt_min, w_pt) * soft_cut(|eta_i|, "<", jet_abs_eta_max, w_eta)``
and the event with probability ``P_ev = P(at least min_jets jets pass)``. The output
per dataset is ``stats.derive`` of

* ``"jet_pt"``: ``stats.moments`` of jet pT, each jet weighted by ``P(jet i passes and
  at least min_jets jets pass)`` (:func:`analysis.soft.pass_weights`: the YAML
  engine's meaning, the exact expectation of the hard-cut moments);
* ``"ht"``: ``stats.moments`` of ``HT = sum_i p_i pt_i`` per event, weighted ``P_ev``;
* ``"selected"``: ``sum P_ev`` (soft number of selected events); ``"events"``: events read.

With all widths 0 these are the hard-cut results (jets with pT > cut and |eta| <
cut, in events with at least ``min_jets`` of them); events carry unit weight.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from coffea import processor

from analysis import stats
from analysis.data.owncache import CachedColumns
from analysis.soft import pass_weights, soft_cut
from processors import _options

__all__ = ["DEFAULT_THETA", "DEFAULT_WIDTHS", "JetMomentsProcessor"]

DEFAULT_THETA = {"jet_pt_min": 30.0, "jet_abs_eta_max": 2.4}
DEFAULT_WIDTHS = {"jet_pt_min": 3.0, "jet_abs_eta_max": 0.1}


class JetMomentsProcessor(CachedColumns, processor.ProcessorABC):
    """``{dataset: stats.Derived}`` of jet-pT and HT moments with soft jet cuts.

    ``theta``: cut values (default :data:`DEFAULT_THETA`; missing keys take the
    default); ``widths``: soft-cut widths in the same units (default
    :data:`DEFAULT_WIDTHS`, 0 = hard cut); ``min_jets``: jets required per event;
    ``order``: 1 for gradients, 2 to add Hessians. The chunk's jet columns are read
    once per chunk and process across passes (:class:`~analysis.data.owncache.CachedColumns`).

    Parameters
    ----------
    theta : Mapping[str, float], PassTheta or None, optional
        Cut values ``jet_pt_min`` (GeV) and ``jet_abs_eta_max``; None (default) or missing
        keys take :data:`DEFAULT_THETA`. A :class:`~analysis.stats.PassTheta` (reverse
        mode of :func:`~analysis.stats.differentiable`) is kept as it is.
    widths : Mapping[str, float] or None, optional
        Keyword-only. Soft-cut widths by parameter name (default :data:`DEFAULT_WIDTHS`).
    min_jets : int, optional
        Keyword-only. Jets required per event (default 2).
    order : int, optional
        Keyword-only. 0 (values), 1 (gradients, default) or 2 (and Hessians).

    Notes
    -----
    :meth:`process` returns ``{dataset: stats.Derived}`` with the states ``"jet_pt"``,
    ``"ht"`` (:class:`~analysis.stats.Moments`), ``"selected"`` and ``"events"`` (float64
    sums) of the module docstring, derived with respect to ``theta``. A chunk of zero
    events gives ``W = 0`` states and zero sums (the merge's neutral element).
    """

    def __init__(
        self,
        theta: Mapping[str, float] | None = None,
        *,
        widths: Mapping[str, float] | None = None,
        min_jets: int = 2,
        order: int = 1,
    ) -> None:
        # A stats.PassTheta (reverse mode) travels to stats.derive as it is: it carries
        # what the second pass needs; a plain mapping is completed with the defaults.
        # Unknown names (a typo would keep the default cut) and non-finite values refused.
        owner = type(self).__name__
        self.theta = (
            theta if isinstance(theta, stats.PassTheta)
            else _options.options(theta, DEFAULT_THETA, "theta", owner=owner)
        )
        self.widths = _options.options(widths, DEFAULT_WIDTHS, "widths", owner=owner, minimum=0.0)
        self.min_jets = _options.integer(min_jets, "min_jets", owner=owner, allowed=range(0, 1 << 16))
        self.order = _options.integer(order, "order", owner=owner, allowed=range(3))

    def columns(self, events):
        """The chunk's jet columns (read once per chunk and process: :class:`CachedColumns`)."""
        return {
            "pt": stats.from_awkward(events.Jet.pt),
            "abs_eta": stats.from_awkward(abs(events.Jet.eta)),
        }

    def process_columns(self, columns, metadata):
        fn = _chunk_function(columns, self.widths, self.min_jets)
        return {metadata["dataset"]: stats.derive(fn, self.theta, order=self.order)}

    def chunk_function(self, events):
        """``fn(theta) -> states`` of one chunk (what ``process`` derives; for tests)."""
        return _chunk_function(self.columns(events), self.widths, self.min_jets)

    def postprocess(self, accumulator):
        """The merged output, unchanged."""
        return accumulator


def _chunk_function(columns, widths, min_jets):
    """``fn(theta)`` of one chunk. It closes over the chunk's arrays (two Jagged), the
    widths (a dict of floats) and ``min_jets`` only, not over the processor, and reads
    no ``.values``: stats.derive compiles it once per bucket of chunk shapes, the
    arrays as arguments (:mod:`analysis.stats._closure`), instead of tracing it on
    every chunk."""
    pt, abs_eta = columns["pt"], columns["abs_eta"]
    widths = {k: float(v) for k, v in widths.items()}
    min_jets = int(min_jets)

    def fn(theta):
        p = soft_cut(pt, ">", theta["jet_pt_min"], widths["jet_pt_min"]) * soft_cut(
            abs_eta, "<", theta["jet_abs_eta_max"], widths["jet_abs_eta_max"]
        )
        # P(jet passes and the event has >= min_jets passing jets), P(event passes)
        jet_weight, p_event = pass_weights(p, min_jets)
        ht = stats.sum(pt, weight=p, axis=1)  # sum_i p_i pt_i per event
        return {
            "jet_pt": stats.moments(pt, weight=jet_weight),
            "ht": stats.moments(ht, weight=p_event),
            "selected": jnp.sum(p_event),
            "events": np.float64(len(pt)),  # the number of lists: static in the program
        }

    return fn
