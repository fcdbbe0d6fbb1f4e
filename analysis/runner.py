"""The driver: datasets to files, coffea executors, one pass over all chunks.

:class:`Evaluator` resolves files, builds the executor (one dask ``Client`` reused
for every pass), preprocesses the fileset once (coffea otherwise re-reads each
file's metadata on every pass) and runs :class:`processors.DiffProcessor` for any
parameter values. Datasets whose files hold no events still get a (zero) state, so
every dataset is reported with the number of events seen.

Layers: the driver sits above :mod:`processors` and is the only ``analysis`` module
that imports it, inside the pass methods (:meth:`Evaluator.run`,
:meth:`Evaluator.run_grid`, :meth:`Evaluator.run_histograms`), never at import time,
so ``processors`` can import ``analysis`` (checked by ``tests/test_layers.py``).
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import numpy as np

from analysis.columns import ChunkColumns, extract_columns
from analysis.config import Config
from analysis.errors import InputError
from analysis.kernel import chunk_state, grid_state
from analysis.plan import Plan, build_plan, initial_widths
from analysis.results import DatasetState

__all__ = [
    "SKHEP_CACHE",
    "Evaluator",
    "empty_columns",
    "empty_state",
    "resolve_fileset",
    "resolve_skhep",
]

SKHEP_CACHE = Path.home() / ".local" / "skhepdata"


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


def resolve_fileset(config: Config) -> dict[str, dict[str, Any]]:
    """``{dataset: {"files": {path: treename}}}`` with globs expanded and files checked.

    Relative paths are relative to the config file's directory. Each file is opened
    once with uproot to check that the tree exists (a clear error now, rather than
    a coffea traceback later).
    """
    import uproot

    fileset: dict[str, dict[str, Any]] = {}
    for name, ds in config.datasets.items():
        where = f"{config.source}: datasets.{name}.files"
        paths: list[str] = []
        if ds.generate is not None:
            from analysis.generate import ensure_dataset

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
            elif not os.path.isfile(path):
                raise InputError(f"{where}: no such file {entry!r} (looked for {path})")
            else:
                paths.append(path)
        for path in paths:
            try:
                with uproot.open(path) as f:
                    if ds.treename not in f:
                        raise InputError(
                            f"{path}: no tree {ds.treename!r} (datasets.{name}.treename); "
                            f"keys: {', '.join(sorted({k.split(';')[0] for k in f.keys()}))}"
                        )
            except InputError:
                raise
            except Exception as err:
                raise InputError(f"{path}: not a readable ROOT file ({err})") from None
        fileset[name] = {"files": {p: ds.treename for p in paths}, "metadata": {}}
    return fileset


def empty_columns(plan: Plan) -> ChunkColumns:
    """Columns of a chunk with no events."""
    return ChunkColumns(
        n_events=0,
        weight=np.zeros(0),
        counts=None if plan.collection is None else np.zeros(0, dtype=np.int64),
        objects={k: np.zeros(0) for k in plan.object_fields} if plan.collection else {},
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
    ) -> None:
        self.config = config
        self.plan = build_plan(config)
        self.fileset = resolve_fileset(config)
        ex = config.executor
        self.executor_type = executor or ex.type
        self.workers = workers or ex.workers
        self.chunksize = chunksize or ex.chunksize
        self.status = status
        self._client = None
        self._cluster = None
        self._chunks: list | None = None
        self._validated = False
        self.weight_branches = {name: ds.weight for name, ds in config.datasets.items()}

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
                self._client = Client(address)
            else:
                self._cluster = LocalCluster(
                    n_workers=self.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                )
                self._client = Client(self._cluster)
        return processor.DaskExecutor(client=self._client, status=self.status, retries=retries)

    def _runner(self):
        import coffea.util
        from coffea import processor
        from coffea.nanoevents import NanoAODSchema

        # coffea draws its progress bars whatever the executor's ``status`` says.
        coffea.util.coffea_console.quiet = not self.status

        NanoAODSchema.warn_missing_crossrefs = False
        return processor.Runner(
            executor=self._executor(),
            chunksize=self.chunksize,
            schema=NanoAODSchema,
            savemetrics=False,
        )

    def validate_columns(self) -> None:
        """Read what the plan needs from the first event of each dataset, here.

        A missing collection, field or weight branch is then a one-line
        :class:`InputError` before any chunk is dispatched: coffea's futures
        executor drops a worker's exception (it prints the traceback and raises a
        bare ``Exception``), so such errors must not first surface in a worker.
        """
        if self._validated:
            return
        import warnings

        from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

        for name, ds in self.fileset.items():
            for path, tree in ds["files"].items():
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    events = NanoEventsFactory.from_root(
                        {path: tree}, schemaclass=NanoAODSchema, mode="virtual", entry_stop=1
                    ).events()
                if len(events) == 0:
                    continue  # an empty file: try the dataset's next one
                extract_columns(
                    events, self.plan, weight_branch=self.weight_branches[name], source=path
                )
                break
        self._validated = True

    @property
    def chunks(self) -> list:
        """coffea work items, computed once and reused by every pass."""
        if self._chunks is None:
            self._chunks = list(self._runner().preprocess(self.fileset))
        return self._chunks

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
    ) -> dict[str, DatasetState]:
        """One pass: ``{dataset: DatasetState}`` (every configured dataset present)."""
        from processors import DiffProcessor

        theta, w = self.theta_and_widths(params, widths)
        proc = DiffProcessor(self.plan, theta, w, self.weight_branches, order=order)
        return self.process(proc, lambda: empty_state(self.plan, theta, w, order), chunks=chunks)

    def process(self, proc, empty: Any, *, chunks: list | None = None) -> dict[str, Any]:
        """Run ``proc`` over ``chunks`` (default: all) on the executor; every pass goes here.

        Columns are checked first (:meth:`validate_columns`); datasets without
        chunks (empty files) get ``empty()``, so every configured dataset is present.
        """
        self.validate_columns()
        items = self.chunks if chunks is None else chunks
        out = dict(self._runner()(items, processor_instance=proc)) if items else {}
        for name in self.config.datasets:
            if name not in out:
                out[name] = empty()
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
        from processors import DiffProcessor
        from processors.diff_processor import empty_histogram

        theta, w = self.theta_and_widths(params, widths)
        proc = DiffProcessor(
            self.plan, theta, w, self.weight_branches, histogram=(index, bins, low, high)
        )
        name = self.plan.observables[index].name
        return self.process(proc, lambda: empty_histogram(name, bins, low, high))

    def run_grid(self, thetas: Any) -> dict[str, DatasetState]:
        """One pass with hard cuts at every row of ``thetas`` (``(G, n_params)``: full
        parameter vectors): ``{dataset: DatasetState}`` whose leaves have a leading
        axis ``G`` (values only, no derivatives)."""
        from processors import DiffProcessor

        thetas = np.asarray(thetas, dtype=np.float64)
        zeros = np.zeros(self.plan.n_widths)
        proc = DiffProcessor(self.plan, thetas, zeros, self.weight_branches, order=0, grid=True)
        return self.process(
            proc, lambda: grid_state(empty_columns(self.plan), self.plan, thetas, zeros)
        )

    def close(self) -> None:
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

