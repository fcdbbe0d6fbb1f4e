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
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from coffea.nanoevents import NanoAODSchema

from analysis.config.loader import Config
from analysis.data.branches import branch_problem, required_branches
from analysis.data.cache import COLUMNS_KEY, PLACES_KEY, ColumnCache, chunk_key, plan_branches
from analysis.data.columns import extract_columns
from analysis.data.faults import FAULTS_KEY, Fault, Faults, describe
from analysis.errors import DiffcoffeaError, InputError
from analysis.pipeline.bounds import check_sizes
from analysis.pipeline.kernel import chunk_state, grid_state
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan, build_plan, initial_widths
from analysis.pipeline.results import DatasetState

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

SKHEP_CACHE = Path.home() / ".local" / "skhepdata"

# How long a pass may wait to connect to a dask scheduler (never a hang on a dead address).
DASK_CONNECT_TIMEOUT = "30s"

# Seconds between checks for dead workers while waiting for tasks pinned to workers.
WORKER_POLL = 1.0

# One compute thread per LocalCluster worker: each worker's XLA (and numba, BLAS) would
# otherwise start a pool as large as the machine, and the workers' pools would compete
# (on 2 cores, 2 workers were slower than 1: 0.83x; with one thread each, 1.09x at a
# load of 3 from other jobs, and 1.9x in CPU time). Variables the user set are kept.
WORKER_THREADS_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


def worker_threads_env(environ: Any) -> dict[str, str]:
    """The variables of :data:`WORKER_THREADS_ENV` not already set in ``environ``."""
    return {k: v for k, v in WORKER_THREADS_ENV.items() if k not in environ}


class EventSchema(NanoAODSchema):
    """NanoAOD schema that accepts files without run/luminosityBlock/event (not needed here).

    A module-level class so that it pickles by reference to every worker.
    """

    error_missing_event_ids = False
    warn_missing_crossrefs = False


def resolve_skhep(name: str, where: str) -> str:
    """Path of a scikit-hep-testdata file, from its local cache (no download needed)."""
    cached = SKHEP_CACHE / name
    if cached.is_file():
        return str(cached)
    try:
        import skhep_testdata

        return str(skhep_testdata.data_path(name))
    except Exception as err:  # no network here: say what to do instead
        raise InputError(
            f"{where}: skhep:{name} is not in {SKHEP_CACHE} and could not be downloaded "
            f"({type(err).__name__}); copy the file there"
        ) from None


def as_written(text: str) -> str:
    """``text`` with paths into the scikit-hep-testdata cache written as the config's
    ``skhep:NAME`` entries (a message should name what the user wrote)."""
    return text.replace(f"{SKHEP_CACHE}{os.sep}", "skhep:")


class BadFile(Exception):
    """Why a file cannot be read (a one-line reason, without the path)."""


class BranchError(InputError):
    """A branch the analysis needs is missing or inconsistent (not a bad file)."""


def open_file(
    path: str, treename: str, required: dict[str, tuple[str, ...]] | None = None
) -> tuple[int, bytes]:
    """``(entries, uuid)`` of tree ``treename`` in ``path``; :class:`BadFile` if unreadable,
    :class:`BranchError` naming the branch if one of ``required`` is missing or not one
    value per object (:func:`analysis.data.branches.branch_problem`).

    Opens the file and its tree and reads the branch list and entry count, which is
    all coffea's preprocessing would do, so a truncated file, a corrupt header or
    tree, or a directory fails here, with one line, not in a worker.
    """
    import uproot

    if os.path.isdir(path):
        raise BadFile("is a directory, not a ROOT file")
    try:
        with uproot.open(path) as f:
            if treename not in f:
                keys = ", ".join(sorted({k.split(";")[0] for k in f.keys()}))
                raise BadFile(f"no tree {treename!r} (keys: {keys or 'none'})")
            tree = f[treename]
            if not hasattr(tree, "num_entries"):
                raise BadFile(f"{treename!r} is a {type(tree).__name__}, not a TTree")
            tree.keys()
            problem = branch_problem(tree, required or {})
            if problem is None:
                return int(tree.num_entries), f.file.fUUID
    except BadFile:
        raise
    except Exception as err:
        raise BadFile(f"not a readable ROOT file ({describe(err)})") from err
    raise BranchError(problem)


