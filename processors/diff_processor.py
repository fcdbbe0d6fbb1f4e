"""The coffea processor: read a chunk's columns, evaluate the kernel, return addable states."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from coffea import processor

from analysis.data.cache import chunk_key, keep_columns, plan_branches
from analysis.data.columns import extract_columns
from analysis.data.faults import guarded, reading, same_file
from analysis.data.overflow import check_overflow
from analysis.pipeline.backend import Backend
from analysis.pipeline.plan import Plan
from analysis.pipeline.replicas import chunk_lanes, chunk_replicas, chunk_totals
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState
from analysis.pipeline.score_entries import score_entries
from analysis.pipeline.split import part_factor

__all__ = [
    "DiffProcessor",
    "empty_histogram",
]

# NanoAODSchema warns on every chunk of these files about branches it rebuilds
# (Photon_mass, Photon_charge) and cross-references absent from slim files.
warnings.filterwarnings("ignore", message="Branch .* already exists", category=RuntimeWarning)
warnings.filterwarnings("ignore", message="Missing cross-reference", category=RuntimeWarning)


class DiffProcessor(processor.ProcessorABC):
    """Per chunk: ``{dataset: DatasetState}`` with states and their parameter derivatives.

    Holds only what the validated config says (plan, parameter values, widths, each
    dataset's weight branch); no globals, no file I/O beyond the chunk coffea hands in.
    ``order`` is 1 for Jacobians, 2 to add Hessians (0: values only). With
    ``histogram=(index, bins, low, high)`` it fills instead a ``hist.Hist`` of
    observable ``index`` per dataset, with the soft selection weights (for plots); with
    ``histograms=((index, bins, low, high, theta, widths), ...)`` several at once, each
    at its own parameter values and widths, in one pass: ``{dataset: {i: hist.Hist}}``
    (an ``index`` that is a string names a learned score instead: its value per object
    or event, :func:`analysis.pipeline.score_entries.score_entries`). With ``grid=True``, ``theta`` is a
    ``(G, n_params)`` array and the states of all G points are computed (no derivatives).
    With ``keep_columns=True`` the chunk's columns are returned too, in a
    :class:`analysis.data.cache.ColumnBatch` under :data:`analysis.data.cache.COLUMNS_KEY`, for
    the driver's column cache (or, in the driver's own process, put straight into the
    cache ``cache_token`` names; in a dask worker with ``worker_budget`` set, kept by
    the worker: see :func:`analysis.data.cache.keep_columns`); :meth:`evaluate` is what a
    cached chunk goes through. With ``unit_weights=True`` every event weighs 1 (the
    columns' weights are ignored, cached or not): at width 0 the selected sum of
    weights is then the number of events passing the hard cuts.

    Parameters
    ----------
    plan : analysis.pipeline.plan.Plan
        The validated analysis plan (objects, cuts, observables, parameters).
    theta : numpy.ndarray
        The parameter values, float64 ``(n_params,)`` (``(G, n_params)`` with ``grid``).
    widths : numpy.ndarray
        The soft-cut widths, float64, aligned with ``theta`` (0: hard cut).
    weight_branches : dict of str to str or None
        Each dataset's event-weight branch (None: unit weights).
    order : int, optional
        Keyword-only. 0 (values), 1 (Jacobians, default) or 2 (and Hessians).
    histogram : tuple or None, optional
        Keyword-only. ``(index, bins, low, high)``: fill one ``hist.Hist`` per dataset
        instead of states (default None).
    histograms : tuple or None, optional
        Keyword-only. ``((index, bins, low, high, theta, widths), ...)``: several
        histograms in one pass (default None).
    grid : bool, optional
        Keyword-only. ``theta`` is a grid of G points; states without derivatives
        (default False).
    keep_columns : bool, optional
        Keyword-only. Return the chunk's columns for the column cache too (default False).
    unit_weights : bool, optional
        Keyword-only. Every event weighs 1 (default False).
    payloads : dict or None, optional
        Keyword-only. Reverse mode's second pass: ``{dataset: payload}``
        (:mod:`analysis.pipeline.backends.jax.reverse`); each chunk then returns its pullback
        (default None).
    yield_gradients : bool or dict, optional
        Keyword-only. Return the values with the yields' gradients
        (:func:`analysis.pipeline.backends.numba.fastreverse.chunk_yield_gradients`); a dict
        ``{dataset: (yield, sumw2)}`` names the rows to compute (default False).
    backend : analysis.pipeline.backend.Backend or None, optional
        Keyword-only. Which kernels compute the chunk and on which device (default:
        numba where it serves the plan, JAX on the CPU for the rest).
    part : tuple of (str, float) or None, optional
        Keyword-only. The validation split's part and fraction this pass weighs
        (:func:`analysis.pipeline.split.part_factor`; default None: every event).
    replicas : tuple or None, optional
        Keyword-only. A bootstrap pass: ``("sums", K, None)`` for each dataset's
        :class:`analysis.pipeline.replicas.ReplicaSums`, ``("totals", K, fraction)``
        for its :class:`~analysis.pipeline.replicas.ReplicaTotals`, ``("lanes", K,
        fraction, parts, totals)`` for its :class:`~analysis.pipeline.replicas.ReplicaLanes`
        at every row of ``theta`` (``(P, n_params)``; :func:`~analysis.pipeline.replicas.chunk_lanes`)
        (default None).

    Notes
    -----
    :meth:`process` returns ``{dataset: DatasetState}`` (float64 states, with their
    Jacobian and Hessian up to ``order``), or the histograms, grid states or pullbacks
    named above; coffea adds the chunks' outputs with ``processor.accumulate``. A chunk
    of zero events gives empty states (zero sums), the merge's neutral element.
    """

    def __init__(
        self,
        plan: Plan,
        theta: np.ndarray,
        widths: np.ndarray,
        weight_branches: dict[str, str | None],
        *,
        order: int = 1,
        histogram: tuple[int, int, float, float] | None = None,
        histograms: tuple | None = None,
        grid: bool = False,
        keep_columns: bool = False,
        unit_weights: bool = False,
        payloads: dict | None = None,
        yield_gradients: bool | dict = False,
        backend: Backend | None = None,
        part: tuple[str, float] | None = None,
        replicas: tuple[str, int, float | None] | None = None,
    ) -> None:
        self.plan = plan
        self.theta = np.asarray(theta, dtype=np.float64)
        self.widths = np.asarray(widths, dtype=np.float64)
        self.weight_branches = dict(weight_branches)
        self.order = order
        self.histogram = histogram
        self.histograms = histograms
        self.grid = grid
        self.keep_columns = keep_columns
        self.unit_weights = unit_weights
        #: reverse mode's second pass: {dataset: payload} (analysis.pipeline.backends.jax.reverse)
        self.payloads = payloads
        #: values with the yields' gradients (analysis.pipeline.backends.numba.fastreverse.chunk_yield_gradients);
        #: a dict: {dataset: (yield, sumw2)} the rows to compute (default both)
        self.yield_gradients = yield_gradients
        self.backend = Backend() if backend is None else backend
        #: the validation split: ``(part, fraction)``, the events this pass weighs
        #: (:func:`analysis.pipeline.split.part_factor`); ``None``: all
        self.part = part
        #: a bootstrap pass: ``("sums", K, None)``: each dataset's
        #: :class:`analysis.pipeline.replicas.ReplicaSums` (values only);
        #: ``("totals", K, fraction)``: its :class:`~analysis.pipeline.replicas.ReplicaTotals`
        #: ``("lanes", K, fraction, parts, totals)``: its
        #: :class:`~analysis.pipeline.replicas.ReplicaLanes` (every row of ``theta``)
        self.replicas = replicas
        self.cache_token: str | None = None
        #: set by the driver on dask: keep the columns in the worker, within this budget
        self.worker_budget: int | None = None
        #: threads of the numba kernel per chunk (None: the cores); the driver sets 1 for
        #: passes on futures/dask workers, which already share the cores
        self.kernel_threads: int | None = None
        #: this pass prepared by the backend's chooser, once (:meth:`_prepare`)
        self.prepared = self._prepare()

    @guarded  # a failing chunk comes back as a record, not an exception
    def process(self, events):
        """``{dataset: output}`` of one chunk of NanoEvents (see the class docstring)."""
        dataset = events.metadata["dataset"]
        source = f"{events.metadata.get('filename', dataset)}"
        weight_branch = self.weight_branches.get(dataset)
        same_file(events)  # replaced since the driver opened it: named as such
        with reading():  # what fails in here is a bad file (skip_bad_files may skip it)
            cols = extract_columns(events, self.plan, weight_branch=weight_branch, source=source)
        out = self.evaluate(dataset, cols)
        if self.keep_columns:
            meta = events.metadata
            key = chunk_key(
                meta.get("fileuuid", ""),
                meta.get("treename", ""),
                meta["entrystart"],
                meta["entrystop"],
                branches=plan_branches(self.plan),
                weight_branch=weight_branch,
                nonfinite=meta.get("nonfinite") or "error",
            )
            extra = keep_columns(
                key, cols, token=self.cache_token, worker_budget=self.worker_budget
            )
            out.update(extra)
        return out

    def _prepare(self) -> dict:
        """This pass prepared by the backend's chooser, once, here (support is decided
        here, not per chunk): per dataset where the request is (a payload, yield rows),
        else under None; per histogram of ``histograms`` under its index."""
        chooser = self.backend.chooser
        out: dict = {}
        if self.histogram is not None or self.histograms is not None:
            specs = (self.histograms if self.histograms is not None
                     else ((*self.histogram, self.theta, self.widths),))
            for i, (index, _, _, _, theta, widths) in enumerate(specs):
                if not isinstance(index, str):  # a learned score's values: no pass
                    out["hist", i] = chooser.prepare(self.plan, Request(
                        theta, widths, order=0, entries=index))
            return out
        if self.replicas is not None:
            return out  # the replicas prepare their own passes (analysis.pipeline.replicas)
        if self.grid:
            out[None] = chooser.prepare(self.plan, Request(self.theta, self.widths, order=0,
                                                           grid=True))
        elif self.payloads is not None:
            for name, payload in self.payloads.items():
                out[name] = chooser.prepare(self.plan, Request(
                    self.theta, self.widths, order=0, pullback=payload))
        elif self.yield_gradients:
            rows = self.yield_gradients if isinstance(self.yield_gradients, dict) else {}
            for name, r in rows.items():
                out[name] = chooser.prepare(self.plan, Request(
                    self.theta, self.widths, order=0, yield_rows=tuple(r)))
            out[None] = chooser.prepare(self.plan, Request(
                self.theta, self.widths, order=0, yield_rows=(True, True)))
        else:
            out[None] = chooser.prepare(self.plan, Request(self.theta, self.widths,
                                                           order=self.order))
        return out

    def _prepared(self, dataset: str):
        """The prepared pass of ``dataset`` (:meth:`_prepare`)."""
        return self.prepared.get(dataset) or self.prepared[None]

    def evaluate(self, dataset: str, cols) -> dict:
        """``{dataset: output}`` of one chunk's columns (no file access), computed by
        ``self.backend``'s chooser (each backend on its device)."""
        if getattr(self, "unit_weights", False):  # a copy: the cache keeps the real weights
            cols = dataclasses.replace(cols, weight=np.ones_like(cols.weight))
        replicas = getattr(self, "replicas", None)
        if replicas is not None and replicas[0] == "totals":  # every part at once
            return {dataset: chunk_totals(cols, replicas[2], replicas[1])}
        if replicas is not None and replicas[0] == "lanes":  # every part and point at once
            _, k, fraction, parts, totals = replicas
            with np.errstate(all="ignore"):
                lanes = chunk_lanes(cols, self.plan, self.theta, self.widths, k, parts=parts,
                                    fraction=fraction, totals=totals,
                                    threads=self.kernel_threads, backend=self.backend)
            for sums in lanes.lanes.values():
                check_overflow(sums.state, cols, self.plan, dataset=dataset)
            return {dataset: lanes}
        part = getattr(self, "part", None)
        if part is not None and part[0] != "all" and cols.n_events:
            if cols.uid is None:
                raise ValueError("a validation split needs the events' uid (columns from a file)")
            cols = dataclasses.replace(cols, weight=cols.weight * part_factor(cols.uid, *part))
        if replicas is not None:
            with np.errstate(all="ignore"):
                out = chunk_replicas(cols, self.plan, self.theta, self.widths, replicas[1],
                                     threads=self.kernel_threads, backend=self.backend)
            check_overflow(out.state, cols, self.plan, dataset=dataset)
            return {dataset: out}
        if self.histograms is not None:
            return {dataset: {i: self._fill(i, cols, *spec)
                              for i, spec in enumerate(self.histograms)}}
        if self.histogram is not None:
            return {dataset: self._fill(0, cols, *self.histogram, self.theta, self.widths)}
        prepared = self._prepared(dataset)
        if self.grid or self.payloads is not None:
            return {dataset: prepared.run(cols, threads=self.kernel_threads)}
        with np.errstate(all="ignore"):  # an overflow is one line, from check_overflow
            state = prepared.run(cols, threads=self.kernel_threads)
        if self.yield_gradients:
            values = DatasetState.from_chunk(state.derived.value, None, None, events=state.events,
                                             sumw=state.sumw, names=self.plan.trainable_names)
            check_overflow(values, cols, self.plan, dataset=dataset)
        else:
            check_overflow(state, cols, self.plan, dataset=dataset)
        return {dataset: state}

    def _fill(self, which: int, cols, index, bins, low, high, theta, widths):
        if isinstance(index, str):  # a learned score's values (no cut applied)
            h = empty_histogram(f"score.{index}", bins, low, high)
            x, w = score_entries(cols, self.plan, theta, index)
            h.fill(x, weight=w)
            return h
        h = empty_histogram(self.plan.observables[index].name, bins, low, high)
        x, w = self.prepared["hist", which].run(cols)
        h.fill(x, weight=w)
        return h

    def postprocess(self, accumulator):
        """The merged output, unchanged."""
        return accumulator


def empty_histogram(name: str, bins: int, low: float, high: float):
    """A weighted ``hist.Hist`` with one regular axis (what a histogram pass fills and adds)."""
    import hist

    return hist.Hist(hist.axis.Regular(bins, low, high, name=name), storage=hist.storage.Weight())
