"""The soft cut's probabilities multiplied into an object's probability and its tangent lanes
(the product rule), written once for every numba loop that forms objects' probabilities
cut by cut: the YAML engine's kernels (``analysis.pipeline.backends.numba.kernels``) and the
one-set walk (:mod:`analysis.select.chainwalk`).
"""

from __future__ import annotations

from analysis.select.lanes.arith import LANES
from analysis.select.lanes.policy import inline

__all__ = ["cut_times", "inverse_width", "soft_slope"]


@inline
def soft_slope(s, inv_width, greater):
    """``ds/dt`` of the soft cut from its probability ``s = 1 / (1 + exp(-z / width))``:
    ``-+s (1 - s) / width`` (``-`` for ``>``, ``>=``; ``ds/dv = -ds/dt``), with
    ``inv_width = 1 / width`` (:func:`inverse_width`; 0 for a hard cut: slope 0)."""
    ds = s * (1.0 - s) * inv_width
    return -ds if greater else ds


@inline
def inverse_width(width):
    """``1 / width``, 0 for a hard cut (``width <= 0``): the argument of :func:`soft_slope`
    (a product in the loops where a division would be per object)."""
    return 1.0 / width if width > 0.0 else 0.0


@inline
def cut_times(s, o, n, iw, greater, par, qv, qd):
    """Multiply the soft cut of probabilities ``s[o + i]`` into probabilities ``qv[i]`` and their tangents ``qd[i]`` (``(LANES,)``, lane 0 zero),
    ``i < n``; product rule; ``iw``: :func:`inverse_width`; ``par``: the threshold's
    parameter (its lane - 1), or -1. Cut by cut over many objects, not object by object:
    a tangent lane stored and multiplied again at once waits on its store."""
    for i in range(n):
        sv = s[o + i]
        q0 = qv[i]
        for r in range(LANES):
            qd[i, r] *= sv
        if par >= 0:
            qd[i, 1 + par] += q0 * soft_slope(sv, iw, greater)
        qv[i] = q0 * sv
