"""Which backend computes a pass, and on which device: the one place that chooses.

A :class:`Backend` is the user's choice (YAML ``engine: {backend, device}``,
``--backend`` on the command line, ``backend=`` / ``device=`` keywords in Python); its
:meth:`Backend.chooser` composes the backends (:mod:`analysis.pipeline.engine`: the
protocol; :mod:`analysis.pipeline.backends`: one folder each) into one :class:`Fallback`:

- ``backend="auto"`` (default): the numba backend where its rules serve the plan and the
  request (:mod:`analysis.pipeline.backends.numba.rules`), the JAX backend (the
  reference) for the rest;
- ``backend="numba"``: the numba backend only, for every pass (states, grids, entries
  for plots, selected weights, bootstrap replicas, pullbacks, yield gradients): a
  plan or a request its rules do not serve is an error naming the node, raised when
  the pass is prepared, before any chunk is read;
- ``backend="jax"``: the JAX backend for every pass, on ``device``;
- ``device="cpu"`` (default) or ``"gpu"``: where the JAX backend runs. The numba
  kernels run on the CPU only, so ``device="gpu"`` runs the JAX backend (``auto``
  means ``jax`` there) and ``numba`` with ``gpu`` is refused.

Both backends compute the same states and derivatives (tests compare them to 1e-12).
Support is decided once per pass (:meth:`Fallback.prepare`), and ``--debug`` logs once
which backend runs a pass and why. A pass that ``auto`` sends to the JAX reference on
the CPU is said once per run at the default level (a
:class:`~analysis.errors.DiffcoffeaWarning`: the pass, the numba backend's reason, and
how to silence it by asking for ``jax``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from analysis.errors import DiffcoffeaWarning
from analysis.pipeline.backends.jax.backend import JaxBackend, jax_devices
from analysis.pipeline.backends.numba.backend import NumbaBackend
from analysis.pipeline.engine import Engine, Prepared
from analysis.pipeline.layout import ChunkColumns, Padding
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request
from analysis.pipeline.results import DatasetState

__all__ = [
    "BACKENDS", "DEVICES", "ENGINES", "ORDER", "Backend", "Fallback", "chunk_state", "devices",
    "run_once",
]

_log = logging.getLogger("analysis.pipeline.backend")

BACKENDS = ("auto", "numba", "jax")
DEVICES = ("cpu", "gpu")


def devices(kind: str) -> list:
    """The JAX devices of ``kind`` (``"cpu"``, ``"gpu"``) this process sees; empty where
    JAX has no backend for it (a CPU-only JAX build asked for a GPU)."""
    return jax_devices(kind)


def _numba(choice: Backend) -> Engine:
    return NumbaBackend(fused=choice.fused, value_loop=choice.value_loop,
                        scores_on_numba=choice.scores_on_numba,
                        numba_reverse=choice.numba_reverse)


def _jax(choice: Backend) -> Engine:
    return JaxBackend(choice.device, padding=choice.padding, tangent_block=choice.tangent_block)


#: The registered backends: name -> how a choice (:class:`Backend`: device, options)
#: builds it. A backend is one folder under ``analysis/pipeline/backends/`` implementing
#: :class:`analysis.pipeline.engine.Engine`, plus its entry here and in :data:`ORDER`.
ENGINES: dict[str, Callable[[Backend], Engine]] = {
    "numba": _numba,
    "jax": _jax,
}
#: Per choice (:attr:`Backend.engine`), the backends a pass tries, in order.
ORDER: dict[str, tuple[str, ...]] = {
    "auto": ("numba", "jax"),
    "numba": ("numba",),  # strict: a refusal is the error
    "jax": ("jax",),
}

#: (plan id, reason) pairs already logged: ``--debug`` says each once per run
_LOGGED: set[tuple[int, str, str]] = set()


@dataclass(frozen=True)
class Fallback:
    """Backends in order of preference: a pass runs on the first that supports it.

    ``strict`` (``backend: numba``): a pass of any kind the first does not serve is an
    error (``ValueError``, one line with the reason and what to change) instead of
    running on the next.
    """

    engines: tuple[Engine, ...]
    strict: bool = False
    #: the fallbacks said aloud (:meth:`prepare`): each once per chooser, i.e. per run
    said: set = field(default_factory=set, compare=False, repr=False)

    def supports(self, plan: Plan, request: Request) -> str | None:
        """``None`` when one of the backends serves ``plan`` and ``request``, else every
        backend's reason."""
        why = [f"{e.name}: {r}" for e in self.engines
               if (r := e.supports(plan, request)) is not None]
        return None if len(why) < len(self.engines) else "; ".join(why)

    def refusal(self, plan: Plan, request: Request) -> str | None:
        """The first backend's reason not to serve ``plan`` and ``request`` (None: it does)."""
        return self.engines[0].supports(plan, request)

    def prepare(self, plan: Plan, request: Request) -> Prepared:
        """The first backend that supports ``plan`` and ``request``, prepared (decided once
        per pass; the reason another was passed over is logged once at debug level)."""
        passed = []
        for i, engine in enumerate(self.engines):
            why = engine.supports(plan, request)
            if why is None:
                for name, reason in passed:
                    key = (id(plan), name, reason)
                    if key not in _LOGGED:
                        _LOGGED.add(key)
                        _log.debug("%s pass on the %s backend, not %s: %s", request.kind,
                                   engine.name, name, reason)
                if passed and engine.name == "jax":
                    self._say(request.kind, *passed[0])
                return engine.prepare(plan, request)
            if i == 0 and self.strict:
                raise ValueError(f"the {engine.name} backend cannot compute this "
                                 f"{request.kind} pass: {why}; use backend 'auto' ({engine.name} "
                                 "where it can, JAX for the rest) or 'jax'")
            passed.append((engine.name, why))
        raise ValueError(f"no backend computes this {request.kind} pass: "
                         + "; ".join(f"{n}: {r}" for n, r in passed))

    def _say(self, kind: str, name: str, reason: str) -> None:
        """A pass that ``auto`` runs on the JAX reference on the CPU because ``name``
        refused it: one line at the default level (a :class:`DiffcoffeaWarning`), once
        per chooser and reason (a run's passes share its chooser)."""
        if (kind, reason) in self.said:
            return
        self.said.add((kind, reason))
        warnings.warn(DiffcoffeaWarning(
            f"the {kind} pass runs on the JAX reference on the CPU, not {name}: {reason}; "
            "expect it to be ~50x slower; set `engine: {backend: jax}` to silence"),
            stacklevel=3)

    def run(self, prepared: Prepared, columns: ChunkColumns, *,
            threads: int | None = None) -> Any:
        """One chunk's output of a pass :meth:`prepare` made."""
        return prepared.run(columns, threads=threads)