def _same_file(where: str, path: str, earlier: str, what: str) -> None:
    """A file listed twice in a dataset is read once: one warning line says so."""
    import warnings

    from analysis.errors import DiffcoffeaWarning

    warnings.warn(
        f"{where}: {path} is {what} {earlier}; counted once", DiffcoffeaWarning, stacklevel=3
    )


def resolve_fileset(
    config: Config,
    *,
    skipped: list[Fault] | None = None,
    required: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{dataset: {"files": {path: treename}, "entries": {path: (n, uuid)}}}``, globs
    expanded and every file opened.

    Relative paths are relative to the config file's directory. Each file is opened
    with :func:`open_file`: an unreadable one is an :class:`InputError`, or, if a
    ``skipped`` list is given, appended to it as a :class:`~analysis.data.faults.Fault`
    and left out.
    """
    fileset: dict[str, dict[str, Any]] = {}
    for name, ds in config.datasets.items():
        where = f"{config.source}: datasets.{name}.files"
        paths: list[str] = []
        if ds.generate is not None:
            from analysis.data.generate import ensure_dataset
            g = ds.generate
            made = ensure_dataset(
                config.resolve_path(g.dir),
                process=g.process,
                n_events=g.events,
                n_files=g.files,
                seed=g.seed,
            )
            paths.extend(str(p) for p in made)
        for entry in ds.files or []:
            if entry.startswith("skhep:"):
                paths.append(resolve_skhep(entry[len("skhep:") :], where))
                continue
            path = config.resolve_path(entry)
            if any(c in path for c in "*?["):
                matches = sorted(glob.glob(path))
                if not matches:
                    raise InputError(f"{where}: no file matches {entry!r} (looked for {path})")
                paths.extend(matches)
            elif not os.path.exists(path):
                raise InputError(f"{where}: no such file {entry!r} (looked for {path})")
            else:
                paths.append(path)
        entries: dict[str, tuple[int, Any]] = {}
        first: dict[Any, str] = {}  # resolved path, and file UUID -> the path met first
        for path in paths:
            real = os.path.realpath(path)
            if real in first:
                _same_file(where, path, first[real], "the same file as")
                continue
            first[real] = path
            try:
                n, uuid = open_file(path, ds.treename, required)
            except BranchError as err:
                raise InputError(f"{path}: {err} (datasets.{name})") from None
            except BadFile as bad:
                if skipped is None:
                    raise InputError(as_written(f"{path}: {bad} (datasets.{name})")) from bad
                skipped.append(Fault(name, path, None, None, str(bad)))
                continue
            copy = ("uuid", uuid, os.path.getsize(path))  # (a damaged copy is not the file)
            if copy in first:
                _same_file(where, path, first[copy], "a copy (same ROOT file UUID and size) of")
                continue
            first[copy] = path
            entries[path] = (n, uuid)
        fileset[name] = {"files": {p: ds.treename for p in entries}, "entries": entries}
    return fileset


# coffea's wrapper around an error before ``process``: "... The error was: OSError('...')."
_THE_ERROR_WAS = re.compile(
    r"The error was: (?P<type>[\w.]+)\((?P<q>['\"])(?P<text>.*)(?P=q)\)", re.S
)

_WORK_ITEM = re.compile(
    r"WorkItem\(dataset='(?P<dataset>[^']*)', filename='(?P<file>[^']*)', "
    r"treename='[^']*', entrystart=(?P<start>\d+), entrystop=(?P<stop>\d+)"
)


class _WorkerTraceback(Exception):
    """The traceback of a chunk that failed in a worker (shown with ``--debug``)."""


def empty_columns(plan: Plan) -> ChunkColumns:
    """Columns of a chunk with no events."""
    return ChunkColumns(
        n_events=0,
        weight=np.zeros(0),
        events={k: np.zeros(0) for k in plan.event_keys},
    )


def empty_state(plan: Plan, theta: np.ndarray, widths: np.ndarray, order: int) -> DatasetState:
    """The state of a dataset with no events (zero yields, undefined statistics)."""
    return chunk_state(empty_columns(plan), plan, theta, widths, order=order)


class Evaluator:
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
    ) -> None:
        """``cache``: ``None`` follows the config's ``cache``; ``False`` reads the files on
        every pass; a :class:`~analysis.data.cache.ColumnCache` is used (and not closed) as
        it is, e.g. shared by several evaluators of the same files."""
        self.config = config
        self.plan = build_plan(config)
        ex = config.executor
        self.executor_type = executor or ex.type
        self.workers = workers or ex.workers
        self.chunksize = chunksize or ex.chunksize
        self.status = status
        self.skip_bad_files = config.skip_bad_files if skip_bad_files is None else skip_bad_files
        self.nonfinite = config.nonfinite
        self._client = None
        self._cluster = None
        self._chunks: list | None = None
        self._validated = False
        skipped: list[Fault] = []
        self.fileset = resolve_fileset(
            config, skipped=skipped if self.skip_bad_files else None,
            required=required_branches(self.plan),
        )
        for ds in self.fileset.values():
            # in every chunk's events.metadata (read by columns.py and faults.guarded)
            ds["metadata"] = {"nonfinite": self.nonfinite, "retries": ex.retries}
        #: every skipped chunk or file and every non-finite drop seen so far (all passes)
        self.faults = Faults(skipped)
        check_sizes(config, self.plan, events=self.largest_chunk)
        self.weight_branches = {name: ds.weight for name, ds in config.datasets.items()}
        self._own_cache = False
        if isinstance(cache, ColumnCache):
            self.cache: ColumnCache | None = cache
        elif cache is False or (cache is None and not config.cache):
            self.cache = None
        else:
            self.cache = ColumnCache(budget=int(config.cache_memory_mb * 2**20))
            self._own_cache = True
        self._branches = plan_branches(self.plan)

    @property
    def largest_chunk(self) -> int:
        """Events of the largest chunk (the chunk size, or the largest file if smaller)."""
        n = max((n for ds in self.fileset.values() for n, _ in ds["entries"].values()), default=0)
        return min(n, self.chunksize)

    # -- executors ------------------------------------------------------------
    def _executor(self):
        from coffea import processor

        retries = self.config.executor.retries
        if self.executor_type == "iterative":
            return processor.IterativeExecutor(status=self.status, retries=retries)
        if self.executor_type == "futures":
            return processor.FuturesExecutor(
                workers=self.workers, status=self.status, retries=retries
            )
        if self._client is None:
            # Workers must compute in float64 too: they inherit JAX_ENABLE_X64 from here.
            os.environ["JAX_ENABLE_X64"] = "1"
            from dask.distributed import Client, LocalCluster

            address = self.config.executor.address
            if address:
                self._client = Client(address, timeout=DASK_CONNECT_TIMEOUT)
            else:
                self._cluster = LocalCluster(
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    env=worker_threads_env(os.environ),
                )
                self._client = Client(self._cluster)
        return processor.DaskExecutor(client=self._client, status=self.status, retries=retries)

    def _runner(self):
        import coffea.util
        from coffea import processor

        # coffea draws its progress bars whatever the executor's ``status`` says.
        coffea.util.coffea_console.quiet = not self.status

        return processor.Runner(
            executor=self._executor(),
            chunksize=self.chunksize,
            schema=EventSchema,
            savemetrics=False,
        )

    def validate_columns(self) -> None:
        """Read what the plan needs from the first event of each dataset, here.

        A missing collection, field or weight branch is then a one-line
        :class:`InputError` before any chunk is dispatched: coffea's futures
        executor drops a worker's exception (it prints the traceback and raises a
        bare ``Exception``), so such errors must not first surface in a worker.
        A first event that cannot be read is one line too (with ``skip_bad_files``
        the file is passed over here; the pass records its chunks as skipped).
        Non-finite values are left to the pass, which counts or reports them.
        """
        if self._validated:
            return
        import warnings

        from coffea.nanoevents import NanoEventsFactory

        for name, ds in self.fileset.items():
            for path, tree in ds["files"].items():
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        events = NanoEventsFactory.from_root(
                            {path: tree}, schemaclass=EventSchema, mode="virtual", entry_stop=1
                        ).events()
                    if len(events) == 0:
                        continue  # an empty file: try the dataset's next one
                    extract_columns(
                        events,
                        self.plan,
                        weight_branch=self.weight_branches[name],
                        source=path,
                        nonfinite="drop",
                    )
                except DiffcoffeaError:
                    raise
                except Exception as err:  # unreadable: one line, or skipped
                    if self.skip_bad_files:
                        continue
                    raise InputError(
                        f"{path}, entries 0-1 (datasets.{name}): {describe(err)}"
                    ) from err
                break
        self._validated = True

    @property
    def chunks(self) -> list:
        """coffea work items, computed once and reused by every pass."""
        if self._chunks is None:
            # coffea's own chunking, from the entry counts read when the files were
            # checked: its preprocessing would open every file once more (in workers,
            # where a failure loses its cause).
            from coffea.processor.executor import FileMeta

            chunks = []
            for name, ds in self.fileset.items():
                for path, tree in ds["files"].items():
                    n, uuid = ds["entries"][path]
                    meta = {"numentries": n, "uuid": uuid, **ds["metadata"]}
                    chunks.extend(FileMeta(name, path, tree, meta).chunks(self.chunksize, False))
            self._chunks = chunks
        return self._chunks

    # -- faults -------------------------------------------------------------------
    def _executor_error(self, err: Exception) -> Exception:
        """A one-line :class:`InputError` for an exception out of coffea, when it names
        a chunk (coffea puts the ``WorkItem`` in its messages); otherwise ``err``."""
        if isinstance(err, DiffcoffeaError):
            return err
        e: BaseException | None = err
        seen = set()
        while e is not None and id(e) not in seen:
            seen.add(id(e))
            if isinstance(e, DiffcoffeaError):
                return e
            m = _WORK_ITEM.search(str(e))
            if m:
                where = f"{m['file']}, entries {m['start']}-{m['stop']} (datasets.{m['dataset']})"
                if "KilledWorker" in str(e):
                    return InputError(
                        f"{where}: the dask workers processing this chunk died repeatedly "
                        "(a crash or out of memory?)"
                    )
                inner = _THE_ERROR_WAS.search(str(e))
                if inner:  # the futures executor keeps only the wrapper's text
                    text = inner["text"].replace("\\n", " ")
                    cause = describe(Exception(f"{inner['type']}: {text}"))
                    cause = cause.removeprefix("Exception: ")
                else:
                    cause = describe(e)
                return InputError(as_written(f"{where}: {cause}"))
            e = e.__cause__ or e.__context__
        return err

    def _absorb(self, faults: Faults | None) -> None:
        """Record a pass's faults; without ``skip_bad_files`` a skipped chunk is an error."""
        if not faults:
            return
        self.faults = self.faults + faults
        # skip_bad_files skips bad files only: a cap, a config error, a bug or memory
        # would bias what remains, so they always stop the run.
        bad = [f for f in faults.skipped_list() if f.kind != "read" or not self.skip_bad_files]
        if bad:
            f = bad[0]
            reason = f.reason
            if reason.startswith(f.file + ":"):
                reason = reason[len(f.file) + 1 :].strip()
            more = f" (and {len(bad) - 1} more chunks)" if len(bad) > 1 else ""
            hint = {
                "read": "; skip_bad_files: true (or --skip-bad-files) goes on without bad chunks",
                "error": " (not a bad file: never skipped; --debug shows the traceback)",
            }.get(f.kind, "")
            raise InputError(
                as_written(f"{f.where} (datasets.{f.dataset}): {reason}{more}{hint}")
            ) from _WorkerTraceback(f.detail)

    def faults_report(self) -> dict[str, Any]:
        """The ``faults`` entry of results.json: policies, skipped chunks, dropped counts."""
        return {
            "skip_bad_files": self.skip_bad_files,
            "nonfinite": self.nonfinite,
            "skipped": [f.to_json() for f in self.faults.skipped_list()],
            "skipped_fraction": self.skipped_fraction(),
            "dropped": self.faults.dropped_totals(),
        }

    def skipped_fraction(self) -> dict[str, float | None]:
        """Per dataset, the fraction of the entries of its readable files that were in
        skipped chunks (0.0 when none; ``None`` when no readable file has entries). A whole
        file skipped as unreadable has no known entries: it is listed, not counted."""
        out: dict[str, float | None] = {}
        for name, ds in self.fileset.items():
            total = sum(n for n, _ in ds["entries"].values())
            lost = sum(f.events or 0 for f in self.faults.skipped_list()
                       if f.dataset == name and f.kind == "read")
            out[name] = lost / total if total else None
        return out

    # -- passes -----------------------------------------------------------------
    def theta_and_widths(
        self, params: dict[str, float] | None = None, widths: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        values = dict(self.config.initial_params())
        if params:
            unknown = set(params) - set(values)
            if unknown:
                raise InputError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
            values.update(params)
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
    ) -> dict[str, DatasetState]:
        """One pass: ``{dataset: DatasetState}`` (every configured dataset present).
        ``unit_weights``: every event weighs 1 (with ``widths=0``, ``order=0``: the
        selected sums are the numbers of events passing the hard cuts)."""
        from processors import DiffProcessor

        theta, w = self.theta_and_widths(params, widths)
        proc = DiffProcessor(
            self.plan, theta, w, self.weight_branches, order=order, unit_weights=unit_weights
        )
        return self.process(proc, lambda: empty_state(self.plan, theta, w, order), chunks=chunks)

    def run_pullback(
        self,
        params: dict[str, float] | None,
        payloads: dict[str, Any],
        *,
        widths: Any = None,
        chunks: list | None = None,
    ) -> dict[str, DatasetState]:
        """Reverse mode's second pass (:mod:`analysis.pipeline.reverse`): per dataset the
        merged states and ``dL/dtheta`` (``derived``: a :class:`analysis.stats.Pullback`
        over the trainable parameters) for the payloads of the first pass's merged
        states (:func:`analysis.pipeline.reverse.payload_arrays`)."""
        from analysis.stats.derive import Pullback
        from processors import DiffProcessor

        theta, w = self.theta_and_widths(params, widths)
        proc = DiffProcessor(self.plan, theta, w, self.weight_branches, order=0,
                             payloads=payloads)

        def empty() -> DatasetState:
            st = empty_state(self.plan, theta, w, 0)
            zero = np.zeros(len(self.plan.trainable))
            return DatasetState(events=0, sumw=0.0, chunks=0,
                                derived=Pullback(self.plan.trainable_names, st.derived.value, zero))

        return self.process(proc, empty, chunks=chunks)

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
        self.validate_columns()
        items = self.chunks if chunks is None else chunks
        cacheable = self.cache is not None and hasattr(proc, "keep_columns")
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
            parts = [out] if out else []
            # here first: the driver works while the workers run theirs
            done = {
                i: proc.evaluate(items[i].dataset, self.cache.get(self._key(items[i])))
                for i in sorted(here)
            }
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
        if cacheable:
            proc.keep_columns = True
            proc.cache_token = self.cache.token
            # on dask, each worker keeps the columns it read (same budget per worker)
            proc.worker_budget = self.cache.budget if self.executor_type == "dask" else None
        # coffea's futures/dask workers share the cores already: one kernel thread each
        shared = self.executor_type in ("futures", "dask") and hasattr(proc, "kernel_threads")
        if shared:
            proc.kernel_threads = 1
        try:
            out = dict(self._call(items, proc))
        except Exception as err:
            raise self._executor_error(err) from err
        finally:
            if cacheable:
                proc.keep_columns, proc.cache_token, proc.worker_budget = False, None, None
            if shared:
                proc.kernel_threads = None
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

    def _alive_workers(self) -> set[str]:
        if self._client is None:
            return set()
        return set(self._client.scheduler_info(n_workers=-1)["workers"])

    def _submit(self, chunks: list, proc) -> list:
        """Each ``(index, item, key)`` of ``chunks`` sent to the dask worker that keeps its
        columns, as a task pinned there: ``[(index, item, key, address, future)]``.

        Only the processor and the key travel; the task evaluates the worker's own
        columns (:func:`analysis.data.cache.evaluate_on_worker`)."""
        from analysis.data.cache import evaluate_on_worker
        alive = self._alive_workers()
        token = self.cache.token
        out = []
        for i, item, key in chunks:
            address = self.cache.where(key)
            if address not in alive:  # that worker is gone: a task pinned to it never runs
                out.append((i, item, key, address, None))
                continue
            future = self._client.submit(
                evaluate_on_worker,
                proc,
                token,
                key,
                item.dataset,
                workers=[address],
                allow_other_workers=False,
                pure=False,
            )
            out.append((i, item, key, address, future))
        return out

    def _rebalance(self) -> None:
        """Even out the number of chunks the live workers keep (at most one apart).

        A first pass leaves each chunk on the worker that happened to read it, often
        unevenly (6 and 4 of 10), and later passes run each chunk where it is kept, so
        the busiest worker sets their time. Chunks move from the worker with the most
        to the one with the fewest, worker to worker (a task on the first hands the
        columns to a task on the second; the scheduler sees only the tasks). A move
        that fails leaves the chunk to be read again."""
        from analysis.data.cache import adopt_columns, take_columns
        alive = self._alive_workers()
        held: dict[str, list] = {a: [] for a in alive}
        for key, address in self.cache.remote.items():
            if address in held:
                held[address].append(key)
        moves = []
        while held:
            src = max(held, key=lambda a: len(held[a]))
            dst = min(held, key=lambda a: len(held[a]))
            if len(held[src]) - len(held[dst]) <= 1:
                break
            key = held[src].pop()
            held[dst].append(key)
            moves.append((key, src, dst))
        if not moves:
            return
        token, budget = self.cache.token, self.cache.budget
        pending = []
        for i, (key, src, dst) in enumerate(moves):
            pin = {"allow_other_workers": False, "pure": False}
            taken = self._client.submit(take_columns, token, key, workers=[src], **pin)
            done = self._client.submit(
                adopt_columns, token, key, taken, budget=budget, workers=[dst], **pin
            )
            pending.append((i, key, key, (src, dst), done))
        try:
            moved, _ = self._gather(pending)  # a lost move: forgotten, read again
        except Exception:  # a move that raised: those chunks are read again, not fatal
            moved = {}
            for key, _, _ in moves:
                self.cache.forget(key)
        finally:
            for *_, future in pending:
                future.cancel()
        for i in moved:
            key, _, dst = moves[i]
            self.cache.place(key, dst)

    def _gather(self, pending: list) -> tuple[dict[int, Any], list]:
        """Outputs of the tasks :meth:`_submit` sent, ``{index: output}``, and the work
        items to read again: those whose worker died (or restarted without them).

        Polls: a task pinned to a dead worker would wait forever for it, so every
        :data:`WORKER_POLL` seconds the tasks of workers the scheduler no longer knows
        are cancelled and their chunks forgotten by the cache (``address`` may be a
        tuple: the task needs all of those workers)."""
        from distributed import KilledWorker, wait

        results: dict[int, Any] = {}
        lost: list = []
        waiting = {}
        for i, item, key, address, future in pending:
            if future is None:
                self.cache.forget(key)
                lost.append((i, item))
            else:
                waiting[i] = (item, key, address, future)
        while waiting:
            with contextlib.suppress(TimeoutError):
                wait(
                    [w[3] for w in waiting.values()],
                    timeout=WORKER_POLL,
                    return_when="FIRST_COMPLETED",
                )
            for i, (item, key, _, future) in list(waiting.items()):
                if not future.done():
                    continue
                del waiting[i]
                try:
                    value = future.result()
                except KilledWorker:  # its worker died while running it: read it again
                    value = None
                if value is None:
                    self.cache.forget(key)
                    lost.append((i, item))
                else:
                    results[i] = value
            if waiting:
                alive = self._alive_workers()
                for i, (item, key, address, future) in list(waiting.items()):
                    needed = address if isinstance(address, tuple) else (address,)
                    if not set(needed) <= alive:
                        future.cancel()
                        del waiting[i]
                        self.cache.forget(key)
                        lost.append((i, item))
        return results, [item for _, item in sorted(lost, key=lambda x: x[0])]

    def _call(self, items: list, proc) -> Any:
        """coffea's runner on ``items``; the futures executor's printed traceback is held back.

        That executor prints a failing task's traceback to stderr before re-raising
        (the exception keeps it as its cause, shown with ``--debug``): it is written
        out only if the pass succeeds after all, so that an error stays one line.
        """
        if self.executor_type != "futures":
            return self._runner()(items, processor_instance=proc)
        held = io.StringIO()
        with contextlib.redirect_stderr(held):
            out = self._runner()(items, processor_instance=proc)
        sys.stderr.write(held.getvalue())
        return out

    def run_histograms(
        self,
        index: int,
        bins: int,
        low: float,
        high: float,
        params: dict[str, float] | None = None,
        *,
        widths: Any = None,
    ) -> dict[str, Any]:
        """``{dataset: hist.Hist}`` of observable ``index`` with the soft selection weights."""
        spec = {"index": index, "bins": bins, "low": low, "high": high}
        return self.fill_histograms([{**spec, "params": params, "widths": widths}])[0]

    def fill_histograms(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Several histograms in one pass: for each spec ``{"index", "bins", "low",
        "high", "params", "widths"}`` (the last two optional, as for :meth:`run`), the
        ``{dataset: hist.Hist}`` of observable ``index`` with that selection's weights;
        a string ``index`` names a learned score: its values before any cut, per object
        or event, with the event weights (``widths`` unused)."""
        from processors import DiffProcessor
        from processors.diff_processor import empty_histogram

        filled = []
        for spec in specs:
            theta, w = self.theta_and_widths(spec.get("params"), spec.get("widths"))
            filled.append((spec["index"], spec["bins"], spec["low"], spec["high"], theta, w))
        theta0, w0 = self.theta_and_widths()
        proc = DiffProcessor(self.plan, theta0, w0, self.weight_branches, histograms=tuple(filled))

        def empty():
            def label(i):
                return f"score.{i}" if isinstance(i, str) else self.plan.observables[i].name

            return {i: empty_histogram(label(f[0]), *f[1:4]) for i, f in enumerate(filled)}

        out = self.process(proc, empty)
        return [{name: out[name][i] for name in self.config.datasets} for i in range(len(specs))]

    def run_grid(self, thetas: Any) -> dict[str, DatasetState]:
        """One pass with hard cuts at every row of ``thetas`` (``(G, n_params)``: full
        parameter vectors): ``{dataset: DatasetState}`` whose leaves have a leading
        axis ``G`` (values only, no derivatives)."""
        from processors import DiffProcessor

        thetas = np.asarray(thetas, dtype=np.float64)
        check_sizes(self.config, self.plan, events=self.largest_chunk, grid_points=len(thetas))
        zeros = np.zeros(self.plan.n_widths)
        proc = DiffProcessor(self.plan, thetas, zeros, self.weight_branches, order=0, grid=True)
        return self.process(
            proc, lambda: grid_state(empty_columns(self.plan), self.plan, thetas, zeros)
        )

    def close(self) -> None:
        if self.cache is not None and self.cache.remote:
            # the workers' caches go (their spill files too); their places are then stale
            if self._client is not None:
                from analysis.data.cache import drop_worker_cache
                with contextlib.suppress(Exception):
                    self._client.run(drop_worker_cache, self.cache.token)
            self.cache.remote.clear()
        if self.cache is not None and self._own_cache:
            self.cache.close()
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
