"""The JAX backend (:class:`JaxBackend`): the reference, on whatever device JAX sees.

It serves every plan and every request but one: yield gradients in one pass (the
numba backend's reverse pass gives them; the JAX way is the pullback's second pass).
Its passes: :mod:`analysis.pipeline.backends.jax.passes` (states, grids, entries,
selected weights), :mod:`analysis.pipeline.backends.jax.reverse` (the pullback) and
Poisson-bootstrap replicas (the values and selected-weights passes, then the
replicas' table, :mod:`analysis.pipeline.backends.jax.bootstrap`), each run on the
backend's device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.pipeline import replicas
from analysis.pipeline.backends.jax import passes, reverse
from analysis.pipeline.backends.jax.bootstrap import TableCounter
from analysis.pipeline.engine import Prepared
from analysis.pipeline.layout import ChunkColumns, Padding
from analysis.pipeline.plan import Plan
from analysis.pipeline.request import Request

__all__ = ["JaxBackend", "jax_devices"]


def jax_devices(kind: str) -> list:
    """The JAX devices of ``kind`` (``"cpu"``, ``"gpu"``) this process sees; empty where
    JAX has no backend for it (a CPU-only JAX build asked for a GPU)."""
    import jax

    try:
        return list(jax.devices(kind))
    except RuntimeError:
        return []


@dataclass(frozen=True)
class JaxBackend:
    """The JAX kernels on ``device`` (``"cpu"`` or ``"gpu"``).

    Parameters
    ----------
    device
        ``"cpu"`` or ``"gpu"``.
    name
        The backend's name in messages.
    padding
        Keyword-only: the bucket floors the chunks are padded to
        (:func:`analysis.pipeline.layout.pad_columns`); more padding changes no result,
        only the number of compilations and the time of a pass.
    tangent_block
        Keyword-only: the states pass's tangents per block
        (:func:`analysis.stats.taylor.value_and_derivatives`); None (default): from the
        chunk's size (:func:`analysis.stats.taylor.tangent_block`). Results do not
        depend on it (a few ulps), memory and speed do.
    """

    device: str = "cpu"
    name: str = "jax"
    padding: Padding = field(default=Padding(), kw_only=True)
    tangent_block: int | None = field(default=None, kw_only=True)

    def supports(self, plan: Plan, request: Request) -> str | None:
        """``None``, or why not: yield gradients in one pass only."""
        if request.kind == "yield_gradients":
            return ("yield gradients in one pass (the JAX backend computes the gradient "
                    "by reverse mode's second pass)")
        return None

    def prepare(self, plan: Plan, request: Request) -> Prepared:
        """Nothing to prepare (the jit caches per plan and bucket shape) but a bootstrap
        pass's points' passes (:func:`analysis.pipeline.replicas.point_requests`)."""
        if request.kind == "replicas":
            return Prepared(self, plan, request, data=[
                (self.prepare(plan, v), self.prepare(plan, s))
                for v, s in replicas.point_requests(request)])
        return Prepared(self, plan, request)

    def jax_device(self):
        """The JAX device the passes run on; ``ValueError`` (one line) when JAX sees none."""
        import jax

        found = jax_devices(self.device)
        if not found:
            seen = ", ".join(sorted({d.platform for d in jax.devices()}))
            raise ValueError(f"device '{self.device}' asked for, but JAX sees none on this "
                             f"machine (it sees: {seen}); install a JAX build for it or use "
                             "device 'cpu'")
        return found[0]

    def run(self, prepared: Prepared, columns: ChunkColumns, *,
            threads: int | None = None) -> Any:
        """One chunk's output of ``prepared`` (:mod:`analysis.pipeline.engine`), computed on
        :meth:`jax_device`; ``threads`` is not used (XLA has its own)."""
        import jax

        plan, req, pad = prepared.plan, prepared.request, self.padding
        with jax.default_device(self.jax_device()):
            kind = req.kind
            if kind == "replicas":
                return replicas.run(columns, req.replicas, [
                    (v.run, s.run) for v, s in prepared.data], TableCounter())
            if kind == "states":
                return passes.chunk_state(columns, plan, req.theta, req.widths, order=req.order,
                                          padding=pad, block=self.tangent_block)
            if kind == "grid":
                return passes.grid_state(columns, plan, req.theta, req.widths, padding=pad)
            if kind == "pullback":
                return reverse.chunk_pullback(columns, plan, req.theta, req.widths,
                                              req.pullback, padding=pad)
            if kind == "entries":
                return passes.observable_entries(columns, plan, req.theta, req.widths,
                                                 req.entries, padding=pad)
            if kind == "selected":
                return passes.selected_weights(columns, plan, req.theta, req.widths,
                                               padding=pad)
        raise ValueError(f"the JAX backend does not compute {kind}")
