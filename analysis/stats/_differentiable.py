"""A JAX function of the parameters whose derivatives come from chunked passes:
:func:`differentiable`, :func:`choose_mode`.

Forward mode (custom JVPs over a pass returning :class:`~analysis.stats.derived.Derived`)
or reverse mode (a values pass and a pullback pass, :class:`~analysis.stats.passes.PassTheta`
/ :class:`~analysis.stats.passes.Pullback`); see :mod:`analysis.stats.derive` for the
overview. Split out of :mod:`analysis.stats.derive`, which re-exports every name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import Tracer
from analysis.stats._hostlinear import apply
from analysis.stats._params import ParamSpec, param_spec
from analysis.stats.derived import Derived
from analysis.stats.merge import is_state
from analysis.stats.offsets import device_array
from analysis.stats.passes import PassTheta, Pullback, _shown
from analysis.stats.pullback import prune, pullback_payload
from analysis.stats.taylor import _to_numpy

__all__ = ["AUTO_FORWARD_MAX", "choose_mode", "differentiable"]


# --- differentiable -----------------------------------------------------------------

#: ``mode="auto"`` uses forward mode up to this many parameters, reverse mode above
#: (benchmarks/bench_reverse.py: reverse costs two passes, forward one pass whose
#: tangents grow with the number of parameters).
AUTO_FORWARD_MAX = 16

_MODES = ("auto", "forward", "reverse")

_payload = jax.jit(pullback_payload)  # compiled once per merged-state structure

_NO_FORWARD = (
    "stats.differentiable: forward-mode derivatives (jax.jvp, jax.jacfwd, jax.hessian) "
    "of a reverse-mode pass are not available; use stats.differentiable(run, "
    "mode='forward') (with stats.derive(..., order=2) for jax.hessian)"
)


def choose_mode(n_params: int, mode: str = "auto") -> str:
    """``"forward"`` or ``"reverse"``: ``mode`` itself, or for ``"auto"`` forward up to
    :data:`AUTO_FORWARD_MAX` parameters and reverse above (the one rule, also for the
    YAML pipeline and ``optimize``)."""
    if mode not in _MODES:
        raise ValueError(
            f"stats.differentiable: mode: expected 'auto', 'forward' or 'reverse', found {mode!r}"
        )
    if mode != "auto":
        return mode
    return "forward" if n_params <= AUTO_FORWARD_MAX else "reverse"


def _no_forward_derivatives(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``fun`` with a JVP rule that refuses in one line (reverse mode's host calls)."""
    guarded = jax.custom_jvp(fun)

    def refuse(primals, tangents):
        raise ValueError(_NO_FORWARD)

    guarded.defjvp(refuse)
    return guarded


def _shapes(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.float64), tree)


def _agreeing(a: Any, b: Any) -> str | None:
    """Where two merged state pytrees differ beyond rounding (1e-8 relative), or None."""
    pa = jax.tree_util.tree_flatten_with_path(a, is_leaf=is_state)[0]
    pb = jax.tree_util.tree_leaves(b, is_leaf=is_state)
    for (path, x), y in zip(pa, pb, strict=True):
        if is_state(x):  # compare means, not their split into centre and correction
            xs = [x[0], x.mean if hasattr(x, "mean") else x.mean_x] + list(x[3:])
            ys = [y[0], y.mean if hasattr(y, "mean") else y.mean_x] + list(y[3:])
        else:
            xs, ys = [x], [y]
        for u, v in zip(xs, ys, strict=True):
            u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
            finite = np.abs(u[np.isfinite(u)])
            scale = float(finite.max()) if finite.size else 0.0
            if not np.allclose(u, v, rtol=1e-8, atol=1e-8 * scale, equal_nan=True):
                return jax.tree_util.keystr(path) or "the root"
    return None


