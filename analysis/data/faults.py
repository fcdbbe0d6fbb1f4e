"""Data faults as data: a chunk that cannot be read becomes a mergeable record, not an exception.

coffea's executors handle a failing chunk badly for a user: they retry it, the futures
executor prints the worker's traceback and re-raises a bare ``Exception`` (the cause is
lost on the way back from the process pool), and a ``KilledWorker`` ends a dask pass.
So a processor's ``process`` is wrapped with :func:`guarded`: any exception raised while
reading or evaluating a chunk is caught *in the worker* and returned as a
:class:`Faults` record under the reserved output key :data:`FAULTS_KEY`, next to the
processor's own (per-dataset) output. The driver (:class:`analysis.driver.runner.Evaluator`)
pops it after the pass and either raises one :class:`~analysis.errors.InputError`
naming the file, the entry range and the cause (the default) or, with
``skip_bad_files``, records the skipped chunks in results.json.

The same record carries how many objects and events were dropped for non-finite
values (``nonfinite: drop``, see :func:`analysis.data.columns.extract_columns`), noted
with :func:`note_dropped` while a guarded ``process`` runs.

Nothing here knows about coffea; this module only needs the standard library.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from analysis.errors import DiffcoffeaError, InputError, causes

__all__ = [
    "FAULTS_KEY",
    "NONFINITE_POLICIES",
    "Dropped",
    "Fault",
    "Faults",
    "describe",
    "fault_record",
    "guarded",
    "note_dropped",
    "reading",
    "same_file",
]

#: Output key of the fault record. Not a string, so it never collides with a dataset name.
FAULTS_KEY = ("diffcoffea", "faults")

#: ``nonfinite:`` policies: ``error`` (one line naming file, branch, entry) or ``drop``.
NONFINITE_POLICIES = ("error", "drop")

# A file without run/luminosityBlock/event is fine here (the IDs are not used); the
# schema's multi-line warning about it would only clutter the terminal.
warnings.filterwarnings("ignore", message="There are missing event ID fields")
warnings.filterwarnings("ignore", message="Missing event_ids")

_MAX_REASON = 300


def describe(err: BaseException) -> str:
    """One line for the user: ``Type: message`` of the innermost cause of ``err``.

    coffea and awkward wrap reading errors (``Failed processing file: WorkItem(...)``,
    ``This error occurred while calling ...`` with a dump of the arguments); the first
    paragraph of the deepest exception in the chain is what went wrong (with the first
    lines of the next two if it is as short as uproot's ``while reading``). A
    :class:`~analysis.errors.DiffcoffeaError` in the chain is already one line and is
    used as it is. Whitespace is collapsed and the text is capped at 300 characters.
    """
    chain = list(causes(err))
    given = next((e for e in chain if isinstance(e, DiffcoffeaError)), None)
    if given is not None:
        return _one_line(str(given))
    inner = chain[-1]
    text = str(inner).strip()
    # awkward appends "\n\nThis error occurred while calling ..."; uproot adds the file path
    # and the source on further lines: the first paragraph is the cause.
    text = text.split("This error occurred while")[0]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    text = paragraphs[0] if paragraphs else ""
    if len(text) < 30 and len(paragraphs) > 1:
        # uproot: "while reading" / "TBasket ... (the object)" / "attempting to get bytes ..."
        text = " ".join([text, *(p.splitlines()[0] for p in paragraphs[1:3])])
    name = type(inner).__name__
    if name.islower():  # zlib.error, lzma.LZMAError is fine: qualify the bare ones
        name = f"{type(inner).__module__}.{name}"
    if isinstance(inner, KeyError) and text.startswith("'"):
        text = f"missing key {text}"
    return _one_line(f"{name}: {text}" if text else name)


def _is_input_error(err: BaseException) -> bool:
    return any(isinstance(e, DiffcoffeaError) for e in causes(err))


class ReadError(Exception):
    """Raised by :func:`reading` around an exception met while reading a chunk's file."""


# Exceptions that only reading a damaged file raises (decompression, short reads).
_READ_TYPES = ("zlib.error", "lzma.LZMAError", "struct.error", "_lzma.LZMAError")


def _kind(err: BaseException) -> str:
    """``"input"`` (a DiffcoffeaError: the message says what to change), ``"read"`` (the
    file could not be read: met inside :func:`reading`, or a decompression or I/O error)
    or ``"error"`` (anything else: a bug, memory; never a bad file)."""
    kind = "error"
    for e in causes(err):
        if isinstance(e, DiffcoffeaError):
            return "input"
        name = f"{type(e).__module__}.{type(e).__qualname__}"
        if isinstance(e, (ReadError, OSError, EOFError)) or name in _READ_TYPES:
            kind = "read"
    return kind


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Mark the reading of a chunk's columns: an exception raised inside (other than a
    :class:`~analysis.errors.DiffcoffeaError`, which names its own cause) is a bad file,
    which ``skip_bad_files`` may skip; outside, only decompression and I/O errors are.
    A ``MemoryError`` is never a bad file."""
    try:
        yield
    except (DiffcoffeaError, MemoryError):
        raise
    except Exception as err:
        raise ReadError(describe(err)) from err


def same_file(events: Any) -> None:
    """Raise :class:`~analysis.errors.InputError` if the file a chunk was read from is not
    the one the driver opened (its ROOT UUID changed: replaced between passes); a
    replaced file would otherwise be read as corruption, or silently as other data."""
    meta = getattr(events, "metadata", None) or {}
    expected = str(meta.get("fileuuid") or "")
    attrs = getattr(events, "attrs", None) or {}
    # coffea's key of the chunk's buffers: "uuid/tree/range" (a tuple in some versions)
    key = getattr(attrs.get("@events_factory"), "_partition_key", None)
    if isinstance(key, tuple):
        key = key[0] if key else ""
    found = str(key or "").split("/")[0]
    if expected and found and found != expected:
        raise InputError(
            f"the file changed since it was opened (ROOT UUID {expected}, now {found}): "
            "it was replaced during the run; run again on files that stay in place"
        )


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


@dataclass(frozen=True)
class Fault:
    """One chunk (or whole file, ``start`` and ``stop`` ``None``) that could not be used.

    ``kind`` is ``"input"`` for a :class:`~analysis.errors.DiffcoffeaError` (a missing
    branch, a non-finite value, a cap: the message says what to change), ``"read"``
    when the file could not be read or decompressed (the only kind ``skip_bad_files``
    skips) and ``"error"`` for anything else (a bug, memory). ``detail`` is the
    worker's formatted traceback (shown with ``--debug`` only).
    """

    dataset: str
    file: str
    start: int | None
    stop: int | None
    reason: str
    kind: str = "read"
    detail: str = field(default="", compare=False, repr=False)

    @property
    def events(self) -> int | None:
        """Entries of the chunk (``None`` for a whole unreadable file)."""
        return None if self.start is None or self.stop is None else self.stop - self.start

    @property
    def where(self) -> str:
        """``file, entries a-b`` (or just the file), for messages."""
        if self.start is None:
            return self.file
        return f"{self.file}, entries {self.start}-{self.stop}"

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "file": self.file,
            "entries": None if self.start is None else [self.start, self.stop],
            "events": self.events,
            "reason": self.reason,
            "kind": self.kind,
        }


@dataclass(frozen=True)
class Dropped:
    """Objects and events of one chunk dropped for a non-finite value in ``branch``."""

    dataset: str
    file: str
    start: int | None
    stop: int | None
    branch: str
    objects: int
    events: int


class Faults:
    """Mergeable record of skipped chunks and dropped non-finite entries.

    ``a + b`` is the union: a chunk met twice (one more pass over the same chunks) is
    counted once, so the totals are per distinct chunk, in any merge order.
    """

    def __init__(self, skipped: Iterable[Fault] = (), dropped: Iterable[Dropped] = ()) -> None:
        self.skipped = {(f.dataset, f.file, f.start, f.stop): f for f in skipped}
        self.dropped = {(d.dataset, d.file, d.start, d.stop, d.branch): d for d in dropped}

    def __add__(self, other: Faults) -> Faults:
        if not isinstance(other, Faults):
            return NotImplemented
        out = Faults()
        out.skipped = {**self.skipped, **other.skipped}
        out.dropped = {**self.dropped, **other.dropped}
        return out

    def __bool__(self) -> bool:
        return bool(self.skipped or self.dropped)

    def skipped_list(self) -> list[Fault]:
        """Skipped chunks sorted by dataset, file and first entry."""
        return sorted(
            self.skipped.values(), key=lambda f: (f.dataset, f.file, f.start or 0, f.stop or 0)
        )

    def dropped_totals(self) -> dict[str, dict[str, Any]]:
        """``{dataset: {"objects", "events", "branches": {branch: objects or events}}}``."""
        out: dict[str, dict[str, Any]] = {}
        for d in sorted(self.dropped.values(), key=lambda d: (d.dataset, d.file, d.start or 0)):
            t = out.setdefault(d.dataset, {"objects": 0, "events": 0, "branches": {}})
            t["objects"] += d.objects
            t["events"] += d.events
            t["branches"][d.branch] = t["branches"].get(d.branch, 0) + d.objects + d.events
        return out


@dataclass
class _Chunk:
    dataset: str
    file: str
    start: int | None
    stop: int | None
    dropped: list[Dropped] = field(default_factory=list)


_ACTIVE: contextvars.ContextVar[_Chunk | None] = contextvars.ContextVar(
    "diffcoffea_chunk", default=None
)


def note_dropped(branch: str, *, objects: int = 0, events: int = 0) -> None:
    """Record, for the chunk being processed, entries dropped for non-finite ``branch``.

    Outside :func:`guarded` (e.g. reading columns directly in a test) this does nothing.
    """
    chunk = _ACTIVE.get()
    if chunk is not None and (objects or events):
        chunk.dropped.append(
            Dropped(chunk.dataset, chunk.file, chunk.start, chunk.stop, branch, objects, events)
        )


def _chunk_of(events: Any) -> _Chunk:
    meta = getattr(events, "metadata", None) or {}
    start, stop = meta.get("entrystart"), meta.get("entrystop")
    return _Chunk(
        dataset=str(meta.get("dataset", "")),
        file=str(meta.get("filename", "")),
        start=None if start is None else int(start),
        stop=None if stop is None else int(stop),
    )


#: Errors of the bytes themselves (a corrupt basket, a truncated record): reading them
#: again gives the same bytes, so they are a bad file, never retried.
_CORRUPT_TYPES = (*_READ_TYPES, "uproot.deserialization.DeserializationError")
_CORRUPT_MODULES = ("lz4", "zstandard", "cramjam", "uproot.compression")


def _corrupt(err: BaseException) -> bool:
    """Whether ``err`` (or its cause) is a decompression or deserialisation error."""
    return any(f"{type(e).__module__}.{type(e).__qualname__}" in _CORRUPT_TYPES
               or type(e).__module__.startswith(_CORRUPT_MODULES) for e in causes(err))


def _attempts(call: Callable[[], Any], chunk: _Chunk, retries: int) -> Any:
    """``call()``, tried ``1 + retries`` times while it fails with a transient reading
    error (I/O: a timeout, a dropped connection). Anything else would fail again: an
    input error, a bug, and corrupt bytes (:func:`_corrupt`: a bad file, not a
    transient fault) are not retried."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as err:
            if attempt == retries or _kind(err) != "read" or _corrupt(err):
                raise
            chunk.dropped.clear()  # counts of the failed attempt
    raise AssertionError("unreachable")


