"""One pass of the processor: a :class:`Job` (the plan, the request, how chunks are read).

The driver builds a job per pass and hands it to :class:`processors.DiffProcessor` as
its one constructor argument; the processor prepares the job's
:class:`~analysis.pipeline.request.Request` once (the backend's chooser) and runs it on
every chunk. A job is frozen: other reading options are another job
(:func:`dataclasses.replace`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from analysis.pipeline.backend import Backend
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request

__all__ = ["READING", "Job"]

#: the fields of a :class:`Job` that say how chunks are read, not what they compute
READING = ("keep_columns", "cache_token", "worker_budget", "kernel_threads", "before_kernels",
           "overlap")


@dataclass(frozen=True, eq=False)
class Job:
    """One pass (module docstring).

    Parameters
    ----------
    plan
        The validated analysis plan.
    request
        What every dataset's chunks compute (:class:`~analysis.pipeline.request.Request`:
        values, derivatives, a pullback, yield gradients, a grid), at its parameters.
    weight_branches
        Each dataset's event-weight branch (None: unit weights).
    datasets
        Keyword-only. A dataset's own request where it differs (its pullback payload,
        its yield rows); default: ``request`` for every dataset.
    histograms
        Keyword-only. ``((index, bins, low, high, theta, widths), ...)``: instead of
        states, one ``hist.Hist`` per entry (an observable's entries at that
        selection, or a learned score's values: ``index`` its name), in one pass.
    one_histogram
        Keyword-only. The one histogram itself per dataset, not ``{0: hist}``.
    part
        Keyword-only. The validation split's ``(part, fraction)`` this pass weighs.
    unit_weights
        Keyword-only. Every event weighs 1.
    backend
        Keyword-only. Which backends compute the pass and on which device.
    keep_columns, cache_token, worker_budget
        Keyword-only. Return the chunk's columns for the column cache
        (:func:`analysis.data.placement.keep_columns`).
    kernel_threads
        Keyword-only. The CPU threads a chunk's backend may use (None: the cores).
    before_kernels
        Keyword-only. Called before a chunk's kernels run, after its columns are read
        (with the command line's numba warm-up, iterative executor:
        :func:`analysis.driver.warmup.numba_ready`, so the chunks' reading overlaps
        numba's start). A module-level function: the processor is pickled.
    overlap
        Keyword-only. A chunk's computation runs on a thread of its own while the
        executor reads the next chunk (:mod:`analysis.data.overlap`: the same merged
        states; the driver resolves the pass's output). In-process executors only.

    Returns
    -------
    Job
        Frozen; :func:`dataclasses.replace` makes another.
    """

    plan: Plan
    request: Request
    weight_branches: Mapping[str, str | None]
    datasets: Mapping[str, Request] = field(default_factory=dict, kw_only=True)
    histograms: tuple = field(default=(), kw_only=True)
    one_histogram: bool = field(default=False, kw_only=True)
    part: tuple[str, float] | None = field(default=None, kw_only=True)
    unit_weights: bool = field(default=False, kw_only=True)
    backend: Backend = field(default_factory=Backend, kw_only=True)
    keep_columns: bool = field(default=False, kw_only=True)
    cache_token: str | None = field(default=None, kw_only=True)
    worker_budget: int | None = field(default=None, kw_only=True)
    kernel_threads: int | None = field(default=None, kw_only=True)
    before_kernels: Callable[[], None] | None = field(default=None, kw_only=True)
    overlap: bool = field(default=False, kw_only=True)

    @property
    def theta(self) -> Any:
        """The request's parameter values."""
        return self.request.theta

    @property
    def widths(self) -> Any:
        """The request's cut widths."""
        return self.request.widths
