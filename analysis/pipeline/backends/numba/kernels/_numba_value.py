"""The numba kernel's general loop for values only (numba, float64): lane 0 of ``select``.

:func:`select_value` is :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select`
compiled without tangents (one source: ``pd_all = df = 0.0`` choose the variant of the
walk's steps and buffers for values only, :mod:`analysis.pipeline.backends.numba.kernels.lanes`):
the same recursions (forward distributions, value functions, per-object weights, event
sums), the same operations in the same order on lane 0, so the same floats (lane 0 of
the tangent variant adds the tangent terms ``F_j[k] dpi_jp``, which are zeros when
nothing is differentiated: ``x + 0 = x``; its doubled weight sum ``H[p, 0]`` halved is
exact), in buffers of one lane. It runs where nothing is differentiated (``order=0``:
the values pass of reverse mode, hard cuts,
:mod:`analysis.pipeline.backends.numba.fastkernel`), the other lanes of ``pe``, ``ow``
and ``sa`` set to zero. Plans with one collection and one set have their own loop, compiled the same way
(:func:`analysis.pipeline.backends.numba.kernels._numba_one.select_one_value`).
"""

from __future__ import annotations

from analysis.pipeline.backends.numba.kernels._jit import njit
from analysis.pipeline.backends.numba.kernels._numba_dp import select

__all__ = ["select_value"]


@njit
def select_value(
    coff, base, pv_all, coll_sets, n_coll_sets, pat, n_pat, pat_need, tgt, f,
    set_slot, sum_x, sum_has, binom, max_seq, block, pe, ow, sa, b0, b1,
):
    """Blocks ``b0:b1``; arguments as :func:`analysis.pipeline.backends.numba.kernels._numba_dp.select` without
    the tangents ``pd_all`` and ``df`` (its variant for values only)."""
    select(coff, base, pv_all, 0.0, coll_sets, n_coll_sets, pat, n_pat, pat_need, tgt, f, 0.0,
           set_slot, sum_x, sum_has, binom, max_seq, block, pe, ow, sa, b0, b1)
