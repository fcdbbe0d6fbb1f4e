"""numba kernels of the one-set recursion (:func:`analysis.select._recursions.dense_weights`), as XLA FFI
custom calls on CPU.

Each handler is a numba ``cfunc`` with XLA's typed FFI signature
(``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``, ``xla/ffi/api/c_api.h``): it reads its
buffers from the call frame (data pointer, rank, dimensions), runs a compiled loop over
the events and returns NULL (success). No Python runs while XLA calls it (not a
``jax.pure_callback``), so a program that calls it is a plain executable: JAX's
persistent compilation cache keeps it (it refuses host callbacks). A handler is made
per kernel, count of states and lane width, the first time a program that calls it is
lowered for the CPU (:func:`target`: compiled, or loaded from numba's cache without
numba's registries, :func:`analysis._compat.numba.cached_cfunc`, and registered by its
own name): a pass compiles only what it calls (with an empty numba cache, an own
processor's first gradient pass compiled every variant up front: 16 copies of the walk,
~60 s of CPU; now two or three).

The loops are those of :func:`analysis.select._recursions.dense_weights` per event, over
its own objects only (no padded slots): forward distributions ``F_j``, value functions
``G_j``, ``w_j = q_j sum_k F_j(k) G_{j+1}(min(k + 1, cap))``, ``P = G_0(0)``. Values
and tangents are the one-set walk the YAML engine runs too
(:func:`analysis.select.chainwalk.walk_events`): the tangent kernel carries ``B`` lanes
(``jax.jacfwd``'s parameters) in blocks of ``QUAD - 1`` or ``LANES - 1``; the cotangent
kernel runs the adjoint recursions (reverse mode) for ``B`` lanes on the walk's forward
steps. The handlers read their buffers from XLA's call frame with
:mod:`analysis.select.ffiframe`; their compiled code inlines ``chainwalk.py`` and
links ``ffiframe.py``: those files key its cache too (:data:`DEPENDS`).
"""

from __future__ import annotations

import ctypes
import threading
import warnings
from typing import Any

import numba as nb
import numpy as np

from analysis._compat.numba import cached_cfunc
from analysis.select import chainwalk, ffiframe
from analysis.select.chainwalk import walk_events
from analysis.select.ffiframe import HANDLER_SIG, address, executing, f64, i64, ptr, word
from analysis.select.lanes.arith import LANES, QUAD
from analysis.select.lanes.buffers import lanes_of
from analysis.select.lanes.policy import POLICY as _POLICY
from analysis.select.lanes.policy import njit
from analysis.select.lanes.steps import chain_forward as forward
from analysis.select.softprograms import FFI_TARGETS

__all__: list[str] = []

#: FFI target names' stems (one per kernel; :func:`variant` adds the specialisation).
PRIMAL, TANGENT, COTANGENT = FFI_TARGETS
#: Whether JAX can register FFI targets (:func:`register`; empty: not asked yet).
_REGISTERED: list[bool] = []
#: The handlers made in this process, by FFI target name (:func:`target`).
HANDLERS: dict[str, Any] = {}
_LOCK = threading.Lock()
#: Counts of states that a handler takes as a compile-time constant (every state stepped,
#: loops LLVM unrolls); other counts share one handler per kernel (and lane width).
CONSTANT_STATES = (2, 3, 4)

#: The source files a handler's machine code depends on beyond this one (which numba keys):
#: it inlines :mod:`analysis.select.chainwalk` (the walk, its lanes) and links the call
#: frame's readers (:mod:`analysis.select.ffiframe`); a change to any recompiles it.
DEPENDS = (*chainwalk.SOURCES, ffiframe.__file__)


def _compiled(fn):  # noqa: ANN001, ANN202
    """An FFI handler, compiled (or loaded) now, keyed by :data:`DEPENDS`, compiled with
    LLVM's SLP vectorizer on (numba leaves it off): it packs the walk's lane arithmetic
    into vector operations (measured, 50k events: tangent of one lane 22 -> 7 ms); the
    setting is part of the cache's key (:class:`analysis._compat.numba.FastLoadCache`)."""
    old = nb.config.SLP_VECTORIZE
    nb.config.SLP_VECTORIZE = 1
    try:
        with warnings.catch_warnings():
            # numba's pedantic IR check notes the loop variables of the inlined walk as
            # "not in scope": the code is right (tests/test_soft_fast_kernels.py checks
            # each count of states against JAX)
            warnings.filterwarnings("ignore", message=r"variable '.*' is not in scope")
            return cached_cfunc(HANDLER_SIG, depends=DEPENDS)(fn)
    finally:
        nb.config.SLP_VECTORIZE = old


