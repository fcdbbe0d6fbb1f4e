"""The coffea processor: read a chunk's columns, run the prepared pass, return addable states."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
from coffea import processor

from analysis.data.cache import chunk_key, plan_branches
from analysis.data.columns import extract_columns
from analysis.data.faults import guarded, reading, same_file
from analysis.data.overflow import check_overflow
from analysis.data.overlap import defer
from analysis.data.placement import keep_columns
from analysis.pipeline.job import READING, Job
from analysis.pipeline.replicas import states as replica_states
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState
from analysis.pipeline.score_entries import score_entries
from analysis.pipeline.split import part_factor
from analysis.runtime import forkguard
from analysis.stats.derive import Derived

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

    One constructor argument, the pass's :class:`~analysis.pipeline.job.Job`: the plan,
    the :class:`~analysis.pipeline.request.Request` of what the chunks compute (values,
    Jacobians, Hessians, a pullback, yield gradients, a grid; per dataset where it
    differs), each dataset's weight branch, the backend choice and how the chunks are
    read. The pass is prepared here, once (the backend's chooser decides which backend
    serves it); a chunk is then: read its columns, run the prepared pass on them
    (:meth:`evaluate`), return its state. Nothing is set on the processor afterwards:
    :meth:`reading` returns a new one with other reading options.

    Parameters
    ----------
    job : analysis.pipeline.job.Job
        The pass (see there for every field: histograms for plots, bootstrap replicas,
        the validation split's part, unit weights, the column cache's options, the
        kernel threads).

    Notes
    -----
    :meth:`process` returns ``{dataset: DatasetState}`` (float64 states, with their
    Jacobian and Hessian up to ``order``), or the histograms, grid states, pullbacks or
    replica sums the job asks for; coffea adds the chunks' outputs with
    ``processor.accumulate``. A chunk of zero events gives empty states (zero sums),
    the merge's neutral element.
    """

    def __init__(self, job: Job) -> None:
        self.job = job
        #: the pass prepared by the backend's chooser, once (:meth:`_prepare`)
        self.prepared = self._prepare()

    @property
    def plan(self):
        """The job's plan."""
        return self.job.plan

    def reading(self, **options) -> DiffProcessor:
        """A processor of the same prepared pass with other reading options
        (:data:`analysis.pipeline.job.READING`: ``keep_columns``, ``cache_token``,
        ``worker_budget``, ``kernel_threads``); this one is unchanged."""
        unknown = set(options) - set(READING)
        if unknown:
            raise TypeError(f"not reading options: {', '.join(sorted(unknown))}")
        new = type(self).__new__(type(self))
        new.job = dataclasses.replace(self.job, **options)
        new.prepared = self.prepared
        return new

    @guarded  # a failing chunk comes back as a record, not an exception
    def process(self, events):
        """``{dataset: output}`` of one chunk of NanoEvents (see the class docstring)."""
        forkguard.check()  # a kept pool forked after JAX started: one line, not a hang
        job = self.job
        dataset = events.metadata["dataset"]
        source = f"{events.metadata.get('filename', dataset)}"
        weight_branch = job.weight_branches.get(dataset)
        same_file(events)  # replaced since the driver opened it: named as such
        # the events' uid (three more branches) only where a split, the replicas or the
        # column cache (a later pass may split) can use it
        replicas = job.datasets.get(dataset, job.request).replicas is not None
        uid = job.keep_columns or replicas or (job.part is not None and job.part[0] != "all")
        with reading():  # what fails in here is a bad file (skip_bad_files may skip it)
            cols = extract_columns(events, job.plan, weight_branch=weight_branch, source=source,
                                   uid=uid)
        if job.overlap:  # computed while the executor reads the next chunk
            out = {dataset: defer(lambda: self._kernels(dataset, cols)[dataset], events)}
        else:
            out = self._kernels(dataset, cols)
        if job.keep_columns:
            meta = events.metadata
            key = chunk_key(
                meta.get("fileuuid", ""),
                meta.get("treename", ""),
                meta["entrystart"],
                meta["entrystop"],
                branches=plan_branches(job.plan),
                weight_branch=weight_branch,
                nonfinite=meta.get("nonfinite") or "error",
            )
            extra = keep_columns(
                key, cols, token=job.cache_token, worker_budget=job.worker_budget
            )
            out.update(extra)
        return out

    def _kernels(self, dataset: str, cols) -> dict:
        """:meth:`evaluate`, after the job's ``before_kernels``."""
        if self.job.before_kernels is not None:
            self.job.before_kernels()
        return self.evaluate(dataset, cols)

    def _prepare(self) -> dict:
        """The pass prepared by the backend's chooser (support is decided here, not per
        chunk): under None the job's request, under a dataset's name its own, under
        ``("hist", i)`` the entries of histogram ``i``."""
        job = self.job
        chooser = job.backend.chooser
        if job.histograms:
            return {("hist", i): chooser.prepare(job.plan, Request(
                theta, widths, order=0, entries=index))
                for i, (index, _, _, _, theta, widths) in enumerate(job.histograms)
                if not isinstance(index, str)}  # a learned score's values: no pass
        out = {name: chooser.prepare(job.plan, req) for name, req in job.datasets.items()}
        out[None] = chooser.prepare(job.plan, job.request)
        return out

    def evaluate(self, dataset: str, cols) -> dict:
        """``{dataset: output}`` of one chunk's columns (no file access), computed by the
        prepared pass (each backend on its device)."""
        job = self.job
        # derived columns (cols.replace): the cache keeps the real weights, and the
        # chunk's object offsets and derived weights, made once, serve every step
        if job.unit_weights:
            cols = cols.replace(weight=cols.derived_weight(
                "unit", lambda: np.ones_like(cols.weight)))
        part = job.part
        prepared = None if job.histograms else self.prepared.get(dataset) or self.prepared[None]
        kind = None if prepared is None else prepared.request.kind
        walked = cols  # the events the kernels walk (a part's alone, below)
        if part is not None and part[0] != "all" and cols.n_events:
            if cols.uid is None:
                raise ValueError("a validation split needs the events' uid (columns from a file)")
            base = cols
            cols = walked = cols.replace(weight=cols.derived_weight(
                ("part", *part), lambda: base.weight * part_factor(base.uid, *part)))
            # the kernels walk the part's events only: the others weigh exactly 0, so every
            # weighted sum is the same but for its order (~30 % of a training step's work
            # at fraction 0.3). Not where the output is indexed by event ("selected") or
            # the pass weighs every part itself (replicas: each event's Poisson draws)
            if kind not in ("selected", "replicas"):
                weighted = cols
                walked = cols.subset(lambda: weighted.weight != 0, key=("part", *part))
        if job.histograms:
            filled = {i: self._fill(i, walked, *spec) for i, spec in enumerate(job.histograms)}
            return {dataset: filled[0] if job.one_histogram else filled}
        if kind in ("grid", "pullback"):
            return {dataset: _read(prepared.run(walked, threads=job.kernel_threads), cols)}
        with np.errstate(all="ignore"):  # an overflow is one line, from check_overflow
            state = _read(prepared.run(walked, threads=job.kernel_threads), cols)
        # check_overflow is given the whole chunk: it names an event by its index there
        if kind == "yield_gradients":
            values = DatasetState(events=state.events, sumw=state.sumw, derived=Derived(
                job.plan.trainable_names, state.derived.value))
            check_overflow(values, cols, job.plan, dataset=dataset)
        elif kind == "replicas":  # the states of every point and part (none for totals)
            for values in replica_states(state):
                check_overflow(values, cols, job.plan, dataset=dataset)
        else:
            check_overflow(state, cols, job.plan, dataset=dataset)
        return {dataset: state}

    def _fill(self, which: int, cols, index, bins, low, high, theta, widths):
        if isinstance(index, str):  # a learned score's values (no cut applied)
            h = empty_histogram(f"score.{index}", bins, low, high)
            x, w = score_entries(cols, self.job.plan, theta, index)
            h.fill(x, weight=w)
            return h
        h = empty_histogram(self.job.plan.observables[index].name, bins, low, high)
        x, w = self.prepared["hist", which].run(cols)
        h.fill(x, weight=w)
        return h

    def postprocess(self, accumulator):
        """The merged output, unchanged."""
        return accumulator


def _read(state: Any, cols: Any) -> Any:
    """``state`` of the events of ``cols`` (those read), whichever of them the kernels walked
    (a part's alone: its ``events`` were those walked; its ``enumeration``, the --debug
    line's counts of the event-sum histograms' work, stays that of the walked ones);
    other outputs as they are."""
    if not isinstance(state, DatasetState) or state.events == cols.n_events:
        return state
    return DatasetState(events=cols.n_events, sumw=state.sumw, derived=state.derived,
                        chunks=state.chunks, enumeration=state.enumeration)


def empty_histogram(name: str, bins: int, low: float, high: float):
    """A weighted ``hist.Hist`` with one regular axis (what a histogram pass fills and adds)."""
    import hist

    return hist.Hist(hist.axis.Regular(bins, low, high, name=name), storage=hist.storage.Weight())
