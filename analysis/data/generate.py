"""Deterministic, seeded generator of NanoAOD-layout ROOT files.

The files are toy Monte Carlo for demos and large tests: they carry the NanoAOD
branch layout (``nJet`` counter, ``Jet_pt``, ``Jet_eta``, ``Jet_phi``, ``Jet_mass``,
``Jet_btagDeepFlavB``, ``Jet_hadronFlavour``, ``MET_pt``, ``MET_phi``, ``genWeight``,
``PSWeight`` (4 per event), ``LHEScaleWeight`` (9 per event), ``run``, ``luminosityBlock``, ``event``) with NanoAOD dtypes, so that
``coffea.nanoevents.NanoAODSchema`` and ``coffea.processor.Runner`` read them like real
NanoAOD.  No detector or matrix-element physics is simulated; per-flavour jet
distributions are tuned so that the mean jet pT, the mean number of jets per event and
the fraction of jets with ``btagDeepFlavB > 0.3`` are close (within 15 %) to real files:

* ``ttbar``: ``nano_tt_v12.root`` (CMS NanoAOD v12 ttbar MC).  The 2015 Open Data ttbar
  file is not used as reference: its ``Jet_btagDeepFlavB`` is a ``-3000`` placeholder
  for every jet and its jets are much softer and fewer (2.7 per event).
* ``dy``: ``nano_dy.root`` (Drell-Yan MC).

The model of the events is :mod:`analysis.data.eventmodel`'s; this module writes it to files.

Jets are stored sorted by descending pT.  The files have no lepton/photon collections,
so ``NanoAODSchema`` warns about missing cross-reference indices (``Muon_jetIdx`` ...);
set ``NanoAODSchema.warn_missing_crossrefs = False`` to silence that.  All random numbers of file ``i`` come from
``numpy.random.default_rng(SeedSequence([seed, process_id, i]))``, so the content of
each file depends only on (process, seed, file index, number of events in the file)
plus its position in the dataset (which fixes its event numbers).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

from analysis.data.eventmodel import (
    GENERATOR_VERSION,
    PROCESSES,
    _generate,
    _model,
    generate_events,
)
from analysis.errors import InputError
from analysis.limits import (
    GEN_BYTES_PER_EVENT,
    MAX_GENERATED_EVENTS,
    MAX_GENERATED_FILES,
    MAX_SEED,
    check_bytes,
)

__all__ = [
    "GenerationError",
    "check_generation",
    "GENERATOR_VERSION",
    "PROCESSES",
    "ensure_dataset",
    "file_paths",
    "generate_events",
    "manifest_path",
    "split_events",
    "write_dataset",
]


#: Events per TBasket (count) of the written TTree, so chunked readers need not
#: decompress a whole file for every chunk.
BASKET_EVENTS = 10_000


def split_events(n_events: int, n_files: int) -> list[int]:
    """Split ``n_events`` (count) evenly over ``n_files``; earlier files get the remainder."""
    if n_files < 1:
        raise ValueError("n_files must be >= 1")
    if n_events < 0:
        raise ValueError("n_events must be non-negative")
    base, extra = divmod(int(n_events), int(n_files))
    return [base + (i < extra) for i in range(n_files)]


def file_paths(outdir: str | os.PathLike[str], process: str, n_files: int) -> list[Path]:
    """Paths ``outdir/{process}_{i:03d}.root`` of a dataset's files."""
    _model(process)
    return [Path(outdir) / f"{process}_{i:03d}.root" for i in range(n_files)]


#: Largest manifest read (a few hundred bytes are written).
MAX_MANIFEST_BYTES = 1 << 16


def manifest_path(outdir: str | os.PathLike[str], process: str) -> Path:
    """Path of the JSON manifest written by :func:`ensure_dataset` for ``process``."""
    return Path(outdir) / f"{process}_manifest.json"


def _file_uuid(process: str, seed: int, file_index: int) -> uuid.UUID:
    """Deterministic ROOT file UUID derived from the generator inputs."""
    key = f"diffcoffea.generate/{GENERATOR_VERSION}/{process}/{seed}/{file_index}"
    return uuid.UUID(bytes=hashlib.sha256(key.encode()).digest()[:16], version=4)


