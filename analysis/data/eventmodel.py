"""The toy NanoAOD events of :mod:`analysis.data.generate`: per process, per jet flavour.

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

All random numbers of file ``i`` come from
``numpy.random.default_rng(SeedSequence([seed, process_id, i]))``, so the content of
each file depends only on (process, seed, file index, number of events in the file)
plus its position in the dataset (which fixes its event numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import awkward as ak
import numpy as np

__all__ = ["GENERATOR_VERSION", "PROCESSES", "generate_events"]

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