def _fault(chunk: _Chunk, err: BaseException) -> Fault:
    return Fault(
        chunk.dataset,
        chunk.file,
        chunk.start,
        chunk.stop,
        describe(err),
        kind=_kind(err),
        detail="".join(traceback.format_exception(err)),
    )


def fault_record(events: Any, err: BaseException) -> Fault | None:
    """The record of chunk ``events`` failing with ``err``, as :func:`guarded` makes it
    (for a chunk's computation that runs after ``process`` has returned:
    :mod:`analysis.data.overlap`); None when ``events.metadata`` has no ``entrystart``
    (not a chunk from a coffea executor: the caller raises ``err``)."""
    chunk = _chunk_of(events)
    return None if chunk.start is None else _fault(chunk, err)


def guarded(process: Callable) -> Callable:
    """Decorate a processor's ``process(self, events)`` so that it never raises.

    On success the output gains ``{FAULTS_KEY: Faults(dropped=...)}`` if non-finite
    entries were dropped; on any ``Exception`` the chunk's output is only
    ``{FAULTS_KEY: Faults([Fault(dataset, file, start, stop, reason)])}`` (none of
    the chunk is used). ``events.metadata["retries"]`` (set by the driver from
    ``executor.retries``) more attempts are made first, since coffea's own retries
    never see the exception. ``KeyboardInterrupt`` and ``SystemExit`` pass through, and so
    does every exception when ``events.metadata`` has no ``entrystart`` (not a chunk
    from a coffea executor: a direct call, e.g. in a test, raises as it would unwrapped).
    """

    @functools.wraps(process)
    def wrapper(self, events, *args, **kwargs):
        chunk = _chunk_of(events)
        meta = getattr(events, "metadata", None) or {}
        token = _ACTIVE.set(chunk)
        try:
            out = _attempts(
                lambda: process(self, events, *args, **kwargs), chunk, int(meta.get("retries") or 0)
            )
        except Exception as err:
            if chunk.start is None:
                raise  # not a coffea chunk (a direct call, e.g. in a test): nothing to record
            return {FAULTS_KEY: Faults([_fault(chunk, err)])}
        finally:
            _ACTIVE.reset(token)
        if chunk.dropped:
            out = dict(out)
            out[FAULTS_KEY] = Faults(dropped=chunk.dropped)
        return out

    return wrapper