def chunk_state(cols: ChunkColumns, plan: Plan, theta, widths, *, order: int = 1,
                backend: Backend | str | None = None,
                threads: int | None = None) -> DatasetState:
    """One chunk's :class:`DatasetState` (states with derivatives up to ``order``), by
    ``backend``'s chooser (a :class:`Backend`, or its name; default ``Backend()``: auto on
    the CPU), prepared and run in one call (a pass prepares once and runs every chunk)."""
    return run_once(cols, plan, Request(theta, widths, order=order), backend=backend,
                    threads=threads)


def run_once(cols: ChunkColumns, plan: Plan, request: Request, *,
             backend: Backend | str | None = None, threads: int | None = None) -> Any:
    """``request`` on one chunk's columns by ``backend``'s chooser (a :class:`Backend`, or
    its name; default ``Backend()``): prepared and run in one call."""
    if not isinstance(backend, Backend):
        backend = Backend(backend or "auto")
    return backend.chooser.prepare(plan, request).run(cols, threads=threads)


@dataclass(frozen=True)
class Backend:
    """A backend and a device (validated; see the module docstring).

    Parameters
    ----------
    name
        ``"auto"``, ``"numba"`` or ``"jax"``.
    device
        ``"cpu"`` or ``"gpu"`` (the JAX kernel's device).

    Keyword-only options choose among the numba kernel's loops; each computes the same
    states and derivatives (tests compare the two settings bit for bit or to 1e-12), so
    results never depend on them, only speed does. Tests and benchmarks set them to run
    the slower path side by side; the defaults are the fast paths.

    fused
        ``True``: a plan of one collection with one object set runs the one-set walk
        (:func:`analysis.select.chainwalk.cut_walk`); ``False``: the general walk
        (:func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk`, one region).
    value_loop
        ``True``: values only (``order=0``) of a plan the fused walk does not serve run
        the general walk compiled without tangents (one lane:
        :func:`analysis.pipeline.backends.numba.kernels._numba_hist.walk` with
        ``pd_all = dfs = 0.0``); ``False``: the same walk in its 8 lanes.
    scores_on_numba
        ``True``: plans with learned scores run on the numba kernel at ``order=0`` (each
        network once on the chunk's rows, its column a field); ``False``: on the JAX kernel.
    numba_reverse
        ``True``: reverse mode's pullback and one-pass yield gradients run the numba pass
        (:mod:`analysis.pipeline.backends.numba.fastreverse`) where it serves the plan; ``False``: the JAX
        sweep (:mod:`analysis.pipeline.backends.jax.reverse`) and two passes.
    padding
        The JAX backend's bucket floors (:class:`analysis.pipeline.layout.Padding`; the
        numba backend does not pad): more padding changes no result, only how often the
        JAX kernels compile and how long a pass runs.
    tangent_block
        The JAX backend's tangents per block in a states pass's Jacobian
        (:class:`analysis.pipeline.backends.jax.backend.JaxBackend`; None: from the chunk's
        size): memory grows with the block, not with the number of parameters.
    """

    name: Literal["auto", "numba", "jax"] = "auto"
    device: Literal["cpu", "gpu"] = "cpu"
    fused: bool = field(default=True, kw_only=True)
    value_loop: bool = field(default=True, kw_only=True)
    scores_on_numba: bool = field(default=True, kw_only=True)
    numba_reverse: bool = field(default=True, kw_only=True)
    padding: Padding = field(default=Padding(), kw_only=True)
    tangent_block: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.name!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.name == "numba" and self.device == "gpu":
            raise ValueError("backend 'numba' runs on the CPU only; use backend 'jax' "
                             "(or 'auto') with device 'gpu'")
        if self.tangent_block is not None and (
                isinstance(self.tangent_block, bool) or not isinstance(self.tangent_block, int)
                or self.tangent_block < 1):
            raise ValueError(f"tangent_block must be a positive integer or None, got "
                             f"{self.tangent_block!r}")

    @property
    def engine(self) -> str:
        """Which backends may run:
        ``"auto"``, ``"numba"`` or ``"jax"`` (always ``"jax"`` on a GPU)."""
        return "jax" if self.device == "gpu" else self.name

    def describe(self) -> str:
        """One line for ``--debug``: which backend runs the passes, and why (options
        off their defaults named at the end)."""
        off = [f"{f}=False" for f in ("fused", "value_loop", "scores_on_numba", "numba_reverse")
               if not getattr(self, f)]
        if self.padding != Padding():
            off.append(f"padding={self.padding}")
        if self.tangent_block is not None:
            off.append(f"tangent_block={self.tangent_block}")
        return self._describe() + (f"; options {', '.join(off)}" if off else "")

    def _describe(self) -> str:
        if self.engine == "jax":
            why = "asked for" if self.name == "jax" else "device gpu"
            return f"backend jax on {self.device} ({why})"
        if self.name == "numba":
            return "backend numba on cpu (asked for; a pass it does not serve is an error)"
        return "backend auto: numba where it serves the plan, jax (cpu) for the rest"

    @cached_property
    def chooser(self) -> Fallback:
        """The backends of this choice, composed (module docstring)."""
        names = ORDER[self.engine]
        return Fallback(tuple(ENGINES[n](self) for n in names), strict=self.name == "numba")

    def check_device(self) -> None:
        """Raise ``ValueError`` (one line) when JAX sees no device of this kind."""
        JaxBackend(self.device).jax_device()