@njit
def _longest(off):
    """The largest number of objects of an event (offsets ``off``); compiled once and
    called, not inlined, as the call frame's readers (:mod:`analysis.select.ffiframe`)."""
    m = 0
    for e in range(off.shape[0] - 1):
        m = max(m, off[e + 1] - off[e])
    return m


@nb.njit(inline="always", **_POLICY)
def _walk(src, off, f, df, pe, ow, top, full):
    """:func:`analysis.select.chainwalk.walk_events` over every event on the states ``0 ..
    top``; ``full``: every state stepped (``top`` a constant of the handler: loops LLVM
    unrolls; values per 50k events 6.6 -> 3.2 ms, cotangent 13 -> 9 ms), else the
    reachable states (any ``top``)."""
    E, M = off.shape[0] - 1, max(_longest(off), 1)
    walk_events(src, off, 0, E, f, df, True, M, pe, ow, top, full)


@nb.njit(inline="always", **_POLICY)
def _primal(q, f, off, w, P, top, full):
    """``w`` (``(N,)``, zero beyond ``off[-1]``) and ``P`` (``(E,)``) of the pass
    probabilities ``q`` and the pass table ``f`` (values only); ``top, full``: as
    :func:`_walk` (``top = f.shape[0] - 1``)."""
    w[:] = 0.0
    _walk((q,), off, f, 0.0, P.reshape((P.shape[0], 1)), w.reshape((w.shape[0], 1)), top,
          full)


@nb.njit(inline="always", **_POLICY)
def _blocks(q, f, off, dq, df, dw, dP, w, P, dfl, top, full):
    """:func:`_tangent` with the pass table's tangent lanes ``dfl`` (zeros; in a 1-tuple:
    four lanes), in blocks of its width - 1."""
    a = lanes_of(dfl)
    width = a.shape[1]
    n_b, n_ev, n_obj = dq.shape[0], off.shape[0] - 1, off[-1]
    ow = np.empty((n_obj, width))
    pe = np.empty((n_ev, width))
    for b0 in range(0, max(n_b, 1), width - 1):
        nb = min(width - 1, n_b - b0)
        for k in range(f.shape[0]):
            for r in range(width - 1):
                a[k, 1 + r] = df[b0 + r if df.shape[0] > 1 else 0, k] if r < nb else 0.0
        _walk((q, dq, b0), off, f, dfl, pe, ow, top, full)
        for r in range(nb):
            dw[b0 + r, :n_obj] = ow[:, 1 + r]
            dP[b0 + r, :] = pe[:, 1 + r]
        if b0 == 0 and (w.shape[0] > 0 or P.shape[0] > 0):
            w[:n_obj] = ow[:, 0]
            P[:] = pe[:, 0]


@nb.njit(inline="always", **_POLICY)
def _tangent(q, f, off, dq, df, dw, dP, w, P, top, full, dfl):
    """Forward-mode tangents of ``(w, P)`` along ``(dq[b], df[b])`` (``df``: ``(B, S)``,
    or ``(1, S)`` for every lane) for every lane ``b``, in blocks of the lanes of ``dfl``
    (zeros ``(S, LANES)``, or ``(S, QUAD)`` in a 1-tuple: half the work, where ``B <= QUAD
    - 1``) - 1; and ``(w, P)`` themselves where ``w`` or ``P`` is not empty (lane 0: the
    values of :func:`_primal`, bit for bit); ``top, full``: as :func:`_walk`."""
    dw[:, :] = 0.0
    if w.shape[0] > 0 or P.shape[0] > 0:
        w[:] = 0.0
    _blocks(q, f, off, dq, df, dw, dP, w, P, dfl, top, full)


