"""The driver: datasets to files, coffea executors, one pass over all chunks.

:class:`Evaluator` resolves files, builds the executor (one dask ``Client`` reused
for every pass), makes the chunks once (see below) and runs
:class:`processors.DiffProcessor` for any parameter values. Datasets whose files hold no events still get a (zero) state, so
every dataset is reported with the number of events seen.

Layers: the driver sits above :mod:`processors` and is the only ``analysis`` module
that imports it, inside the pass methods (:meth:`Evaluator.run`,
:meth:`Evaluator.run_grid`, :meth:`Evaluator.run_histograms`), never at import time,
so ``processors`` can import ``analysis`` (checked by ``tests/test_layers.py``).

Faults (see :mod:`analysis.data.faults`): every file is opened here first, so an
unreadable file, a directory or a missing tree is one line before any chunk is
dispatched; a chunk that fails in a worker comes back as a record, which becomes one
:class:`InputError` naming file, entries and cause, or (``skip_bad_files``) a skip
listed in results.json.

The chunks are made here, with coffea's own ``FileMeta.chunks``, from the entry
counts read by that check, instead of by coffea's preprocessing, which would open
every file again and hashes dataset names and file paths with
``coffea.util._hash`` (``bytes(..., "ascii")``: a ``UnicodeEncodeError`` for any
non-ASCII name or path). So any UTF-8 dataset name and path works.

Column cache (:mod:`analysis.data.cache`, on unless ``cache: false`` or ``--no-cache``): a
pass of :class:`processors.DiffProcessor` runs coffea only on the chunks not yet
cached. Where a chunk's columns are kept after it was read depends on the executor:
iterative, in the driver's cache (put there by the processor itself); futures, in the
driver's cache too (they come back with the chunk's states, so the first pass ships
every chunk's columns to the driver once); dask, in a cache of the worker process
that read it (same budget, per worker), and only the worker's address comes back.
Later passes evaluate the driver's chunks here, one after the other, and send each
worker's chunks to that worker as tasks pinned there (no column goes through the
scheduler); a chunk whose worker died is read again. No file is opened for a cached
chunk. Chunks stay in memory up to ``cache_memory_mb``, then spill to disk. A failed
chunk is never cached (it is read again on the next pass).

Where the parts live (every name is re-exported here): :mod:`analysis.driver.files`
(datasets to files, :func:`resolve_fileset`, :func:`open_file`, :class:`BadFile`,
:class:`BranchError`, :class:`EventSchema`), :mod:`analysis.driver.executors` (coffea's
executors, the dask ``Client``), :mod:`analysis.driver.workers` (tasks pinned to the
dask workers that keep a chunk's columns), :mod:`analysis.driver.failures` (a pass's
faults as one line), :mod:`analysis.driver.chunks` (the chunks, made once, and the
first-event check), :mod:`analysis.driver.passkinds` (the passes beyond :meth:`Evaluator.run`:
pullback, yield gradients, replicas, the hard-cut grid). :class:`Evaluator` inherits the
last five as mixins.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection
from typing import Any

import numpy as np

from analysis.config.loader import Config
from analysis.config.values import value_problem
from analysis.data import placement
from analysis.data.branches import required_branches
from analysis.data.cache import COLUMNS_KEY, PLACES_KEY, ColumnCache, chunk_key, plan_branches
from analysis.data.faults import FAULTS_KEY, Fault, Faults
from analysis.data.overlap import kernel_threads, on_chunk_thread, settle
from analysis.driver.chunks import ChunkSource
from analysis.driver.executors import (  # noqa: F401  (re-exported)
    DASK_CONNECT_TIMEOUT,
    WORKER_THREADS_ENV,
    Executors,
    worker_threads_env,
)
from analysis.driver.failures import (  # noqa: F401  (re-exported)
    _THE_ERROR_WAS,
    _WORK_ITEM,
    FaultReports,
    _WorkerTraceback,
)
from analysis.driver.files import (  # noqa: F401  (re-exported)
    SKHEP_CACHE,
    BadFile,
    BranchError,
    EventSchema,
    _same_file,
    as_written,
    open_file,
    resolve_fileset,
    resolve_skhep,
)
from analysis.driver.passkinds import PassKinds, empty_columns, empty_state  # noqa: F401
from analysis.driver.warmup import NumbaWarmUp, numba_ready
from analysis.driver.workers import WORKER_POLL, WorkerTasks, evaluate_kept  # noqa: F401
from analysis.errors import InputError
from analysis.pipeline.backend import Backend
from analysis.pipeline.bounds import check_sizes
from analysis.pipeline.job import Job
from analysis.pipeline.plan import Plan, build_plan, initial_widths, only_observables
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState, log_enumeration
from analysis.spec.edges import check_edges

__all__ = [
    "SKHEP_CACHE",
    "WORKER_THREADS_ENV",
    "Evaluator",
    "empty_columns",
    "empty_state",
    "as_written",
    "resolve_fileset",
    "resolve_skhep",
    "worker_threads_env",
]


_log = logging.getLogger("analysis.driver.runner")


class Evaluator(ChunkSource, Executors, WorkerTasks, FaultReports, PassKinds):
    """Runs passes over all chunks of all datasets for given parameter values."""

    def __init__(
        self,
        config: Config,
        *,
        executor: str | None = None,
        workers: int | None = None,
        chunksize: int | None = None,
        status: bool = False,
        skip_bad_files: bool | None = None,
        cache: bool | ColumnCache | None = None,
        backend: str | Backend | None = None,
        device: str | None = None,
        warm_up: bool = False,
        skip_numba_extensions: Collection[str] = (),
    ) -> None:
        """``cache``: ``None`` follows the config's ``cache``; ``False`` reads the files on
        every pass; a :class:`~analysis.data.cache.ColumnCache` is used (and not closed) as
        it is, e.g. shared by several evaluators of the same files. ``backend`` and
        ``device`` override the config's ``engine`` (:class:`analysis.pipeline.backend.Backend`;
        a ``Backend`` object, with its options, is used as it is and ``device`` ignored);
        a device JAX does not see is one line (:class:`InputError`) here, before any pass.
        ``warm_up``: with the iterative executor and a backend that may run numba, start
        numba's once-per-process initialisation on a thread now, while the files are
        opened and checked (:class:`analysis.driver.warmup.NumbaWarmUp`; the first pass
        waits for it); the command line's evaluators do. ``skip_numba_extensions``: with
        ``warm_up``, the numba extensions (by top-level package) it leaves out of this
        process (the command line: vector's, see :mod:`analysis.driver.warmup`)."""
        self.config = config
        try:
            self.backend = (backend if isinstance(backend, Backend) else Backend(
                backend or config.engine.backend, device or config.engine.device,
                tangent_block=config.engine.tangent_block))
            self.backend.check_device()
        except ValueError as err:
            raise InputError(f"{config.source}: engine: {err}") from None
        _log.debug("%s", self.backend.describe())
        self.plan = build_plan(config)
        self._plans: dict[frozenset, Plan] = {}
        ex = config.executor
        self.executor_type = executor or ex.type
        #: numba's initialisation on its thread (``warm_up``), until the first pass joins
        #: it: where the kernels run in this process (other executors' workers start
        #: their own numba, and the thread would take a core from them)
        self._warm_up = (NumbaWarmUp(skip_numba_extensions) if warm_up and self.backend.engine != "jax"
                         and self.executor_type == "iterative" else None)
        self.workers = workers or ex.workers
        self.chunksize = chunksize or ex.chunksize
        self.status = status
        self.skip_bad_files = config.skip_bad_files if skip_bad_files is None else skip_bad_files
        self.nonfinite = config.nonfinite
        self._client = None
        self._cluster = None
        self._parsl = None
        self._chunks: list | None = None
        self._validated = False
        self.weight_branches = {name: ds.weight for name, ds in config.datasets.items()}
        #: each dataset's first-event check, made when its file was opened (path -> the
        #: error, or None), until validate_columns raises or passes it
        self._first_events: dict[str, Exception | None] = {}
        skipped: list[Fault] = []
        self.fileset = resolve_fileset(
            config, skipped=skipped if self.skip_bad_files else None,
            required=required_branches(self.plan), first_event=self.first_event_at_open,
        )
        for ds in self.fileset.values():
            # in every chunk's events.metadata (read by columns.py and faults.guarded)
            ds["metadata"] = {"nonfinite": self.nonfinite, "retries": ex.retries}
        #: every skipped chunk or file and every non-finite drop seen so far (all passes)
        self.faults = Faults(skipped)
        check_sizes(config, self.plan, events=self.largest_chunk)
        #: the validation split's part every pass weighs: ``(part, fraction)`` with part
        #: "train" or "held_out" (:func:`analysis.pipeline.split.part_factor`); ``None``: all
        #: events. Set by the optimisation loop around its passes.
        self.part: tuple[str, float] | None = None
        self._own_cache = False
        if isinstance(cache, ColumnCache):
            self.cache: ColumnCache | None = cache
        elif cache is False or (cache is None and not config.cache):
            self.cache = None
        else:
            self.cache = ColumnCache(budget=int(config.cache_memory_mb * 2**20))
            self._own_cache = True
        if self.cache is not None:  # chunks run in this process keep their columns in it
            placement.register(self.cache)
        self._branches = plan_branches(self.plan)

    @property
    def largest_chunk(self) -> int:
        """Events of the largest chunk (the chunk size, or the largest file if smaller)."""
        n = max((n for ds in self.fileset.values() for n, _ in ds["entries"].values()), default=0)
        return min(n, self.chunksize)

    # -- passes -----------------------------------------------------------------
    def theta_and_widths(
        self, params: dict[str, float] | None = None, widths: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        values = dict(self.config.initial_params())
        if params:
            unknown = set(params) - set(values)
            if unknown:
                raise InputError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
            for name, value in params.items():  # as --set and the config's init are
                problem = value_problem(self.config, name, value, soft=True)
                if problem is not None:  # (one that names the parameter: said once)
                    raise InputError(f"parameter {problem}" if problem.startswith(f"{name} ")
                                     else f"parameter {name}: {problem}")
            values.update(params)
        for h in self.config.histograms:  # trainable edges stay in order (--set, grids)
            if h.trainable_edges:
                try:
                    check_edges(h.edges_at(values), f"histogram {h.name!r}: edges at the "
                                f"parameters {', '.join(h.edge_names())}")
                except ValueError as err:
                    raise InputError(str(err)) from None
        theta = np.array([values[n] for n in self.plan.param_names], dtype=np.float64)
        w = np.asarray(initial_widths(self.config) if widths is None else widths, dtype=np.float64)
        return theta, w

    def run(
        self,
        params: dict[str, float] | None = None,
        *,
        widths: Any = None,
        order: int = 1,
        chunks: list | None = None,
        unit_weights: bool = False,
        observables: Collection[str] | None = None,
    ) -> dict[str, DatasetState]:
        """One pass: ``{dataset: DatasetState}`` (every configured dataset present).
        ``unit_weights``: every event weighs 1 (with ``widths=0``, ``order=0``: the
        selected sums are the numbers of events passing the hard cuts).
        ``observables``: compute only these observables (names; default all): the same
        columns, selection, yields and histograms
        (:func:`analysis.pipeline.plan.only_observables`)."""

        theta, w = self.theta_and_widths(params, widths)
        plan = self.plan if observables is None else self._plan_with(observables)
        proc = self._processor(Job(plan, Request(theta, w, order=order), self.weight_branches,
                                   part=self.part, unit_weights=unit_weights,
                                   backend=self.backend))
        return self.process(proc, lambda: empty_state(plan, theta, w, order), chunks=chunks)

    def _processor(self, job: Job):
        """The :class:`processors.DiffProcessor` of the pass ``job``; a pass the backend
        refuses (``backend: numba`` and a plan node without a numba rule) is one line
        (:class:`InputError`) here, before any chunk is read."""
        from processors import DiffProcessor

        try:
            return DiffProcessor(job)
        except ValueError as err:
            raise InputError(f"{self.config.source}: engine: {err}") from None

    def _plan_with(self, observables: Collection[str]) -> Plan:
        """:func:`~analysis.pipeline.plan.only_observables` of the plan, built once per
        set of names (so that the kernels' per-plan tables are built once too)."""
        key = frozenset(observables)
        if key not in self._plans:
            self._plans[key] = only_observables(self.plan, key)
        return self._plans[key]

    def process(self, proc, empty: Any, *, chunks: list | None = None) -> dict[str, Any]:
        """Run ``proc`` over ``chunks`` (default: all) on the executor; every pass goes here.

        Columns are checked first (:meth:`validate_columns`); datasets without
        chunks (empty files) get ``empty()``, so every configured dataset is present.
        The processor's fault record (:func:`analysis.data.faults.guarded`) is taken out
        and kept in :attr:`faults`; a failed chunk is then an :class:`InputError`
        unless ``skip_bad_files``.

        With the column cache, chunks kept by dask workers are evaluated there (sent
        first, so they run while the driver reads and evaluates the others), chunks
        kept here are evaluated here, and the rest are read through coffea; a chunk
        whose worker is gone is read again. Outputs are added in this order: the chunks
        read, then the cached ones in chunk order, then those read again.
        """
        warm = self._warm_up
        if warm is not None:  # readers type numba arguments with every extension known
            warm.wait_extensions()
        if warm is not None and not hasattr(proc, "reading"):  # its own code, at once
            warm.wait()
        self.validate_columns()
        items = self.chunks if chunks is None else chunks
        cacheable = self.cache is not None and hasattr(proc, "reading")
        here: set[int] = set()
        there: list = []
        read = list(items)
        if cacheable:
            keys = [self._key(item) for item in items]
            here = {i for i, k in enumerate(keys) if self.cache.holds(k)}
            there = [
                (i, items[i], k) for i, k in enumerate(keys) if i not in here and k in self.cache
            ]
            on_workers = {i for i, _, _ in there}
            read = [item for i, item in enumerate(items) if i not in here and i not in on_workers]
        pending = self._submit(there, proc) if there else []
        try:
            out = self._read(read, proc, cacheable)
            if warm is not None:  # joined by the chunks read (before their kernels), or here
                warm.wait()
                self._warm_up = None
            parts = [out] if out else []
            # here first: the driver works while the workers run theirs (on the chunk
            # thread, as the chunks read: one set of the kernels' per-thread scratch;
            # all of them in one hand-off, not a wake-up of each thread per chunk)
            done = on_chunk_thread(lambda: {
                i: evaluate_kept(self.cache, proc, self._key(items[i]), items[i].dataset)
                for i in sorted(here)
            }) if here else {}
            remote, lost = self._gather(pending)
        finally:
            for *_, future in pending:  # none left running if this pass failed
                if future is not None:
                    future.cancel()
        done.update(remote)
        parts.extend(done[i] for i in sorted(done))
        if lost:
            again = self._read(lost, proc, cacheable)
            if again:
                parts.append(again)
        if cacheable and (read or lost) and self.cache.remote:
            self._rebalance()
        if len(parts) > 1:
            from coffea import processor

            out = dict(processor.accumulate(parts))
        else:
            out = dict(parts[0]) if parts else {}
        for name in self.config.datasets:
            if name not in out:
                out[name] = empty()
        log_enumeration(out)
        return out

    def _key(self, item) -> tuple:
        """The cache key of coffea work item ``item``."""
        return chunk_key(
            item.fileuuid,
            item.treename,
            item.entrystart,
            item.entrystop,
            branches=self._branches,
            weight_branch=self.weight_branches[item.dataset],
            nonfinite=self.nonfinite,
        )

    def _read(self, items: list, proc, cacheable: bool) -> dict[str, Any]:
        """``proc`` on ``items`` through coffea (files read); their columns go to the cache."""
        if not items:
            return {}
        options: dict[str, Any] = {}
        if cacheable:
            # on dask, each worker keeps the columns it read (same budget per worker)
            options.update(keep_columns=True, cache_token=self.cache.token,
                           worker_budget=self.cache.budget if self.executor_type == "dask"
                           else None)
        # coffea's futures/dask workers share the cores already: one kernel thread each
        if self.executor_type in ("futures", "dask", "parsl") and hasattr(proc, "reading"):
            options["kernel_threads"] = 1
        if self.executor_type == "iterative" and hasattr(proc, "reading"):
            # a chunk's kernels run while the next chunk is read (analysis.data.overlap),
            # on the cores the reading leaves
            options["overlap"] = True
            options["kernel_threads"] = kernel_threads()
        if self._warm_up is not None and hasattr(proc, "reading"):
            # the chunks' reading overlaps numba's start; their kernels wait for it
            options["before_kernels"] = numba_ready
        if options:  # another processor of the same prepared pass (this one unchanged)
            proc = proc.reading(**options)
        try:
            out = settle(dict(self._call(items, proc)))
        except Exception as err:
            raise self._executor_error(err) from err
        batch = out.pop(COLUMNS_KEY, None)
        places = out.pop(PLACES_KEY, None)
        self._absorb(out.pop(FAULTS_KEY, None))
        if batch is not None:
            for key, cols in batch.columns.items():
                self.cache.put(key, cols)
        if places is not None:
            for key, address in places.places.items():
                self.cache.place(key, address)
        return out

    def fill_histograms(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several histograms in one pass: for each spec ``{"index", "bins", "low",
        "high", "params", "widths"}`` (the last two optional, as for :meth:`run`), the
        ``{dataset: hist.Hist}`` of observable ``index`` with that selection's weights;
        a string ``index`` names a learned score: its values before any cut, per object
        or event, with the event weights (``widths`` unused)."""
        from processors.diff_processor import empty_histogram

        filled = []
        for spec in specs:
            theta, w = self.theta_and_widths(spec.get("params"), spec.get("widths"))
            filled.append((spec["index"], spec["bins"], spec["low"], spec["high"], theta, w))
        theta0, w0 = self.theta_and_widths()
        proc = self._processor(Job(self.plan, Request(theta0, w0, order=0), self.weight_branches,
                                   part=self.part, histograms=tuple(filled),
                                   backend=self.backend))

        def empty():
            def label(i):
                return f"score.{i}" if isinstance(i, str) else self.plan.observables[i].name

            return {i: empty_histogram(label(f[0]), *f[1:4]) for i, f in enumerate(filled)}

        out = self.process(proc, empty)
        return [{name: out[name][i] for name in self.config.datasets} for i in range(len(specs))]

    def close(self) -> None:
        if self.cache is not None and self.cache.remote:
            # the workers' stores go (their spill files too); their places are then stale
            with contextlib.suppress(Exception):
                placement.drop_everywhere(self.cache.token, client=self._client)
            self.cache.remote.clear()
        if self.cache is not None and self._own_cache:
            self.cache.close()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        self._close_parsl()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
