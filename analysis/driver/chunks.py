"""The chunks of a pass, made once, and a check of each dataset's first event.

:class:`ChunkSource` is the part of :class:`analysis.driver.runner.Evaluator` (which
inherits it) that reads what the plan needs from the first event of each dataset
before any chunk is dispatched (:meth:`ChunkSource.validate_columns`: a missing
collection, field or weight branch is one line) and makes coffea's work items with
``FileMeta.chunks`` from the entry counts read when the files were opened
(:attr:`ChunkSource.chunks`). It uses the evaluator's ``fileset``, ``plan``,
``weight_branches``, ``skip_bad_files`` and ``chunksize``. Split out of
:mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

from analysis.data.columns import MissingBranchError, extract_columns
from analysis.data.faults import describe
from analysis.driver.files import EventSchema
from analysis.driver.missing import missing_branch_line
from analysis.errors import DiffcoffeaError, InputError

__all__ = ["ChunkSource"]


class ChunkSource:
    """First-event checks and coffea work items (a mixin of
    :class:`analysis.driver.runner.Evaluator`, whose attributes it uses)."""

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
                except MissingBranchError as err:
                    raise InputError(missing_branch_line(err, path, name, self.config)) from None
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
