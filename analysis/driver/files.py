"""Datasets to files: every file opened once in the driver, before any chunk.

:func:`resolve_fileset` expands a config's datasets (globs, ``skhep:NAME`` entries of
the scikit-hep-testdata cache, generated datasets) into ``{dataset: {"files",
"entries"}}``, opening each file with :func:`open_file` so that an unreadable file, a
directory or a missing tree or branch is one line (:class:`BadFile`,
:class:`BranchError`), or a skipped :class:`~analysis.data.faults.Fault`. A file listed
twice (same path or same ROOT UUID and size) is read once, with a warning.
:class:`EventSchema` is the NanoAOD schema every pass reads with. Split out of
:mod:`analysis.driver.runner`, which re-exports every name.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from coffea.nanoevents import NanoAODSchema

from analysis.config.loader import Config
from analysis.data.branches import branch_problem
from analysis.data.faults import Fault, describe
from analysis.driver.missing import read_by
from analysis.errors import InputError
from analysis.limits import regular_file

__all__ = [
    "SKHEP_CACHE",
    "BadFile",
    "BranchError",
    "EventSchema",
    "as_written",
    "open_file",
    "resolve_fileset",
    "resolve_skhep",
]

SKHEP_CACHE = Path.home() / ".local" / "skhepdata"
_REMOTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")  # root://, https://, ... (not skhep:)


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
    except ImportError:  # a test dependency, not the core's
        raise InputError(
            f"{where}: skhep:{name} is not in {SKHEP_CACHE} and scikit-hep-testdata is not "
            "installed: pip install scikit-hep-testdata, or copy the file there"
        ) from None
    try:
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
    """A branch the analysis needs is missing or inconsistent (not a bad file): the
    message and the ``collection`` whose branch it is."""

    def __init__(self, message: str, collection: str = "") -> None:
        super().__init__(message)
        self.collection = collection


def open_file(
    path: str,
    treename: str,
    required: dict[str, tuple[str, ...]] | None = None,
    *,
    first: Callable[[Any], Any] | None = None,
) -> tuple[int, bytes]:
    """``(entries, uuid)`` of tree ``treename`` in ``path``; :class:`BadFile` if unreadable,
    :class:`BranchError` naming the branch if one of ``required`` is missing or not one
    value per object (:func:`analysis.data.branches.branch_problem`).

    Opens the file and its tree and reads the branch list and entry count, which is
    all coffea's preprocessing would do, so a truncated file, a corrupt header or
    tree, or a directory fails here, with one line, not in a worker. ``first``: called
    with the open tree if it has entries and no problem (the driver's first-event check,
    while the tree's branch list is read: it must not raise).
    """
    import uproot

    if not _REMOTE.match(path) and os.path.isdir(path):
        raise BadFile("is a directory, not a ROOT file")
    if "://" not in path:  # a local file: a FIFO or a device would block or never end
        try:
            regular_file(path, "data file", error=BadFile, max_bytes=sys.maxsize)
        except BadFile as err:
            raise BadFile(str(err).removeprefix(f"{path}: ")) from None
    try:
        with uproot.open(path) as f:
            if treename not in f:
                keys = ", ".join(sorted({k.split(";")[0] for k in f.keys()}))
                raise BadFile(f"no tree {treename!r} (keys: {keys or 'none'})")
            tree = f[treename]
            if not hasattr(tree, "num_entries"):
                raise BadFile(f"{treename!r} is a {type(tree).__name__}, not a TTree")
            tree.keys()
            problem, collection = None, ""
            for collection, fields in (required or {}).items():  # the first problem's
                problem = branch_problem(tree, {collection: fields})
                if problem is not None:
                    break
            if problem is None:
                if first is not None and tree.num_entries > 0:
                    first(tree)
                return int(tree.num_entries), f.file.fUUID
    except BadFile:
        raise
    except Exception as err:
        raise BadFile(f"not a readable ROOT file ({describe(err)})") from err
    raise BranchError(problem, collection)


def _looked(entry: str, path: str) -> str:
    """`` (looked for PATH)``: where a relative ``entry`` was looked for ("" where the
    entry is that path already: a line says it once)."""
    return "" if path == entry else f" (looked for {path})"


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
    first_event: Callable[[str, str, Any], bool] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{dataset: {"files": {path: treename}, "entries": {path: (n, uuid)}}}``, globs
    expanded and every file opened.

    Relative paths are relative to the config file's directory. Each file is opened
    with :func:`open_file`: an unreadable one is an :class:`InputError`, or, if a
    ``skipped`` list is given, appended to it as a :class:`~analysis.data.faults.Fault`
    and left out. ``first_event(dataset, path, tree)`` is called with each dataset's
    open trees that have entries, in order, until it returns ``True`` (the driver's
    first-event check, on the tree opened here rather than once more).
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
                where=f"{config.source}: datasets.{name}.generate",
            )
            paths.extend(str(p) for p in made)
        for entry in ds.files or []:
            if entry.startswith("skhep:"):
                paths.append(resolve_skhep(entry[len("skhep:") :], where))
                continue
            path = config.resolve_path(entry)
            if _REMOTE.match(path):  # root://, https://, ...: to uproot as written
                paths.append(path)
            elif any(c in path for c in "*?[") and not os.path.lexists(path):
                # a pattern; a file literally named so (tt[1].root) is read as written
                matches = sorted(glob.glob(path))
                if not matches:
                    raise InputError(f"{where}: no file matches {entry!r}{_looked(entry, path)}")
                paths.extend(matches)
            elif not os.path.exists(path):
                raise InputError(f"{where}: no such file {entry!r}{_looked(entry, path)}")
            else:
                paths.append(path)
        entries: dict[str, tuple[int, Any]] = {}
        first: dict[Any, str] = {}  # resolved path, and file UUID -> the path met first
        looked = [first_event is None]  # the first-event check is settled for this dataset

        def look(name: str, path: str, tree: Any, looked: list[bool] = looked) -> None:
            looked[0] = first_event(name, path, tree)  # type: ignore[misc]
        for path in paths:
            remote = bool(_REMOTE.match(path))
            real = path if remote else os.path.realpath(path)
            if real in first:
                _same_file(where, path, first[real], "the same file as")
                continue
            first[real] = path
            try:
                n, uuid = open_file(path, ds.treename, required,
                                    first=None if looked[0] else partial(look, name, path))
            except BranchError as err:
                raise InputError(f"{path}: {err}{read_by(config, err.collection, name)}"
                                 ) from None
            except BadFile as bad:
                if skipped is None:
                    raise InputError(as_written(f"{path}: {bad} (datasets.{name})")) from bad
                skipped.append(Fault(name, path, None, None, str(bad)))
                continue
            # (a damaged copy is not the file; a remote file's size is not asked for)
            copy = ("uuid", uuid, None if remote else os.path.getsize(path))
            if copy in first:
                _same_file(where, path, first[copy], "a copy (same ROOT file UUID and size) of")
                continue
            first[copy] = path
            entries[path] = (n, uuid)
        fileset[name] = {"files": {p: ds.treename for p in entries}, "entries": entries}
    return fileset