def _tmp_name(path: Path) -> Path:
    """Unique temporary sibling of ``path`` (same directory, so ``os.replace`` is atomic)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def _write_root(
    path: Path, arrays: Mapping[str, np.ndarray | ak.Array], file_uuid: uuid.UUID
) -> None:
    """Write ``arrays`` as TTree ``Events`` to ``path`` atomically (temp file + rename).

    A TTree is created explicitly (``mktree``): since uproot 5.7 plain assignment writes
    an RNTuple.  Jagged record ``Jet`` becomes ``nJet`` (int32) plus ``Jet_<field>``.
    """
    n_events = len(arrays["event"])
    starts = list(range(0, n_events, BASKET_EVENTS)) or [0]
    tmp = _tmp_name(path)
    try:
        with uproot.recreate(tmp, uuid_function=lambda: file_uuid) as fout:
            tree = None
            for start in starts:
                chunk = {k: v[start : start + BASKET_EVENTS] for k, v in arrays.items()}
                if tree is None:
                    tree = fout.mktree("Events", chunk, initial_basket_capacity=len(starts) + 1)
                else:
                    tree.extend(chunk)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_dataset(
    outdir: str | os.PathLike[str],
    *,
    process: str,
    n_events: int,
    n_files: int = 1,
    seed: int = 0,
    where: str = "make-dataset",
    mean_jets: float | None = None,
) -> list[Path]:
    """Write ``n_events`` events of ``process`` split evenly over ``n_files`` ROOT files
    (``mean_jets``: as :func:`generate_events`).

    Sizes, seed and the output path are checked first (:func:`check_generation`); a
    directory that cannot be created or a file that cannot be written is one
    :class:`~analysis.errors.InputError` line naming ``where`` and the path.

    Files are named ``{process}_{i:03d}.root`` in ``outdir`` (created if needed) and
    hold an ``Events`` TTree in NanoAOD layout.  Event numbers are unique across the
    files.  Each file is written to a temporary name and renamed into place.

    Returns:
        The file paths, in file-index order.
    """
    outdir = Path(outdir)
    check_generation(n_events, n_files, seed, where=where)
    _make_dir(outdir, where)
    paths = file_paths(outdir, process, n_files)
    first = 0
    for i, (path, n) in enumerate(zip(paths, split_events(n_events, n_files), strict=True)):
        arrays = _generate(process, n, seed=seed, file_index=i, first_event=first,
                           mean_jets=mean_jets)
        try:
            _write_root(path, arrays, _file_uuid(process, seed, i))
        except OSError as err:
            raise InputError(f"{where}: cannot write {path}: {err.strerror or err}") from None
        first += n
    return paths


class GenerationError(InputError, ValueError):
    """A size or seed the generator cannot take: one line (exit 2 from the command
    line), and the ``ValueError`` a Python caller of :func:`write_dataset` expects."""


def _make_dir(outdir: Path, where: str) -> None:
    """``outdir`` created if needed, or one :class:`InputError` line naming it."""
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"{where}: {outdir} exists and is not a directory") from None
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err)
        raise InputError(f"{where}: cannot create {outdir}: {reason}") from None


def check_generation(n_events: Any, n_files: Any, seed: Any, *, where: str) -> None:
    """Refuse, in one line naming ``where``, sizes and seeds the generator cannot take:
    events in ``0..MAX_GENERATED_EVENTS``, files in ``1..MAX_GENERATED_FILES``, a seed
    in ``0..MAX_SEED``, and one file's events within the memory limit
    (:mod:`analysis.limits`)."""
    for name, v, lo, hi in (("events", n_events, 0, MAX_GENERATED_EVENTS),
                            ("files", n_files, 1, MAX_GENERATED_FILES),
                            ("seed", seed, 0, MAX_SEED)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise GenerationError(f"{where}: {name} = {v!r}; expected an integer in "
                                  f"{lo}..{hi}")
    per_file = -(-int(n_events) // int(n_files))
    check_bytes(f"{where}: events", float(per_file) * GEN_BYTES_PER_EVENT,
                f"{per_file} generated events per file")


def _manifest(process: str, n_events: int, n_files: int, seed: int) -> dict[str, object]:
    """Manifest content identifying a generated dataset."""
    return {
        "generator": "diffcoffea.analysis.data.generate",
        "version": GENERATOR_VERSION,
        "process": process,
        "n_events": int(n_events),
        "n_files": int(n_files),
        "seed": int(seed),
        "files": [p.name for p in file_paths(".", process, n_files)],
    }


def ensure_dataset(
    outdir: str | os.PathLike[str],
    *,
    process: str,
    n_events: int,
    n_files: int = 1,
    seed: int = 0,
    where: str = "generate",
) -> list[Path]:
    """Return the files of a dataset, writing them only if missing or out of date.

    The dataset is (re)written with :func:`write_dataset` unless all files exist and the
    manifest ``outdir/{process}_manifest.json`` records the same process, n_events,
    n_files, seed and generator version.  On rewrite, stale ``{process}_NNN.root`` files
    with index ``>= n_files`` are removed, and the manifest is written last (atomically),
    so an interrupted run is redone on the next call.

    Returns:
        The file paths, in file-index order.
    """
    outdir = Path(outdir)
    check_generation(n_events, n_files, seed, where=where)
    wanted = _manifest(process, n_events, n_files, seed)
    paths = file_paths(outdir, process, n_files)
    mpath = manifest_path(outdir, process)
    from analysis.jsonsafe import read_optional_json

    # a FIFO or a link to /dev/zero: one line; missing or damaged: written again
    current = read_optional_json(mpath, "generated dataset's manifest", error=InputError,
                                 max_bytes=MAX_MANIFEST_BYTES)
    if current == wanted and all(p.is_file() for p in paths):
        return paths

    _make_dir(outdir, where)
    try:
        mpath.unlink(missing_ok=True)
    except OSError as err:
        raise InputError(f"{where}: cannot write {mpath}: {err.strerror or err}") from None
    paths = write_dataset(outdir, process=process, n_events=n_events, n_files=n_files, seed=seed,
                          where=where)
    keep = {p.name for p in paths}
    for stale in outdir.glob(f"{process}_[0-9][0-9][0-9].root"):
        if stale.name not in keep:
            stale.unlink(missing_ok=True)
    tmp = _tmp_name(mpath)
    try:
        tmp.write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, mpath)
    except OSError as err:
        raise InputError(f"{where}: cannot write {mpath}: {err.strerror or err}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return paths
