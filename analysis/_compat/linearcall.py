"""Two rules that ``jax.custom_derivatives.linear_call`` lacks (JAX <= 0.10.2).

``linear_call(fun, fun_transpose, residuals, linear_args)`` is JAX's public way to give
a linear function its own transpose (reverse mode of a kernel whose forward-mode
tangent is another kernel). Its primitive has an evaluation, a lowering, a JVP in the
linear arguments and a transpose, but

* no batching rule: ``jax.vmap`` of it raises ``NotImplementedError``, and so do
  ``jax.jacfwd`` and ``jax.jacrev`` (both are vmaps over a JVP or its transpose);
* a JVP that asserts the residuals' tangents are zero: a second derivative through the
  residuals (``jax.hessian``, forward over reverse) fails.

Both are registered here, generic (nothing of this package's kernels): the batching
rule is again a ``linear_call``, of ``fun`` and ``fun_transpose`` vmapped (the linear
arguments all batched, so that the transpose's results are too); the JVP, where a
residual's tangent is not zero, is JAX's JVP of ``fun`` itself (``fun``'s own
derivatives, e.g. ``jax.custom_jvp`` inside it). Where JAX has its own batching rule
(a newer JAX) it is kept. :func:`installed` says whether the rules are in place;
``tests/compat/test_linearcall.py`` fails when JAX moves or changes what they use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_derivatives import linear_call
from jax.extend.core import jaxpr_as_fun

__all__ = ["installed"]

_INSTALLED: list[bool] = []


def _split(args: list, params: dict) -> tuple[int, int]:
    return params["num_callee_consts"], params["num_callee_consts"] + params["num_res"]


def _batch(args, dims, **params):  # noqa: ANN001, ANN202
    """``linear_call`` under ``jax.vmap``: a ``linear_call`` of the vmapped callee and
    transpose (the batch axis first in every result)."""
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    args = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims)]
    n_consts, k = _split(args, params)
    consts, res = args[:n_consts], args[n_consts:k]
    const_axes = [None if d is None else 0 for d in dims[:n_consts]]
    res_axes = [None if d is None else 0 for d in dims[n_consts:k]]
    # every linear argument batched: the transpose then gives a batched cotangent for
    # each (JAX sums the broadcast of an unbatched one back)
    lin = [x if d is not None else jnp.broadcast_to(x, (size,) + x.shape)
           for x, d in zip(args[k:], dims[k:])]
    callee = jaxpr_as_fun(params["callee"])
    transpose, t_consts = params["transpose_thunk"]()
    t_fun = jaxpr_as_fun(transpose)

    def fun(residuals, linear):  # noqa: ANN001, ANN202
        c, r = residuals
        return jax.vmap(lambda c_, r_, l_: callee(*c_, *r_, *l_),
                        in_axes=(const_axes, res_axes, 0))(c, r, linear)

    def fun_t(residuals, cts):  # noqa: ANN001, ANN202
        _, r = residuals
        return jax.vmap(lambda r_, ct_: t_fun(*t_consts, *r_, *ct_),
                        in_axes=(res_axes, 0))(r, list(cts))

    out = linear_call(fun, fun_t, (consts, res), lin)
    return list(out), [0] * len(out)


def _jvp(original):  # noqa: ANN001, ANN202
    def rule(primals, tangents, **params):  # noqa: ANN001, ANN202
        from jax._src.interpreters import ad

        _, k = _split(primals, params)
        if all(type(t) is ad.Zero for t in tangents[:k]):
            return original(primals, tangents, **params)
        # a residual moves: the callee's own JVP (its derivatives in the residuals)
        fn = jaxpr_as_fun(params["callee"])
        out, tangent = jax.jvp(lambda *a: fn(*a), tuple(primals),
                               tuple(ad.instantiate_zeros(t) for t in tangents))
        return list(out), list(tangent)

    return rule


def installed() -> bool:
    """Register the two rules (once per process).

    Returns
    -------
    bool
        True when ``linear_call`` composes with ``jax.vmap`` and second derivatives in
        this process; False where this JAX lacks what the rules use (the callers then
        avoid ``linear_call``).
    """
    if not _INSTALLED:
        ok = True
        try:
            from jax._src.custom_derivatives import linear_call_p
            from jax._src.interpreters import ad, batching

            if linear_call_p not in batching.fancy_primitive_batchers:
                batching.primitive_batchers[linear_call_p] = _batch
            ad.primitive_jvps[linear_call_p] = _jvp(ad.primitive_jvps[linear_call_p])
        except (ImportError, AttributeError, KeyError):  # another JAX layout
            ok = False
        _INSTALLED.append(ok)
    return _INSTALLED[0]