@nb.njit(inline="always", **_POLICY)
def _distributions(q, a, m, top, F):
    """``F_0 .. F_m`` of the event's objects ``q[a:a + m]`` on every state (zeros where
    not reached)."""
    for k in range(top + 1):
        F[0, k] = 0.0
    F[0, 0] = 1.0
    for j in range(m):
        forward(F[j], F[j + 1], j, top, q[a + j], 0.0, True)


@nb.njit(inline="always", **_POLICY)
def _cotangent(q, f, off, cw, cP, qb, fb, S):
    """Reverse mode: ``(qb[b], fb[b])`` = the cotangents ``(cw[b], cP[b])`` pulled back
    through ``(w, P)`` (the transpose of :func:`_tangent`), ``fb`` summed over events;
    ``S = f.shape[0]`` states (a constant of the handler for ``S <= 4``: LLVM unrolls the
    loops over the states, 25.7 -> 7.1 ms on 50k events of generated ttbar at ``S = 3``)."""
    cap = S - 1
    B = cw.shape[0]
    qb[:, :] = 0.0
    fb[:, :] = 0.0
    M = _longest(off)
    F = np.empty((M + 1, S))
    Gs = np.empty((M + 1, S))
    inner = np.empty(M)
    Gb = np.empty(S)
    Gbn = np.empty(S)
    for e in range(off.shape[0] - 1):
        a = off[e]
        m = off[e + 1] - a
        _distributions(q, a, m, cap, F)
        Gs[m, :] = f
        for j in range(m - 1, -1, -1):
            p = q[a + j]
            s = 0.0
            for k in range(S):
                s += F[j, k] * Gs[j + 1, min(k + 1, cap)]
            inner[j] = s
            for k in range(S):
                Gs[j, k] = (1.0 - p) * Gs[j + 1, k] + p * Gs[j + 1, min(k + 1, cap)]
        for b in range(B):
            # adjoints of the value functions, G_0 -> G_m (P = G_0(0); w_j reads G_{j+1})
            Gb[:] = 0.0
            Gb[0] = cP[b, e]
            for j in range(m):
                p = q[a + j]
                c = cw[b, a + j] * p
                acc = 0.0
                Gbn[:] = 0.0
                for k in range(S):
                    u = min(k + 1, cap)
                    acc += Gb[k] * (Gs[j + 1, u] - Gs[j + 1, k])
                    Gbn[k] += (1.0 - p) * Gb[k]
                    Gbn[u] += p * Gb[k] + c * F[j, k]
                qb[b, a + j] = acc + cw[b, a + j] * inner[j]
                Gb[:] = Gbn
            for k in range(S):
                fb[b, k] += Gb[k]
            # adjoints of the forward distributions, F_m (unused: 0) -> F_0
            Gb[:] = 0.0
            for j in range(m - 1, -1, -1):
                p = q[a + j]
                c = cw[b, a + j] * p
                acc = 0.0
                for k in range(S):
                    u = min(k + 1, cap)
                    acc += F[j, k] * (Gb[u] - Gb[k])
                    Gbn[k] = (1.0 - p) * Gb[k] + p * Gb[u] + c * Gs[j + 1, u]
                qb[b, a + j] += acc
                Gb[:] = Gbn


# One handler per kernel, count of states (a constant for CONSTANT_STATES, else any: top
# -1) and, for the tangent kernel, lane width; each made on first use (:func:`target`).
# Arguments: ``q, f, offsets`` then (lanes) two inputs; two results. ``top`` and ``full``
# are constants of the closure: numba prunes the branches on them before typing (one
# walk compiled per handler) and LLVM sees the state count as a number.
def _primal_handler(top: int, width: int):  # noqa: ARG001  (one width: values)
    full = top >= 0

    def handler(frame):  # noqa: ANN001, ANN202
        fa = address(frame)
        if executing(fa):
            f = f64(fa, 9, 1, False)[0]
            _primal(f64(fa, 9, 0, False)[0], f, i64(fa, 9, 2), f64(fa, 14, 0, False)[0],
                    f64(fa, 14, 1, False)[0], top if full else f.shape[0] - 1, full)
        return ptr(0)

    return handler


