"""Assertions for users' own pytest suites: per-chunk gradients and chunk invariance.

* :func:`assert_chunk_gradients` checks that the derivatives a chunk function carries
  (``fn`` as for :func:`analysis.stats.derive`) are right: every statistic of every
  state against central finite differences, plus ``jax.test_util.check_grads``.
* :func:`assert_chunk_invariance` checks that a processor's output is independent of
  how the events are chunked: the chunk split into pieces (an empty one included),
  processed piece by piece and merged with coffea's ``processor.accumulate``, equals
  the chunk processed whole, to 1e-10 relative, derivatives included.

Both raise ``AssertionError`` naming the statistic (its path in the states pytree)
and the parameter that differ. :func:`load_chunk` reads the chunk to test from a
NanoAOD file, as coffea hands it to a processor::

    from analysis.testing import assert_chunk_invariance, load_chunk
    events = load_chunk("nano.root", dataset="ttbar", entry_stop=100)
    assert_chunk_invariance(MyProcessor(), events)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np

from analysis.stats import _core, _statefns
from analysis.stats.derive import Derived, derive, taylor_derivatives
from analysis.stats.merge import is_state

__all__ = [
    "assert_chunk_gradients",
    "assert_chunk_invariance",
    "assert_derived_close",
    "load_chunk",
    "statistics_of",
]


def load_chunk(
    path: Any,
    *,
    dataset: str = "test",
    treename: str = "Events",
    entry_start: int | None = None,
    entry_stop: int | None = None,
) -> Any:
    """Events ``[entry_start, entry_stop)`` of the NanoAOD file ``path`` as one chunk of
    eager NanoEvents (NanoAOD schema), with ``events.metadata["dataset"] = dataset``
    (and ``filename``, ``entrystart``, ``entrystop``) as coffea's runner sets them: what
    :func:`assert_chunk_invariance` and a processor's ``process`` expect. A file of
    scikit-hep-testdata: ``skhep_testdata.data_path("nanoAOD_2015_CMS_Open_Data_ttbar.root")``.

    Parameters
    ----------
    path : str or os.PathLike
        The NanoAOD ROOT file.
    dataset : str, optional
        Keyword-only. ``events.metadata["dataset"]`` (default ``"test"``).
    treename : str, optional
        Keyword-only. The tree (default ``"Events"``).
    entry_start, entry_stop : int or None, optional
        Keyword-only. The entry range (default: the whole tree).

    Returns
    -------
    NanoEventsArray
        The events, eager, with the metadata set; an empty range gives zero events.
    """
    import warnings

    from coffea.nanoevents import NanoAODSchema, NanoEventsFactory

    metadata = {"dataset": dataset, "filename": str(path)}
    metadata["entrystart"] = entry_start or 0
    if entry_stop is not None:
        metadata["entrystop"] = entry_stop
    with warnings.catch_warnings():
        # the schema's notes about branches it rebuilds or cross-references it misses
        warnings.simplefilter("ignore", RuntimeWarning)
        return NanoEventsFactory.from_root(
            {str(path): treename},
            schemaclass=NanoAODSchema,
            mode="eager",
            entry_start=entry_start,
            entry_stop=entry_stop,
            metadata=metadata,
        ).events()


def _fit_field(field: str) -> Callable[[Any], Any]:
    return lambda s: _statefns.state_linear_fit(s)[field]


def _stat_functions(state: Any) -> Iterator[tuple[str, Callable[[Any], Any]]]:
    if isinstance(state, _core.Moments):
        yield from _statefns.UNIVARIATE.items()
    elif isinstance(state, _core.CoMoments):
        yield "covar", _statefns.state_covar
        yield "corr", _statefns.state_corr
        for field in ("intercept", "slope", "intercept_error", "slope_error"):
            yield f"linear_fit.{field}", _fit_field(field)


def statistics_of(value: Any) -> dict[str, Callable[[Any], Any]]:
    """``{label: g}``: every statistic of a states pytree as a scalar function ``g`` of
    the pytree: mean, var, std, skew, kurtosis of each ``Moments``; covar, corr and the
    linear-fit fields of each ``CoMoments``; every element of each sum.

    Parameters
    ----------
    value : pytree
        States (:class:`~analysis.stats.Moments`, :class:`~analysis.stats.CoMoments`)
        and sums, e.g. a :class:`~analysis.stats.Derived`'s ``value``.

    Returns
    -------
    dict of str to callable
        ``{label: g}``, the label the pytree path and the statistic (``"['ht'].mean"``,
        ``"['n'][0]"``); ``g(tree)`` is a float64 JAX scalar. Empty for an empty pytree.
    """
    out: dict[str, Callable[[Any], Any]] = {}
    paths, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=is_state)
    for path, leaf in paths:
        where = jax.tree_util.keystr(path)

        def getter(tree: Any, path: Any = path) -> Any:
            for key in path:
                if isinstance(key, jax.tree_util.GetAttrKey):  # a Histogram's fields
                    tree = getattr(tree, key.name)
                else:
                    tree = tree[key.key if hasattr(key, "key") else key.idx]
            return tree

        if is_state(leaf):
            for name, g in _stat_functions(leaf):
                out[f"{where}.{name}"] = lambda tree, g=g, get=getter: g(get(tree))
        else:
            for idx in np.ndindex(np.shape(leaf)):
                label = where + (str(list(idx)) if idx else "")
                out[label] = lambda tree, get=getter, idx=idx: jnp.asarray(get(tree))[idx]
    return out


def _all_statistics(d: Derived) -> dict[str, tuple[float, dict[str, float]]]:
    """``{label: (value, {name: gradient})}`` of every statistic, in one ``jacfwd``."""
    stats = statistics_of(d.value)
    val, grad, _ = taylor_derivatives(
        lambda s: {label: g(s) for label, g in stats.items()}, d.value, d.jac, order=1
    )
    return {
        label: (
            float(val[label]),
            {
                k: float(v)
                for k, v in zip(d.names, np.asarray(grad[label]).reshape(-1), strict=True)
            },
        )
        for label in stats
    }


def assert_chunk_gradients(
    fn: Callable[[dict], Any],
    theta: Mapping[str, float],
    *,
    rtol: float = 1e-5,
    eps: float = 1e-6,
    check_grads: bool = True,
) -> None:
    """Every statistic's gradient from :func:`~analysis.stats.derive` equals central
    finite differences of ``fn`` (closed over one chunk's arrays).

    For each statistic ``g`` (see :func:`statistics_of`) and parameter ``k`` with
    step ``h = eps * max(1, |theta_k|)``: ``|dg - (g(theta + h) - g(theta - h)) / 2h|
    <= rtol * (|dg| + |g| / max(1, |theta_k|)) + 1e-12`` (the finite difference's own
    rounding and truncation are relative to the value). Undefined statistics (NaN)
    must have finite gradients. Then ``jax.test_util.check_grads`` (forward and
    reverse mode, order 1, step ``eps``) on each defined statistic of ``fn``.
    Raises ``AssertionError`` naming the statistic and the parameter.

    Parameters
    ----------
    fn : callable
        ``fn(theta) -> states``, the function passed to :func:`~analysis.stats.derive`
        (one chunk's arrays closed over).
    theta : Mapping[str, float]
        The parameter values the gradients are checked at.
    rtol : float, optional
        Keyword-only. Relative tolerance (default ``1e-5``).
    eps : float, optional
        Keyword-only. Relative finite-difference step (default ``1e-6``).
    check_grads : bool, optional
        Keyword-only. Also run ``jax.test_util.check_grads`` (default True).

    Returns
    -------
    None
        Returns when every check passes; raises ``AssertionError`` otherwise.
    """
    d = derive(fn, theta, order=1)
    names = d.names
    base = {k: float(theta[k]) for k in names}
    plus, minus = {}, {}
    for k in names:
        h = eps * max(1.0, abs(base[k]))
        plus[k] = (derive(fn, {**base, k: base[k] + h}, order=0).value, h)
        minus[k] = derive(fn, {**base, k: base[k] - h}, order=0).value
    defined = []
    stats = statistics_of(d.value)
    for label, (value, grad) in _all_statistics(d).items():
        g = stats[label]
        if math.isnan(value):
            bad = [k for k, v in grad.items() if not math.isfinite(v)]
            if bad:
                raise AssertionError(
                    f"{label} is undefined (NaN) and its gradient w.r.t. {bad[0]!r} is not finite"
                )
            continue
        defined.append(label)
        for k in names:
            (vp, h), vm = plus[k], minus[k]
            fd = (float(g(vp)) - float(g(vm))) / (2 * h)
            tol = rtol * (abs(grad[k]) + abs(value) / max(1.0, abs(base[k]))) + 1e-12
            if not abs(grad[k] - fd) <= tol:
                raise AssertionError(
                    f"gradient of {label} w.r.t. {k!r}: {grad[k]!r} from the chunk's derivatives, "
                    f"{fd!r} by central finite differences (step {h:g}; tolerance {tol:.3g})"
                )
    if not check_grads:
        return
    theta_jax = {k: jnp.asarray(v, dtype=jnp.float64) for k, v in base.items()}
    for label in defined:
        g = stats[label]
        try:
            jax.test_util.check_grads(lambda th, g=g: g(fn(th)), (theta_jax,), order=1, eps=eps)
        except AssertionError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise AssertionError(f"jax.test_util.check_grads fails for {label}: {first}") from err


def _outputs(out: Any, where: str = "") -> Iterator[tuple[str, Derived]]:
    if isinstance(out, Derived):
        yield where or "output", out
    elif isinstance(getattr(out, "derived", None), Derived):  # the YAML pipeline's DatasetState
        yield where or "output", out.derived
    elif isinstance(out, Mapping):
        for k, v in out.items():
            yield from _outputs(v, f"{where}[{k!r}]")


def _slices(n: int, pieces: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, pieces + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def assert_derived_close(
    want: Derived, got: Derived, *, rtol: float = 1e-10, label: str = ""
) -> None:
    """Every statistic of ``got`` (see :func:`statistics_of`) and its gradient equal
    ``want``'s to ``rtol`` relative to the largest of the statistic's value and
    gradients (at least 1 for skew, kurtosis and corr); NaN matches NaN.

    Parameters
    ----------
    want, got : Derived
        The reference and the result compared with it (same parameter names).
    rtol : float, optional
        Keyword-only. Relative tolerance (default ``1e-10``).
    label : str, optional
        Keyword-only. Prefix of the error message (default ``""``).

    Returns
    -------
    None
        Returns when they match; raises ``AssertionError`` naming the statistic, the
        value or derivative and the relative difference otherwise.
    """
    _compare(label, want, got, rtol, "")


def _compare(label: str, want: Derived, got: Derived, rtol: float, where: str) -> None:
    if got.names != want.names:
        raise AssertionError(f"{where}: parameter names {list(got.names)} vs {list(want.names)}")
    got_stats = _all_statistics(got)
    for stat, (wv, wg) in _all_statistics(want).items():
        gv, gg = got_stats[stat]
        # One scale per statistic: the largest of its value and gradients.
        # (finite ones only: a statistic undefined on 0 events, NaN, scales nothing)
        scale = max([abs(v) for v in (wv, *wg.values()) if math.isfinite(v)] + [1e-300])
        if stat.endswith((".skew", ".kurtosis", ".corr")):
            scale = max(scale, 1.0)
        pairs = [("value", wv, gv)] + [(f"d/d{k}", wg[k], gg[k]) for k in want.names]
        for what, a, b in pairs:
            if a == b or (math.isnan(a) and math.isnan(b)):  # (0.0 vs 0.0 on 0 events)
                continue
            if not abs(a - b) <= rtol * scale:
                raise AssertionError(
                    f"{where}{' '.join(filter(None, (label, stat, what)))}: {b!r} merged vs {a!r} "
                    "for the whole chunk "
                    f"(relative difference {abs(a - b) / scale:.3g} > {rtol:g})"
                )


def assert_chunk_invariance(
    processor: Any,
    events: Any,
    *,
    splits: Sequence[int] = (2, 3),
    empty: bool = True,
    rtol: float = 1e-10,
) -> None:
    """Processing ``events`` in pieces and merging equals processing it whole.

    ``processor``: a coffea ``ProcessorABC`` whose output is a dict (possibly
    nested) of :class:`~analysis.stats.Derived` (or of objects holding one as
    ``.derived``, as the YAML pipeline's ``DatasetState``); ``events``: one chunk of NanoEvents
    (``events.metadata`` must name the dataset, as coffea sets it). For each ``k`` in
    ``splits`` the events are cut into ``k`` contiguous pieces (plus an empty piece
    first when ``empty``), processed one by one and merged with
    ``coffea.processor.accumulate``; every statistic (see :func:`statistics_of`) and
    its gradient must match the whole chunk's to ``rtol`` relative to the largest of
    its value and gradients (1 for skew, kurtosis and corr).

    Parameters
    ----------
    processor : coffea.processor.ProcessorABC
        The processor under test.
    events : NanoEventsArray
        One chunk (e.g. from :func:`load_chunk`).
    splits : sequence of int, optional
        Keyword-only. The numbers of pieces to try (default ``(2, 3)``).
    empty : bool, optional
        Keyword-only. Add an empty piece first (default True).
    rtol : float, optional
        Keyword-only. Relative tolerance (default ``1e-10``).

    Returns
    -------
    None
        Returns when every split matches; raises ``AssertionError`` naming the split,
        the output, the statistic and the relative difference otherwise.
    """
    from coffea import processor as coffea_processor

    whole = dict(_outputs(processor.process(events)))
    n = len(events)
    for k in splits:
        bounds = ([(0, 0)] if empty else []) + _slices(n, int(k))
        parts = [processor.process(events[a:b]) for a, b in bounds]
        merged = dict(_outputs(coffea_processor.accumulate(parts)))
        if merged.keys() != whole.keys():
            raise AssertionError(
                f"{k} pieces: outputs {sorted(merged)} vs {sorted(whole)} for the whole chunk"
            )
        for label, want in whole.items():
            _compare(label, want, merged[label], rtol, f"{k} pieces: ")
