"""Fast fused kernel: moments of soft-selected values and their Jacobian w.r.t. the cuts.

For values ``x`` and ``P`` cut variables ``v_i`` with thresholds ``theta_i``, widths
``h_i`` and directions ``sign_i`` (+1 keeps ``v > theta``, -1 keeps ``v < theta``),
each element gets the weight

    w = base * prod_i s_i,    s_i = sigmoid(sign_i (v_i - theta_i) / h_i)

whose derivative is analytic and cheap: ``dw/dtheta_i = -(sign_i / h_i) w (1 - s_i)``.
One pass over the data accumulates, about a constant centre ``c`` (``d = x - c``),

    S_k = sum w d^k               (k = 0..4; S_0 = W)
    T_ki = sum w (1 - s_i) d^k    so that dS_k/dtheta_i = -(sign_i / h_i) T_ki

and the moment state (:class:`~analysis.stats._core.Moments`: ``W``, ``c``,
``r = S_1 / W``, ``M2..M4`` by the corrected two-pass formulas of ``_core.moments``)
and its Jacobian follow from these 20 sums by the chain rule. ``c`` is a constant
(the moments do not depend on it mathematically), taken from a strided subsample;
if it turns out farther than one standard deviation from the mean, the pass is
repeated about the better centre (so precision never depends on the data order).

Speed over precision, deliberately: element maths (sigmoids, powers of ``d``) is
float32, and sums run in float32 over ``inner_blocks`` terms per lane before being
added into float64 accumulators. Compared with the float64 path
(:func:`analysis.stats.moments` with float64 sigmoids), the state agrees to ~1e-7
relative (``W``, ``M2``, ``M4``; the mean relative to the standard deviation; ``M3``
relative to ``sqrt(M2 M4)``), and the Jacobian to ~1e-5 of the largest derivative of
each field: the float32 rounding of each element's ``1 - s_i`` does not average out
where derivatives of opposite sign cancel (tested in ``tests/test_stats_fused.py``;
on the benchmark, mean/var/skew/kurtosis agree to 6e-8 and their Jacobian entries to
4e-6 relative). ``x - c`` must stay below ~1e9 (``d^4`` in float32).

The loop walks the data in blocks of ``block_size`` elements read in place
(``lax.dynamic_slice`` of the caller's arrays: no padded copy), so the temporaries of
a block stay in cache; this is what makes it several times faster than the same
formulas written as whole-array expressions, which XLA on CPU materialises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from analysis.stats import _core
from analysis.stats._core import Moments

__all__ = ["soft_moments_and_jacobian", "soft_stats_and_jacobian", "stats_and_jacobian"]

Array = jax.Array

_SUBSAMPLE = 65536  # elements used to choose the centre (~0.1 ms)
_EXP_CLIP = 80.0  # exp(80) < float32 max: keeps e * s finite where s underflows


def _soft_factors(
    cuts: Sequence[Array],
    thetas: tuple[Array, Array],
    scales: Array,
    absolute: Sequence[bool],
) -> tuple[Array, list[Array]]:
    """Float32 ``prod s_i`` and the ``1 - s_i``, from ``e_i = exp(-z_i)``.

    ``1 - s_i = e_i s_i`` keeps full relative precision where ``s_i`` is close to 1
    (``1 - s_i`` computed by subtraction would be rounding noise there). Thresholds
    come as float32 ``(hi, lo)`` pairs with ``hi + lo = theta``: rounding theta to
    float32 would shift every sigmoid alike (e.g. 2.4 by 1e-7, i.e. 1e-6 of a 0.1
    width), a bias that does not average out.
    """
    hi, lo = thetas
    w = None
    one_minus = []
    for i, v in enumerate(cuts):
        v = jnp.abs(v) if absolute[i] else v
        z = ((v - hi[i]) - lo[i]) * scales[i]  # scales = sign / width
        e = jnp.exp(jnp.minimum(-z, _EXP_CLIP))
        s = 1.0 / (1.0 + e)
        one_minus.append(e * s)
        w = s if w is None else w * s
    if w is None:  # the callers always pass cuts; this narrows the type
        raise ValueError("_soft_factors: expected at least one cut")
    return w, one_minus


def _sums(
    x: Array,
    cuts: Sequence[Array],
    base: Array | None,
    thetas32: tuple[Array, Array],
    scales32: Array,
    absolute: Sequence[bool],
    c32: Array,
    block_size: int,
    inner_blocks: int,
) -> Array:
    """The ``(1 + P, 5)`` float64 sums ``[S_k; T_k1; ...; T_kP]`` about ``c32``."""
    n = x.shape[0]
    p = len(cuts)
    nrow = 5 * (1 + p)
    b = min(block_size, n)
    num_blocks = -(-n // b)
    groups = -(-num_blocks // inner_blocks)

    def block(j: Array) -> list[Array]:
        # The last block is shifted back to end at n; elements a previous block
        # already counted are masked out (weight 0), and blocks past the end (when
        # num_blocks is not a multiple of inner_blocks) are masked out entirely.
        start = jnp.minimum(j * b, n - b)
        take = [lax.dynamic_slice(a, (start,), (b,)) for a in (x, *cuts)]
        xb, cb = take[0], take[1:]
        w, one_minus = _soft_factors(cb, thetas32, scales32, absolute)
        if base is not None:
            w = w * lax.dynamic_slice(base, (start,), (b,))
        fresh = (start + jnp.arange(b, dtype=start.dtype)) >= j * b
        w = jnp.where(fresh, w, 0.0)
        d = xb - c32
        d2 = d * d
        powers = (d, d2, d2 * d, d2 * d2)
        terms = []
        for a in (w, *(w * om for om in one_minus)):
            terms.append(a)
            terms.extend(a * pk for pk in powers)
        return terms

    def inner(k: Array, carry: tuple[Array, tuple[Array, ...]]) -> tuple:
        g, acc = carry
        return g, tuple(a + t for a, t in zip(acc, block(g * inner_blocks + k), strict=True))

    def outer(g: Array, acc64: tuple[Array, ...]) -> tuple[Array, ...]:
        zeros32 = tuple(jnp.zeros(b, jnp.float32) for _ in range(nrow))
        _, acc32 = lax.fori_loop(0, inner_blocks, inner, (g, zeros32))
        return tuple(a + s.astype(jnp.float64) for a, s in zip(acc64, acc32, strict=True))

    acc = lax.fori_loop(0, groups, outer, tuple(jnp.zeros(b, jnp.float64) for _ in range(nrow)))
    return jnp.stack([jnp.sum(a) for a in acc]).reshape(1 + p, 5)


def _state_from_sums(s: Array, center: Array) -> Moments:
    """``Moments`` from ``S_0..S_4`` about ``center`` (formulas of ``_core.moments``)."""
    sumw, s1, s2, s3, s4 = s[0], s[1], s[2], s[3], s[4]
    r = _core.safe_div(s1, sumw, 0.0)
    r2 = r * r
    return Moments(
        sumw,
        center,
        r,
        _core._drop_rounding_residue(s2 - sumw * r2, sumw * r2),
        s3 - 3.0 * r * s2 + 2.0 * sumw * r2 * r,
        s4 - 4.0 * r * s3 + 6.0 * r2 * s2 - 3.0 * sumw * r2 * r2,
    )


def soft_moments_and_jacobian(
    x: Array,
    cut_values: Sequence[Array],
    thetas: Any,
    widths: Any,
    signs: Sequence[int],
    *,
    absolute: Sequence[bool] | None = None,
    weight: Array | None = None,
    block_size: int = 4096,
    inner_blocks: int = 8,
) -> tuple[Moments, Moments]:
    """Moment state of ``x`` under soft cuts, and its Jacobian w.r.t. the thresholds.

    Weights ``w = weight * prod_i sigmoid(sign_i (|v_i| or v_i - theta_i) / width_i)``
    (see the module docstring for formulas and precision).

    Args:
        x: values, shape ``(n,)``; used as float32.
        cut_values: ``P`` arrays of shape ``(n,)`` (the cut variables; float32).
        thetas: ``(P,)`` thresholds (may be traced: this is what is differentiated).
        widths: ``(P,)`` positive sigmoid widths (same units as the variables).
        signs: ``P`` static ints, +1 for a ``>`` cut, -1 for ``<``.
        absolute: ``P`` static bools: cut on ``|v_i|`` (e.g. ``|eta| < 2.4``).
        weight: optional base weight per element, shape ``(n,)`` (not differentiated).
        block_size, inner_blocks: loop tiling (elements per block; float32 terms per
            lane before float64 accumulation).

    Returns:
        ``(state, jacobian)``: ``state`` is a float64 :class:`Moments` of scalars;
        ``jacobian`` is a :class:`Moments` whose fields have shape ``(P,)``, the
        derivatives of each state field w.r.t. ``thetas`` (``center``: zeros).
        Empty input (``n == 0``) gives an all-zero state (``W == 0``: the statistics
        are NaN) and a zero Jacobian.

    The Jacobian is analytic; differentiating this function again with JAX's
    autodiff works but goes through the float32 loop (slow, float32-accurate): for
    second derivatives use the float64 path of :mod:`analysis.stats`.
    """
    cuts = [jnp.asarray(v) for v in cut_values]
    p = len(cuts)
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"soft_moments_and_jacobian: x: expected shape (n,), found {x.shape}")
    n = x.shape[0]
    for i, v in enumerate(cuts):
        if v.shape != (n,):
            raise ValueError(
                f"soft_moments_and_jacobian: cut_values[{i}]: expected shape ({n},), "
                f"found {v.shape}"
            )
    if weight is not None and jnp.shape(weight) != (n,):
        raise ValueError(
            f"soft_moments_and_jacobian: weight: expected shape ({n},), found {jnp.shape(weight)}"
        )
    signs = tuple(int(s) for s in signs)
    if len(signs) != p or any(s not in (1, -1) for s in signs):
        raise ValueError(
            f"soft_moments_and_jacobian: signs: expected {p} values of +1 or -1, found {signs}"
        )
    absolute = (False,) * p if absolute is None else tuple(bool(a) for a in absolute)
    if len(absolute) != p:
        raise ValueError(
            f"soft_moments_and_jacobian: absolute: expected {p} flags, found {len(absolute)}"
        )
    thetas = jnp.asarray(thetas, dtype=jnp.float64)
    widths = jnp.asarray(widths, dtype=jnp.float64)
    if thetas.shape != (p,) or widths.shape != (p,):
        raise ValueError(
            f"soft_moments_and_jacobian: thetas and widths: expected shape ({p},), "
            f"found {thetas.shape} and {widths.shape}"
        )
    if block_size < 1 or inner_blocks < 1:
        raise ValueError("soft_moments_and_jacobian: block_size and inner_blocks must be >= 1")

    zero = jnp.zeros((), jnp.float64)
    if n == 0:
        zp = jnp.zeros(p, jnp.float64)
        return Moments(zero, zero, zero, zero, zero, zero), Moments(zp, zp, zp, zp, zp, zp)

    x32 = x.astype(jnp.float32)
    cuts32 = [v.astype(jnp.float32) for v in cuts]
    base32 = None if weight is None else jnp.asarray(weight).astype(jnp.float32)
    scales = jnp.asarray(signs, jnp.float64) / widths
    hi = thetas.astype(jnp.float32)
    thetas32 = (hi, (thetas - hi.astype(jnp.float64)).astype(jnp.float32))
    scales32 = scales.astype(jnp.float32)

    # Centre: weighted mean of a strided subsample (unweighted if it has no weight).
    stride = max(1, n // _SUBSAMPLE)
    xs = x32[::stride].astype(jnp.float64)
    ws, _ = _soft_factors([v[::stride] for v in cuts32], thetas32, scales32, absolute)
    ws = ws.astype(jnp.float64) * (1.0 if base32 is None else base32[::stride])
    sw = jnp.sum(ws)
    c0 = jnp.where(sw > 0, jnp.sum(ws * xs) / jnp.where(sw > 0, sw, 1.0), jnp.mean(xs))

    def run(c: Array) -> tuple[Array, Array]:
        c32 = c.astype(jnp.float32)
        sums = _sums(
            x32, cuts32, base32, thetas32, scales32, absolute, c32, block_size, inner_blocks
        )
        return sums, c32.astype(jnp.float64)

    sums, center = run(c0)
    # A centre more than one standard deviation from the mean costs precision in the
    # float32 powers; then do the pass again about the mean just found (rare).
    s0, s1, s2 = sums[0, 0], sums[0, 1], sums[0, 2]
    r = _core.safe_div(s1, s0, 0.0)
    far = (s0 > 0) & (r * r * s0 > s2 - s0 * r * r)
    sums, center = lax.cond(far, lambda: run(center + r), lambda: (sums, center))

    # dS_k/dtheta_i = -(sign_i / width_i) T_ki, then the chain rule through the state.
    ds = (-scales)[None, :] * sums[1:].T  # (5, P)
    state = _state_from_sums(sums[0], center)
    jacobian = jax.vmap(
        lambda t: jax.jvp(lambda s: _state_from_sums(s, center), (sums[0],), (t,))[1],
        in_axes=1,
    )(ds)
    return state, jacobian


def stats_and_jacobian(
    state: Moments,
    jacobian: Moments,
    names: Sequence[str] = ("mean", "var", "skew", "kurtosis"),
) -> tuple[Array, Array]:
    """Statistics (``_core.UNIVARIATE`` names) of a state, and their Jacobian.

    Returns ``(values, jac)`` with shapes ``(len(names),)`` and ``(len(names), P)``,
    float64, by the chain rule through ``_core.state_*`` (NaN where undefined).
    """
    funcs = [_core.UNIVARIATE[name] for name in names]

    def f(s: Moments) -> Array:
        return jnp.stack([fn(s) for fn in funcs])

    values = f(state)
    jac = jax.vmap(lambda t: jax.jvp(f, (state,), (t,))[1], in_axes=-1, out_axes=-1)(jacobian)
    return values, jac


def soft_stats_and_jacobian(
    x: Array,
    cut_values: Sequence[Array],
    thetas: Any,
    widths: Any,
    signs: Sequence[int],
    *,
    names: Sequence[str] = ("mean", "var", "skew", "kurtosis"),
    **kwargs: Any,
) -> tuple[Array, Array]:
    """:func:`soft_moments_and_jacobian` followed by :func:`stats_and_jacobian`.

    Returns float64 ``values`` ``(len(names),)`` and ``jac`` ``(len(names), P)``.
    """
    state, jacobian = soft_moments_and_jacobian(x, cut_values, thetas, widths, signs, **kwargs)
    return stats_and_jacobian(state, jacobian, names)
