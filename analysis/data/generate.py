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

Model, per event and per jet flavour (``hadronFlavour`` 5 = b, 4 = c, 0 = light):

* jet multiplicity: a Binomial/Poisson number of jets of each flavour (ttbar: about two
  true b-jets per event, ~7.5 jets in total; dy: ~4.7 jets, almost no b-jets);
* jet pT [GeV]: ``15 + Gamma(k, theta)``, so every jet passes the 15 GeV NanoAOD
  storage threshold; heavy-flavour and ttbar jets are harder;
* jet eta: a Gaussian truncated to ``|eta| < 4.7`` (b/c jets more central); phi [rad]
  uniform in ``[-pi, pi)``; jet mass [GeV]: ``pT * LogNormal(median 0.15)``;
* ``btagDeepFlavB`` (unitless, in ``[0, 1]``): a per-flavour mixture of Beta
  distributions (b-jets peaked near 1, light jets near 0, charm in between); jets
  outside the tracker (``|eta| >= 2.5``) get the light-jet distribution;
* ``MET_pt`` [GeV]: Gamma distributed; ``MET_phi`` [rad] uniform;
* ``genWeight`` (unitless): always positive, log-normal around one,
  ``exp(0.1 * z - 0.005)`` with ``z ~ N(0, 1)``, i.e. mean 1 and ~10 % spread.  There
  are no negative weights.
