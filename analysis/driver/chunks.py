"""The chunks of a pass, made once, and a check of each dataset's first event.

:class:`ChunkSource` is the part of :class:`analysis.driver.runner.Evaluator` (which
inherits it) that reads what the plan needs from the first event of each dataset
before any chunk is dispatched (:meth:`ChunkSource.validate_columns`: a missing
collection, field or weight branch is one line; read with uproot on the tree opened
when the files are listed, :meth:`ChunkSource.first_event_at_open`) and makes coffea's
work items with ``FileMeta.chunks`` from the entry counts read when the files were opened
(:attr:`ChunkSource.chunks`). It uses the evaluator's ``fileset``, ``plan``,
``weight_branches``, ``skip_bad_files`` and ``chunksize``. Split out of
:mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

from typing import Any

from analysis.data.branches import required_branches
from analysis.data.columns import MissingBranchError, extract_columns
from analysis.data.faults import describe
from analysis.data.firstevent import FirstEvent
from analysis.driver.files import EventSchema
from analysis.driver.missing import missing_branch_line
from analysis.errors import DiffcoffeaError, InputError

__all__ = ["ChunkSource"]


class ChunkSource:
    """First-event checks and coffea work items (a mixin of
    :class:`analysis.driver.runner.Evaluator`, whose attributes it uses)."""

    def validate_columns(self) -> None:
        """Read what the plan needs from the first event of each dataset, here (or take
        the outcome of that read made when the files were opened:
        :meth:`first_event_at_open`).

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
        for name, ds in self.fileset.items():
            for path, tree in ds["files"].items():
                if ds["entries"][path][0] == 0:
                    continue  # an empty file: try the dataset's next one
                try:
                    self._check_first_event(name, path, tree)
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

    def first_event_at_open(self, name: str, path: str, tree: Any) -> bool:
        """The first-event check of ``path`` (a file of dataset ``name``) on its tree,
        opened by :func:`~analysis.driver.files.resolve_fileset`: its outcome is kept for
        :meth:`validate_columns`, which raises it in its turn (a file is opened once for
        both). Returns whether the dataset's check is settled (``False``: the file would
        be passed over, the next one is checked)."""
        try:
            self._read_first_event(name, path, tree, self.config.datasets[name].treename)
            outcome: Exception | None = None
        except Exception as err:  # noqa: BLE001  (raised by validate_columns)
            outcome = err
        self._first_events[path] = outcome
        return outcome is None or not self.skip_bad_files or isinstance(outcome,
                                                                        DiffcoffeaError)

    def _check_first_event(self, name: str, path: str, tree: str) -> None:
        """The first-event check of ``path``: its outcome at open, else its tree opened."""
        if path in self._first_events:
            outcome = self._first_events.pop(path)
            if outcome is not None:
                raise outcome
            return
        import uproot

        with uproot.open(path) as f:
            self._read_first_event(name, path, f[tree], tree)

    def _read_first_event(self, name: str, path: str, tree: Any, treename: str) -> None:
        """Read the plan's columns from the first event of ``tree`` (``treename``): from a
        TTree with uproot alone (:class:`~analysis.data.firstevent.FirstEvent`: the
        branches the plan reads, not coffea's schema of every branch), and where that
        misses a name (or the tree is an RNTuple) through coffea, whose words and closest
        names the message keeps."""
        read = {"weight_branch": self.weight_branches[name], "source": path,
                "nonfinite": "drop"}
        if getattr(tree, "classname", None) == "TTree":
            try:
                extract_columns(FirstEvent(tree, required_branches(self.plan)), self.plan,
                                **read)
                return
            except MissingBranchError:
                pass  # coffea's names (and its own fields, Jet.charge) decide
        import warnings

        from coffea.nanoevents import NanoEventsFactory

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            events = NanoEventsFactory.from_root(
                {path: treename}, schemaclass=EventSchema, mode="virtual", entry_stop=1
            ).events()
        extract_columns(events, self.plan, **read)

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