def differentiable(
    run: Callable[[Any], Any], *, mode: str = "auto"
) -> Callable[[Any], Any]:
    """A JAX function ``f(theta) -> merged states`` whose derivatives come from ``run``.

    ``run(theta)`` is typically one coffea ``Runner`` call whose processor returns
    ``stats.derive(fn, self.theta)`` per chunk (:class:`Derived` or, in reverse mode,
    :class:`Pullback` merged by ``processor.accumulate``). ``theta``: any pytree of
    parameters (see :func:`derive`); ``f`` returns the merged ``value`` as JAX arrays.
    ``jax.grad``, ``jax.value_and_grad`` and ``jax.jit`` of any loss of ``f(theta)`` work
    in both modes:

    * ``mode="forward"``: ``run`` receives the parameters (numpy leaves) and returns
      the merged Jacobian (and Hessian): the JVP of ``f`` (custom JVPs, which JAX
      transposes for ``jax.grad``). One pass per new ``theta``; ``jax.hessian`` works
      when ``run`` returns ``order=2`` states. Cost and size grow with the number of
      parameters P.
    * ``mode="reverse"``: ``run`` receives a :class:`PassTheta`. The value is a first
      pass of values only; ``jax.grad`` pulls the cotangent of the merged states back
      through a second pass, each chunk returning one O(P) vector (exact for any
      chunking and executor: :mod:`analysis.stats.pullback` gives the formula). Two
      passes per gradient, independent of P. ``jax.hessian`` (and any forward-mode
      derivative) refuses in one line.
    * ``mode="auto"`` (default): forward up to :data:`AUTO_FORWARD_MAX` parameters,
      reverse above.

    The last pass's result is reused at the same ``theta``. Under ``jax.jit`` ``run``
    is called back from the compiled code (``jax.pure_callback``), which needs the
    output structure: call ``f`` once outside ``jit`` first, otherwise a ``ValueError``
    says so. ``f.passes()`` counts the calls of ``run``; ``f.mode_for(theta)`` says
    which mode ``theta`` gets.

    Parameters
    ----------
    run : callable
        ``run(theta)`` returns one merged :class:`Derived` (forward mode, ``theta`` the
        parameters with numpy leaves) or the merged :class:`Derived` / :class:`Pullback`
        of a pass (reverse mode, ``theta`` a :class:`PassTheta`), typically from a coffea
        ``Runner`` call (:func:`join` makes one :class:`Derived` of a processor's
        ``{dataset: Derived}``).
    mode : str, optional
        Keyword-only. ``"auto"`` (default), ``"forward"`` or ``"reverse"``; anything else
        raises ``ValueError``.

    Returns
    -------
    callable
        ``f(theta)``: the merged ``value`` pytree as float64 JAX arrays, differentiable
        by ``jax.grad`` / ``jax.value_and_grad`` (and ``jax.hessian`` in forward mode),
        with the methods ``f.passes()`` and ``f.mode_for(theta)``.
    """
    choose_mode(1, mode)  # checks mode
    memo: dict[str, Any] = {"passes": 0}
    fwd_memo: dict[str, Any] = {}
    rev_memo: dict[str, Any] = {}

    def call(arg: Any) -> Any:
        memo["passes"] += 1
        return run(arg)

    def vector(t: Any, spec: ParamSpec) -> np.ndarray:
        vec = np.asarray(t, dtype=np.float64).reshape(-1)
        spec.check_finite(vec, "stats.differentiable")
        return vec

    def check_names(out: Any, spec: ParamSpec) -> None:
        if out.names != spec.names:
            raise ValueError(
                "stats.differentiable: run(theta) returned derivatives w.r.t. "
                f"{_shown(out.names)}; expected the keys of theta {_shown(spec.names)}"
            )

    # forward mode ------------------------------------------------------------------

    def host(t: Any, spec: ParamSpec) -> Derived:
        vec = vector(t, spec)
        key = (spec.key, vec.tobytes())
        if fwd_memo.get("key") != key:
            out = call(spec.unflatten(vec, as_numpy=True))
            if not isinstance(out, Derived):
                raise TypeError(
                    f"stats.differentiable: run(theta) returned a {type(out).__name__}; "
                    "expected a stats.Derived (e.g. the merged output of one dataset)"
                )
            check_names(out, spec)
            if out.order < 1:
                raise ValueError(
                    "stats.differentiable: run(theta) returned a Derived without derivatives"
                )
            fwd_memo.update(key=key, derived=out)
            fwd_memo["structure"] = {
                part: _shapes(getattr(out, part)) for part in ("value", "jac", "hess")
            }
            memo["value"] = fwd_memo["structure"]["value"]
        return fwd_memo["derived"]

    def leaves(t: Any, spec: ParamSpec, part: str) -> list:
        if not isinstance(t, Tracer):
            # device_put, not jnp.asarray: that compiles a program per shape (see device_array)
            return [device_array(a) for a in jax.tree_util.tree_leaves(getattr(host(t, spec), part))]
        if "structure" not in fwd_memo:
            raise ValueError(
                "stats.differentiable: under jax.jit the output structure of run is not known yet; "
                "call f(theta) once outside jax.jit first"
            )
        shapes = jax.tree_util.tree_leaves(fwd_memo["structure"][part])
        return jax.pure_callback(
            lambda tt: [
                np.asarray(a, dtype=np.float64)
                for a in jax.tree_util.tree_leaves(getattr(host(tt, spec), part))
            ],
            shapes,
            t,
            vmap_method="sequential",
        )

    def make_forward(spec: ParamSpec):
        def hess_fn(t):
            if fwd_memo.get("derived") is not None and fwd_memo["derived"].order < 2:
                raise ValueError(
                    "stats.differentiable: second derivatives need run(theta) to return "
                    "stats.derive(..., order=2) states"
                )
            return leaves(t, spec, "hess")

        @jax.custom_jvp
        def jac_fn(t):
            return leaves(t, spec, "jac")

        @jac_fn.defjvp
        def _jac_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            # numpy when eager: jax.grad's backward pass compiles no program for it
            return jac_fn(t), apply(hess_fn(t), dt)

        @jax.custom_jvp
        def value_fn(t):
            return leaves(t, spec, "value")

        @value_fn.defjvp
        def _value_jvp(primals, tangents):
            (t,), (dt,) = primals, tangents
            return value_fn(t), apply(jac_fn(t), dt)

        return value_fn

    # reverse mode ------------------------------------------------------------------

    def lost(out: Any) -> ValueError:
        return ValueError(
            f"stats.differentiable(mode='reverse'): run(theta) returned a {type(out).__name__}"
            + (f" of order {out.order}" if isinstance(out, Derived) else "")
            + "; pass the theta given to run unchanged to stats.derive (it carries the "
            "pass's task to the workers), or use mode='forward'"
        )

    def host_values(t: Any, spec: ParamSpec) -> Any:
        vec = vector(t, spec)
        key = (spec.key, vec.tobytes())
        if rev_memo.get("key") != key:
            out = call(PassTheta(spec.unflatten(vec, as_numpy=True), "values"))
            if not isinstance(out, Derived) or out.order != 0:
                raise lost(out)
            check_names(out, spec)
            rev_memo.update(key=key, merged=out.value)
            memo["value"] = _shapes(out.value)
        return rev_memo["merged"]

    def host_pullback(t: Any, cts: list, spec: ParamSpec) -> np.ndarray:
        merged = host_values(t, spec)
        vec = vector(t, spec)
        cotangent = jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(merged), [np.asarray(c, dtype=np.float64) for c in cts]
        )
        payload = prune(_to_numpy(_payload(merged, cotangent)))  # zero cotangents: no sweep
        out = call(
            PassTheta(spec.unflatten(vec, as_numpy=True), "pullback", merged, payload)
        )
        if not isinstance(out, Pullback):
            raise lost(out)
        check_names(out, spec)
        where = _agreeing(out.value, merged)
        if where is not None:
            raise ValueError(
                "stats.differentiable(mode='reverse'): run(theta) gave different states in "
                f"its two passes at {where}; the pass must be deterministic"
            )
        return out.grad

    def structure() -> Any:
        if "value" not in memo:
            raise ValueError(
                "stats.differentiable: under jax.jit the output structure of run is not known yet; "
                "call f(theta) once outside jax.jit first"
            )
        return jax.tree_util.tree_leaves(memo["value"])

    def make_reverse(spec: ParamSpec):
        @_no_forward_derivatives
        def values(t):
            if not isinstance(t, Tracer):
                return [device_array(a) for a in jax.tree_util.tree_leaves(host_values(t, spec))]
            return jax.pure_callback(
                lambda tt: [
                    np.asarray(a, dtype=np.float64)
                    for a in jax.tree_util.tree_leaves(host_values(tt, spec))
                ],
                structure(),
                t,
                vmap_method="sequential",
            )

        @_no_forward_derivatives
        def pull(t, cts):
            if not any(isinstance(a, Tracer) for a in [t, *cts]):
                return device_array(host_pullback(t, list(cts), spec))
            return jax.pure_callback(
                lambda tt, cc: host_pullback(tt, list(cc), spec),
                jax.ShapeDtypeStruct((spec.size,), jnp.float64),
                t,
                list(cts),
                vmap_method="sequential",
            )

        @jax.custom_vjp
        def value_fn(t):
            return values(t)

        def fwd(t):
            return values(t), t

        def bwd(t, cts):
            return (pull(t, list(cts)),)

        value_fn.defvjp(fwd, bwd)
        return value_fn

    fns: dict[Any, Any] = {}

    def chosen(spec: ParamSpec) -> str:
        return choose_mode(spec.size, mode)

    def f(theta: Any) -> Any:
        spec = param_spec(theta, "stats.differentiable")
        use = chosen(spec)
        if (use, spec.key) not in fns:
            fns[use, spec.key] = (make_forward if use == "forward" else make_reverse)(spec)
        flat = fns[use, spec.key](spec.vector(theta))
        if "value" not in memo:  # only reachable under tracing without structure
            raise ValueError("stats.differentiable: run(theta) has not been evaluated")
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(memo["value"]), flat)

    f.passes = lambda: memo["passes"]  # type: ignore[attr-defined]
    f.mode_for = lambda theta: chosen(param_spec(theta, "stats.differentiable"))  # type: ignore[attr-defined]
    return f
