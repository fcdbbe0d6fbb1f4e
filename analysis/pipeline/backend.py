"""Which backend computes a pass, and on which device: the one place that chooses.

A :class:`Backend` is the user's choice (YAML ``engine: {backend, device}``,
``--backend`` on the command line, ``backend=`` / ``device=`` keywords in Python):

- ``backend="auto"`` (default): the numba kernels where they serve the plan, the JAX
  kernel (the reference) for the rest (:func:`analysis.pipeline.kernel.chunk_state`);
- ``backend="numba"``: the numba kernels only; a plan they do not serve is an error;
- ``backend="jax"``: the JAX kernel for every pass, on ``device``;
- ``device="cpu"`` (default) or ``"gpu"``: where the JAX kernel runs. The numba
  kernels run on the CPU only, so ``device="gpu"`` runs the JAX kernel (``auto``
  means ``jax`` there) and ``numba`` with ``gpu`` is refused.

Both backends compute the same states and derivatives (tests compare them to 1e-12).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BACKENDS", "DEVICES", "Backend", "devices"]

BACKENDS = ("auto", "numba", "jax")
DEVICES = ("cpu", "gpu")


def devices(kind: str) -> list:
    """The JAX devices of ``kind`` (``"cpu"``, ``"gpu"``) this process sees; empty where
    JAX has no backend for it (a CPU-only JAX build asked for a GPU)."""
    import jax

    try:
        return list(jax.devices(kind))
    except RuntimeError:
        return []


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
        ``True``: a plan of one collection with one object set runs the fused loop
        (:mod:`analysis.pipeline.backends.numba.kernels._numba_one`); ``False``: the general loop
        (:mod:`analysis.pipeline.backends.numba.kernels._numba_dp`).
    value_loop
        ``True``: values only (``order=0``) run the general loop's one-lane copy
        (:mod:`analysis.pipeline.backends.numba.kernels._numba_value`); ``False``: the loop with tangents.
    scores_on_numba
        ``True``: plans with learned scores run on the numba kernel at ``order=0`` (each
        network once on the chunk's rows, its column a field); ``False``: on the JAX kernel.
    numba_reverse
        ``True``: reverse mode's pullback and one-pass yield gradients run the numba pass
        (:mod:`analysis.pipeline.backends.numba.fastreverse`) where it serves the plan; ``False``: the JAX
        sweep (:mod:`analysis.pipeline.backends.jax.reverse`) and two passes.
    """

    name: Literal["auto", "numba", "jax"] = "auto"
    device: Literal["cpu", "gpu"] = "cpu"
    fused: bool = field(default=True, kw_only=True)
    value_loop: bool = field(default=True, kw_only=True)
    scores_on_numba: bool = field(default=True, kw_only=True)
    numba_reverse: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.name!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.name == "numba" and self.device == "gpu":
            raise ValueError("backend 'numba' runs on the CPU only; use backend 'jax' "
                             "(or 'auto') with device 'gpu'")

    @property
    def engine(self) -> str:
        """What :func:`analysis.pipeline.kernel.chunk_state` is asked for:
        ``"auto"``, ``"numba"`` or ``"jax"`` (always ``"jax"`` on a GPU)."""
        return "jax" if self.device == "gpu" else self.name

    @property
    def numba_allowed(self) -> bool:
        """Whether a pass may run the numba kernels (reverse mode's one-pass yield
        gradients are numba-only)."""
        return self.engine != "jax"

    def describe(self) -> str:
        """One line for ``--debug``: which backend runs the passes, and why (options
        off their defaults named at the end)."""
        off = [f"{f}=False" for f in ("fused", "value_loop", "scores_on_numba", "numba_reverse")
               if not getattr(self, f)]
        return self._describe() + (f"; options {', '.join(off)}" if off else "")

    def _describe(self) -> str:
        if self.engine == "jax":
            why = "asked for" if self.name == "jax" else "device gpu"
            return f"backend jax on {self.device} ({why})"
        if self.name == "numba":
            return "backend numba on cpu (asked for; a plan it does not serve is an error)"
        return "backend auto: numba where it serves the plan, jax (cpu) for the rest"

    def check_device(self) -> None:
        """Raise ``ValueError`` (one line) when JAX sees no device of this kind."""
        self.jax_device()

    def jax_device(self):
        """The JAX device the JAX kernel runs on."""
        import jax

        found = devices(self.device)
        if not found:
            seen = ", ".join(sorted({d.platform for d in jax.devices()}))
            raise ValueError(f"device '{self.device}' asked for, but JAX sees none on this "
                             f"machine (it sees: {seen}); install a JAX build for it or use "
                             "device 'cpu'")
        return found[0]

    @contextlib.contextmanager
    def placed(self) -> Iterator[None]:
        """Run the JAX computations inside on :meth:`jax_device` (the default device)."""
        import jax

        with jax.default_device(self.jax_device()):
            yield
