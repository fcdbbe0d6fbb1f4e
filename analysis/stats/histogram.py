"""Soft histograms: the mergeable state of a weighted histogram under soft cuts.

``stats.histogram(x, edges, weight=w, prob=p)`` is the exact expectation of the
hard-cut histogram when entry ``i`` (an event or an object) passes the selection with
probability ``p_i``, independently of the others (the meaning of every soft state of
this package; ``p`` in {0, 1} is the hard cut):

    sumw[b]  = E[ sum_i w_i   [pass_i] [x_i in b] ] = sum_i w_i   p_i [x_i in b]
    sumw2[b] = E[ sum_i w_i^2 [pass_i] [x_i in b] ] = sum_i w_i^2 p_i [x_i in b]

so ``sumw2`` is the expected sum of squared weights of the filled histogram (what
``hist``'s ``Weight`` storage calls the variance), *not* ``sum_i (w_i p_i)^2``. That is
why the event weight ``weight`` and the pass probability ``prob`` are separate
arguments: passing ``weight=w * p`` (as one does for :func:`~analysis.stats.moments`)
gives the right ``sumw`` but ``sumw2 = sum w^2 p^2``, the sum of squares of a histogram
filled with the weights ``w p``, which is not an expectation of the hard-cut one.

Bins follow ``hist`` / boost-histogram: bin ``b`` is ``[edges[b], edges[b + 1])``, values
below ``edges[0]`` go to the underflow bin, values ``>= edges[-1]`` (and NaN, +inf) to
the overflow bin. The bin of an entry is a step function of ``x``: derivatives come
from ``w`` and ``p`` (an observable moving an entry across an edge has no derivative).

Soft bins (``width=W > 0``): entry ``i`` lands in bin ``b`` with probability
``q_ib = sigmoid((edges[b+1] - x_i) / W) - sigmoid((edges[b] - x_i) / W)`` (the flow
bins take the rest: :mod:`analysis.stats.softbins`), the exact expectation of the hard
histogram of ``x + eps`` with ``eps`` logistic of scale ``W``, the noise a soft cut of
width ``W`` means; ``sumw[b] = sum_i w_i p_i q_ib``, ``sumw2[b] = sum_i w_i^2 p_i q_ib``.
Then ``x`` carries derivatives too (a learned score moving entries between bins).
``W = 0`` (the default) is the hard histogram above, bit for bit.

The state :class:`Histogram` is a JAX pytree whose leaves are the two arrays with the
flow bins (``sumw_flow``, ``sumw2_flow``, shape ``(nbins + 2,)``: underflow first,
overflow last) and whose static part is the edges. Sums merge by addition, so
:func:`analysis.stats.merge`, :class:`analysis.stats.Derived` (``a + b``) and coffea's
``processor.accumulate`` merge it exactly; histograms with different edges refuse to
merge, naming the edges. Jacobian and Hessian leaves of a :class:`Derived` are
:class:`Histogram` objects too, with trailing parameter axes (``d.jac["ht"].sumw`` is
``(nbins, P)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.spec.edges import check_edges
from analysis.stats.dispatch import _flat_prepared
from analysis.stats.softbins import bin_probabilities, is_hard

__all__ = ["Flow", "Histogram", "check_edges", "histogram"]


class Flow(NamedTuple):
    """Under- and overflow bins of a :class:`Histogram` (arrays of any trailing shape)."""

    underflow_sumw: Any
    underflow_sumw2: Any
    overflow_sumw: Any
    overflow_sumw2: Any


@jax.tree_util.register_pytree_with_keys_class
class Histogram:
    """Mergeable weighted-histogram state: bin edges (static) and two sums with flow bins.

    ``sumw_flow``, ``sumw2_flow``: float64 arrays of shape ``(nbins + 2, ...)`` (index 0
    the underflow, ``-1`` the overflow; trailing axes for derivatives). ``edges``: the
    ``nbins + 1`` bin edges (numpy float64). ``sumw`` / ``sumw2``: the in-range bins;
    :attr:`flow`: the flow bins. ``to_hist()`` gives a ``hist.Hist`` with ``Weight``
    storage (values only). Two histograms add when their edges are equal.

    Parameters
    ----------
    edges : sequence of float
        The ``nbins + 1`` strictly increasing bin edges (static: part of the pytree
        structure).
    sumw_flow : array
        Sum of weights per bin, float64 ``(nbins + 2, ...)`` with the underflow first and
        the overflow last.
    sumw2_flow : array
        Sum of squared weights per bin, same shape as ``sumw_flow``.
    """

    __slots__ = ("_edges", "sumw_flow", "sumw2_flow")

    def __init__(self, edges: Sequence[float], sumw_flow: Any, sumw2_flow: Any) -> None:
        self._edges = tuple(edges)
        self.sumw_flow = sumw_flow
        self.sumw2_flow = sumw2_flow

    # pytree: the two arrays are children, the edges are static (part of the structure)
    def tree_flatten_with_keys(self) -> tuple[Any, Any]:
        """JAX pytree protocol: the two sums as keyed children, the edges as structure."""
        keys = jax.tree_util.GetAttrKey
        return ((keys("sumw_flow"), self.sumw_flow), (keys("sumw2_flow"), self.sumw2_flow)), (
            self._edges
        )

    def tree_flatten(self) -> tuple[Any, Any]:
        """JAX pytree protocol: ``((sumw_flow, sumw2_flow), edges)``."""
        return (self.sumw_flow, self.sumw2_flow), self._edges

    @classmethod
    def tree_unflatten(cls, edges: Any, children: Any) -> Histogram:
        """JAX pytree protocol: the histogram of ``edges`` and the two sums."""
        return cls(edges, *children)

    def __getstate__(self) -> tuple:
        return (self._edges, self.sumw_flow, self.sumw2_flow)

    def __setstate__(self, state: tuple) -> None:
        self._edges, self.sumw_flow, self.sumw2_flow = state

    @property
    def edges(self) -> np.ndarray:
        """The ``nbins + 1`` bin edges (numpy float64)."""
        return np.asarray(self._edges, dtype=np.float64)

    @property
    def nbins(self) -> int:
        """Number of in-range bins."""
        return len(self._edges) - 1

    @property
    def sumw(self) -> Any:
        """Expected sum of weights per in-range bin, ``(nbins, ...)``."""
        return self.sumw_flow[1:-1]

    @property
    def sumw2(self) -> Any:
        """Expected sum of squared weights per in-range bin, ``(nbins, ...)``."""
        return self.sumw2_flow[1:-1]

    @property
    def flow(self) -> Flow:
        """The flow bins: :class:`Flow` (``underflow_sumw``, ``underflow_sumw2``, ...)."""
        return Flow(self.sumw_flow[0], self.sumw2_flow[0], self.sumw_flow[-1], self.sumw2_flow[-1])

    def __add__(self, other: Any) -> Histogram:
        if not isinstance(other, Histogram):
            return NotImplemented
        if self._edges != other._edges:
            raise ValueError(
                f"Histogram + Histogram: edges differ: {list(self._edges)} vs {list(other._edges)}"
            )
        return Histogram(
            self._edges, self.sumw_flow + other.sumw_flow, self.sumw2_flow + other.sumw2_flow
        )

    def to_hist(self) -> Any:
        """A ``hist.Hist`` (variable axis with flow bins, ``Weight`` storage) of the values."""
        import hist

        h = hist.Hist(hist.axis.Variable(self._edges), storage=hist.storage.Weight())
        view = h.view(flow=True)
        view.value = np.asarray(self.sumw_flow, dtype=np.float64)
        view.variance = np.asarray(self.sumw2_flow, dtype=np.float64)
        return h

    def __repr__(self) -> str:
        return f"Histogram(edges={list(self._edges)}, sumw={self.sumw!r}, sumw2={self.sumw2!r})"


def histogram(x: Any, edges: Sequence[float], *, weight: Any = None, prob: Any = None,
              width: Any = 0.0) -> Histogram:
    """Soft histogram state of ``x`` (see the module docstring for the formulas).

    ``x``: any input of :func:`~analysis.stats.moments` (awkward Array, numpy/JAX array,
    :class:`~analysis.stats.Jagged`), per event or per object; ``edges``: at least two
    strictly increasing finite numbers (else ``ValueError`` naming the first bad one);
    ``weight``: the entry's weight ``w`` (event weight; default 1; broadcast as in
    ``moments``); ``prob``: its probability ``p`` of passing the soft selection (default
    1; same structure as ``x``). Missing values (None) are skipped. float64 JAX arrays;
    empty input gives zeros (a neutral element of the merge). Differentiable in
    ``weight`` and ``prob`` (``jax.jit`` / ``jax.grad`` / :func:`~analysis.stats.derive`).

    Parameters
    ----------
    x : awkward Array, numpy or JAX array, or Jagged
        The values to histogram, per event or per object.
    edges : sequence of float
        At least two strictly increasing finite bin edges.
    weight : array, Jagged, float or None, optional
        Keyword-only. The entries' weights ``w`` (default 1), broadcast as in
        :func:`~analysis.stats.moments`.
    prob : array, Jagged or None, optional
        Keyword-only. The entries' probabilities ``p`` of passing the soft selection
        (default 1), with the structure of ``x``.
    width : float or array, optional
        Keyword-only. The soft bins' logistic scale ``W >= 0`` (module docstring; may be
        traced). 0 (the default): hard bins.

    Returns
    -------
    Histogram
        ``sumw_flow = sum p w`` and ``sumw2_flow = sum p w**2`` per bin (float64 JAX
        arrays, flow bins included); all zeros for empty input.
    """
    fixed = check_edges(edges)
    if np.ndim(width) != 0:
        raise ValueError(f"stats.histogram: width: expected one number >= 0, found {width!r}")
    if is_hard(width):
        width = None
    else:
        try:
            concrete = float(width)
        except (TypeError, jax.errors.ConcretizationTypeError):
            concrete = 1.0  # traced (inside jit / grad): taken as given
        if not (np.isfinite(concrete) and concrete > 0):
            raise ValueError(f"stats.histogram: width: expected a finite number >= 0, "
                             f"found {width!r}")
    p = _flat_prepared(x, prob, weight, "histogram")
    xv = jnp.asarray(p.x)
    w = jnp.asarray(p.w)
    pw = w if p.y is None else w * jnp.asarray(p.y)
    # side="right": bin b holds [edges[b], edges[b+1]); x >= edges[-1] and NaN (sorted
    # last) land in the overflow slot nbins + 1, as in boost-histogram.
    if width is not None:
        q = bin_probabilities(xv, fixed, width)  # (N, nbins + 2)
        return Histogram(fixed, pw @ q, (pw * w) @ q)
    idx = jnp.searchsorted(jnp.asarray(fixed), xv, side="right")
    n = len(fixed) + 1
    sumw = jax.ops.segment_sum(pw, idx, num_segments=n)
    sumw2 = jax.ops.segment_sum(pw * w, idx, num_segments=n)
    return Histogram(fixed, sumw, sumw2)

