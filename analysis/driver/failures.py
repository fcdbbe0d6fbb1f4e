"""A pass's faults as one line: errors out of coffea and skipped chunks.

:class:`FaultReports` is the part of :class:`analysis.driver.runner.Evaluator` (which
inherits it) that turns an exception out of coffea naming a work item into one
:class:`~analysis.errors.InputError` naming file, entries and cause
(:meth:`FaultReports._executor_error`), records each pass's
:class:`~analysis.data.faults.Faults` in ``faults`` (a skipped chunk is an error unless
``skip_bad_files``: :meth:`FaultReports._absorb`) and reports them for results.json.
Split out of :mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

import re
from typing import Any

from analysis.data.faults import Faults, describe
from analysis.driver.files import as_written
from analysis.errors import DiffcoffeaError, InputError, causes

__all__ = ["FaultReports"]

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



class FaultReports:
    """Faults of passes (a mixin of :class:`analysis.driver.runner.Evaluator`, whose
    attributes it uses)."""

    def _executor_error(self, err: Exception) -> Exception:
        """A one-line :class:`InputError` for an exception out of coffea, when it names
        a chunk (coffea puts the ``WorkItem`` in its messages); otherwise ``err``."""
        if isinstance(err, DiffcoffeaError):
            return err
        for e in causes(err):
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