def _tangent_handler(top: int, width: int):
    full = top >= 0
    wide = width == LANES

    def handler(frame):  # noqa: ANN001, ANN202
        fa = address(frame)
        if executing(fa):
            dw, dP = f64(fa, 14, 0, True), f64(fa, 14, 1, True)
            if word(fa, 12) == 4:  # XLA_FFI_Rets.size: (dw, dP, w, P), the JVP in one call
                w, P = f64(fa, 14, 2, False)[0], f64(fa, 14, 3, False)[0]
            else:
                w, P = dw[0, :0], dP[0, :0]
            q, f, off = f64(fa, 9, 0, False)[0], f64(fa, 9, 1, False)[0], i64(fa, 9, 2)
            dq, df = f64(fa, 9, 3, True), f64(fa, 9, 4, True)
            t = top if full else f.shape[0] - 1
            if wide:
                _tangent(q, f, off, dq, df, dw, dP, w, P, t, full,
                         np.zeros((f.shape[0], LANES)))
            else:
                _tangent(q, f, off, dq, df, dw, dP, w, P, t, full,
                         (np.zeros((f.shape[0], QUAD)),))
        return ptr(0)

    return handler


def _cotangent_handler(top: int, width: int):  # noqa: ARG001  (lanes in a loop)
    full = top >= 0

    def handler(frame):  # noqa: ANN001, ANN202
        fa = address(frame)
        if executing(fa):
            f = f64(fa, 9, 1, False)[0]
            _cotangent(f64(fa, 9, 0, False)[0], f, i64(fa, 9, 2),
                       f64(fa, 9, 3, True), f64(fa, 9, 4, True),
                       f64(fa, 14, 0, True), f64(fa, 14, 1, True),
                       top + 1 if full else f.shape[0])
        return ptr(0)

    return handler


#: kind -> (FFI target name's stem, the handler's maker).
_KINDS = {"primal": (PRIMAL, _primal_handler), "tangent": (TANGENT, _tangent_handler),
          "cotangent": (COTANGENT, _cotangent_handler)}


def variant(kind: str, states: int, lanes: int = 0) -> tuple[str, int, int]:
    """``(FFI target name, top, width)`` of ``kind``'s handler for ``states`` count states
    and ``lanes`` tangent or cotangent lanes: ``top = states - 1`` a constant for
    :data:`CONSTANT_STATES` (else -1: any); the tangent kernel's lanes in blocks of
    ``QUAD - 1`` where ``lanes <= QUAD - 1``, else of ``LANES - 1`` (``width`` 0 for the
    others)."""
    top = states - 1 if states in CONSTANT_STATES else -1
    width = (QUAD if lanes <= QUAD - 1 else LANES) if kind == "tangent" else 0
    name = f"{_KINDS[kind][0]}_s{states if top >= 0 else 'n'}"
    return (f"{name}_l{width}" if width else name), top, width


def target(kind: str, states: int, lanes: int = 0) -> str:
    """The FFI target of ``kind``'s handler (``"primal"``, ``"tangent"``, ``"cotangent"``)
    for ``states`` count states and ``lanes`` lanes (:func:`variant`), compiled (or loaded
    from numba's cache) and registered with XLA on its first use in this process: a pass
    compiles only the handlers it calls (its lowering for the CPU asks for them).

    Parameters
    ----------
    kind : str
        The kernel.
    states : int
        The pass table's length.
    lanes : int
        Tangent (cotangent) lanes of the call.

    Returns
    -------
    str
        The target's name, for ``jax.ffi.ffi_call``.
    """
    name, top, width = variant(kind, states, lanes)
    with _LOCK:
        if name not in HANDLERS:
            import jax.ffi

            handler = _compiled(_KINDS[kind][1](top, width))
            jax.ffi.register_ffi_target(name, _capsule(handler.address), platform="cpu")
            HANDLERS[name] = handler
    return name


def _capsule(address: int) -> object:
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(address, None, None)


def register() -> bool:
    """Whether XLA FFI targets can be registered here (JAX's ``jax.ffi``); False: the
    callers run the JAX recursion. The handlers themselves are made on first use
    (:func:`target`).

    Returns
    -------
    bool
        The kernels can run.
    """
    if not _REGISTERED:
        try:
            import jax.ffi

            ok = callable(jax.ffi.register_ffi_target) and callable(jax.ffi.ffi_call)
        except Exception:  # noqa: BLE001  (an older or newer JAX without this FFI)
            ok = False
        _REGISTERED.append(ok)
    return _REGISTERED[0]