* ``run`` = 1, ``luminosityBlock`` = 1 + (global event index // 1000), ``event`` =
  1 + global event index (unique over all files of one dataset).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

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

#: Bump whenever the generated content changes, so that cached datasets are rewritten.
GENERATOR_VERSION = 2  # 2: PSWeight, LHEScaleWeight

#: Maximum |eta| of stored jets (unitless).
ETA_MAX = 4.7
#: |eta| (unitless) beyond which jets have no tracker information (light-like b-tag).
TRACKER_ETA = 2.5
#: Minimum stored jet pT [GeV], as in NanoAOD.
JET_PT_MIN = 15.0
#: Events per luminosity block (count).
EVENTS_PER_LUMIBLOCK = 1000
#: Events per TBasket (count) of the written TTree, so chunked readers need not
#: decompress a whole file for every chunk.
BASKET_EVENTS = 10_000

_FLAVOURS = np.array([0, 4, 5], dtype=np.int32)  # category index -> hadronFlavour

# b-tag model per category (light, c, b): with probability ``tail`` the value comes
# from Beta(tail_a, tail_b) instead of the core Beta(core_a, core_b).
_BTAG_CORE_A = np.array([1.0, 0.76, 1.0])
_BTAG_CORE_B = np.array([30.0, 3.14, 0.25])
_BTAG_TAIL = np.array([0.031, 0.0, 0.035])
_BTAG_TAIL_A = np.array([1.0, 1.0, 1.0])
_BTAG_TAIL_B = np.array([2.0, 2.0, 30.0])


@dataclass(frozen=True)
class _ProcessModel:
    """Per-process parameters; arrays are indexed by category (light, c, b).

    Attributes:
        process_id: integer identifying the process in the random seed.
        n_b_binom: number of Binomial trials for true b-jets (count) and its probability.
        mean_extra: Poisson means of extra jets per category (count per event).
        pt_shape, pt_scale: Gamma shape (unitless) and scale [GeV] of ``pT - 15 GeV``.
        eta_sigma: width of the Gaussian eta distribution (unitless) before truncation.
        met_shape, met_scale: Gamma shape (unitless) and scale [GeV] of ``MET_pt``.
    """

    process_id: int
    n_b_binom: tuple[int, float]
    mean_extra: tuple[float, float, float]
    pt_shape: tuple[float, float, float]
    pt_scale: tuple[float, float, float]
    eta_sigma: tuple[float, float, float]
    met_shape: float
    met_scale: float


_MODELS: dict[str, _ProcessModel] = {
    "ttbar": _ProcessModel(
        process_id=1,
        n_b_binom=(2, 0.93),
        mean_extra=(4.74, 0.75, 0.17),
        pt_shape=(0.95, 1.2, 2.0),
        pt_scale=(43.0, 44.8, 35.5),
        eta_sigma=(2.1, 1.35, 1.2),
        met_shape=2.2,
        met_scale=35.0,
    ),
    "dy": _ProcessModel(
        process_id=2,
        n_b_binom=(0, 0.0),
        mean_extra=(4.59, 0.10, 0.01),
        pt_shape=(0.7, 0.9, 1.2),
        pt_scale=(21.7, 26.7, 25.0),
        eta_sigma=(3.0, 1.6, 1.4),
        met_shape=1.8,
        met_scale=17.4,
    ),
}

#: Supported process names.
PROCESSES: tuple[str, ...] = tuple(_MODELS)


def _model(process: str) -> _ProcessModel:
    """Return the model of ``process`` or raise ``ValueError``."""
    try:
        return _MODELS[process]
    except KeyError:
        raise ValueError(f"unknown process {process!r}; expected one of {PROCESSES}") from None


def _rng(process: str, seed: int, file_index: int) -> np.random.Generator:
    """Random generator for one file, depending only on (seed, process, file index)."""
    if seed < 0 or file_index < 0:
        raise ValueError("seed and file_index must be non-negative integers")
    ss = np.random.SeedSequence([int(seed), _model(process).process_id, int(file_index)])
    return np.random.default_rng(ss)


def _truncated_normal(rng: np.random.Generator, sigma: np.ndarray, limit: float) -> np.ndarray:
    """Draw ``N(0, sigma)`` values (unitless), redrawing those with ``|x| >= limit``."""
    x = rng.normal(0.0, sigma)
    bad = np.flatnonzero(np.abs(x) >= limit)
    while bad.size:
        x[bad] = rng.normal(0.0, sigma[bad])
        bad = bad[np.abs(x[bad]) >= limit]
    return x


def _generate(
    process: str, n_events: int, *, seed: int, file_index: int = 0, first_event: int = 0,
    mean_jets: float | None = None,
) -> dict[str, np.ndarray | ak.Array]:
    """Generate ``n_events`` events of one file; see :func:`generate_events`.

    ``first_event`` is the global index (count, 0-based) of the first event, which
    fixes ``event`` and ``luminosityBlock``; it does not affect the random content.
    """
    n_events = int(n_events)
    if n_events < 0:
        raise ValueError("n_events must be non-negative")
    model = _model(process)
    rng = _rng(process, seed, file_index)

    # Jet multiplicities per category (light, c, b) [count per event].
    n_trials, p_b = model.n_b_binom
    n_b = rng.binomial(n_trials, p_b, n_events) + rng.poisson(model.mean_extra[2], n_events)
    n_c = rng.poisson(model.mean_extra[1], n_events)
    n_l = rng.poisson(model.mean_extra[0], n_events)
    if mean_jets is not None:  # Poisson(mean_jets) jets, the flavours filled b, c, light
        if not mean_jets >= 0:
            raise ValueError(f"mean_jets must be a non-negative number, got {mean_jets!r}")
        total = rng.poisson(float(mean_jets), n_events)
        n_b = np.minimum(n_b, total)
        n_c = np.minimum(n_c, total - n_b)
        n_l = total - n_b - n_c
    counts = n_b + n_c + n_l
    n_jets = int(counts.sum())

    # Flat per-jet arrays; within an event the b-jets come first, then c, then light.
    event_idx = np.repeat(np.arange(n_events), counts)
    starts = np.cumsum(counts) - counts
    pos = np.arange(n_jets) - starts[event_idx]
    cat = np.where(pos < n_b[event_idx], 2, np.where(pos < (n_b + n_c)[event_idx], 1, 0))

    pt = JET_PT_MIN + rng.gamma(np.asarray(model.pt_shape)[cat], np.asarray(model.pt_scale)[cat])
    eta = _truncated_normal(rng, np.asarray(model.eta_sigma)[cat], ETA_MAX)
    phi = rng.uniform(-np.pi, np.pi, n_jets)
    mass = pt * np.exp(rng.normal(np.log(0.15), 0.35, n_jets))

    # b-tag discriminator: per-flavour Beta mixtures; no tracking beyond |eta| = 2.5.
    tag_cat = np.where(np.abs(eta) < TRACKER_ETA, cat, 0)
    use_tail = rng.uniform(size=n_jets) < _BTAG_TAIL[tag_cat]
    btag = np.where(
        use_tail,
        rng.beta(_BTAG_TAIL_A[tag_cat], _BTAG_TAIL_B[tag_cat]),
        rng.beta(_BTAG_CORE_A[tag_cat], _BTAG_CORE_B[tag_cat]),
    )

    met_pt = rng.gamma(model.met_shape, model.met_scale, n_events)
    met_phi = rng.uniform(-np.pi, np.pi, n_events)
    gen_weight = np.exp(0.1 * rng.normal(size=n_events) - 0.005)
    # Variation weights, drawn last so that every other branch is as in version 1.
    ps, lhe = _variation_weights(rng, counts)

    # Sort jets by descending pT (as stored in float32) within each event.
    pt32 = pt.astype(np.float32)
    order = np.lexsort((-pt32, event_idx))
    jets = ak.zip(
        {
            "pt": pt32[order],
            "eta": eta.astype(np.float32)[order],
            "phi": phi.astype(np.float32)[order],
            "mass": mass.astype(np.float32)[order],
            "btagDeepFlavB": np.clip(btag, 0.0, 1.0).astype(np.float32)[order],
            "hadronFlavour": _FLAVOURS[cat][order],
        }
    )

    global_idx = np.arange(first_event, first_event + n_events, dtype=np.uint64)
    return {
        "Jet": ak.unflatten(jets, counts.astype(np.int64)),
        "MET_pt": met_pt.astype(np.float32),
        "MET_phi": met_phi.astype(np.float32),
        "genWeight": gen_weight.astype(np.float32),
        "PSWeight": ak.unflatten(ps.reshape(-1).astype(np.float32), np.full(n_events, 4)),
        "LHEScaleWeight": ak.unflatten(lhe.reshape(-1).astype(np.float32), np.full(n_events, 9)),
        "run": np.ones(n_events, dtype=np.uint32),
        "luminosityBlock": (1 + global_idx // EVENTS_PER_LUMIBLOCK).astype(np.uint32),
        "event": global_idx + np.uint64(1),
    }


def _variation_weights(rng: np.random.Generator, counts: np.ndarray):
    """``(PSWeight (E, 4), LHEScaleWeight (E, 9))``: NanoAOD's parton-shower weights
    (ISR up, FSR up, ISR down, FSR down) and renormalisation x factorisation scale
    weights (index ``3 muR + muF``, nominal at 4), relative to the nominal weight.
    Toy model: ISR/FSR up weights ``exp(s (n_jets - 5) + 0.02 z)`` with ``s`` = 0.03 /
    0.015 (more jets, more radiation: a shape effect), the down weights their
    inverses; scale weights ``exp(0.08 (a + b) + 0.01 z)`` for ``muR, muF`` in
    ``{0.5, 1, 2}`` with ``a, b = log2(mu)``."""
    n = len(counts)
    dn = counts.astype(np.float64) - 5.0
    isr = np.exp(0.03 * dn + 0.02 * rng.normal(size=n))
    fsr = np.exp(0.015 * dn + 0.02 * rng.normal(size=n))
    ps = np.stack([isr, fsr, 1.0 / isr, 1.0 / fsr], axis=1)
    a = np.log2(np.array([0.5, 1.0, 2.0]))
    ab = (a[:, None] + a[None, :]).reshape(-1)
    lhe = np.exp(0.08 * ab[None, :] * (1.0 + 0.02 * dn[:, None])
                 + 0.01 * rng.normal(size=(n, 9)) * (ab[None, :] != 0))
    return ps, lhe


def generate_events(process: str, n_events: int, *, seed: int,
                    mean_jets: float | None = None) -> dict[str, np.ndarray | ak.Array]:
    """Generate ``n_events`` toy NanoAOD events of ``process`` ("ttbar" or "dy").

    The result is identical to the content of file 0 of a one-file dataset written by
    :func:`write_dataset` with the same arguments. ``mean_jets``: a Poisson number of
    jets per event of this mean (b, then c, then light jets of the process's own
    draws fill it), instead of the process's multiplicities.

    Returns:
        A dict with ``"Jet"`` (jagged awkward records with float32 ``pt`` [GeV], ``eta``,
        ``phi`` [rad], ``mass`` [GeV], ``btagDeepFlavB`` [0-1], and int32
        ``hadronFlavour``, sorted by descending pT), float32 ``MET_pt`` [GeV],
        ``MET_phi`` [rad], ``genWeight`` (positive, mean ~1), uint32 ``run`` and
        ``luminosityBlock`` and uint64 ``event`` (1-based, consecutive).
    """
    return _generate(process, n_events, seed=seed, file_index=0, first_event=0,
                     mean_jets=mean_jets)


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
