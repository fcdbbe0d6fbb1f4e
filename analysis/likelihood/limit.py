"""The expected CLs upper limit on ``mu``: asymptotic ``q~mu`` on background-only Asimov data.

**Data and test statistic.** The data are the background-only expectation (``mu = 0``,
every nuisance nominal: ``n = lambda(0, 0)``, auxiliary measurements at 0). The
unconditional fit on these data is ``mu_hat = 0, theta_hat = 0`` exactly (every term of
the NLL is at its own minimum), so it is not run, and for ``mu >= 0`` pyhf's ``q~mu``
(``qmu_tilde``) is

    q(mu) = 2 (NLL(mu, theta_hat_hat(mu)) - NLL(0, 0))

with the nuisances profiled at ``mu`` (:func:`~analysis.likelihood.fit.profile`).

**CLs.** pyhf's asymptotic calculator compares ``sqrt(q)`` with ``sqrt(q_A)``, ``q_A`` the
same statistic on the background-only Asimov data of the fit at ``mu = 0``: here those are
the data themselves, so ``q_A = q``, the test statistic ``sqrt(q) - sqrt(q_A)`` is 0 and
(Cowan, Cranmer, Gross, Vitells, Eur.Phys.J. C71 (2011) 1554)

    CLs+b = Phi(-sqrt(q)),  CLb = Phi(0) = 1/2,  CLs = 2 Phi(-sqrt(q(mu)))

(this is also pyhf's median expected CLs, ``expected_pvalues`` at 0 sigma). The upper limit
at ``level`` (0.05: 95% CL) is the ``mu`` where ``CLs = level``:

    q(mu_up) = c^2,  c = Phi^-1(1 - level / 2)

(1.95996 for 0.05), what ``pyhf.infer.intervals.upper_limits.upper_limit`` finds on those
data (observed and median expected alike).

**Root.** Newton's method on ``sqrt(q(mu)) - c`` (nearly linear: ``sqrt(q) ~ mu /
sigma_mu``), from ``c sigma_mu`` (``sigma_mu`` from the Hessian of the NLL at ``(0, 0)``),
each step a profile fit at the new ``mu`` and ``dq/dmu = 2 dNLL/dmu`` there (envelope
theorem), kept inside the bracket of ``mu`` already known to be below / above the root
(bisection where a step would leave it). It stops when a step moves ``mu`` by at most
:data:`ROOT_RTOL` ``x mu`` (then, Newton converging quadratically, ``mu`` is at rounding),
after at most :data:`ROOT_MAX_STEPS` steps.

**Gradient.** The implicit function theorem at the root: ``dmu_up/dT = -(dq/dT) / (dq/dmu)``,
both total derivatives along the profile, and by the envelope theorem (``dNLL/dtheta = 0``
at the converged fit: optimistix's implicit adjoint of the fit would multiply that 0)
``dq/dT = 2 dNLL/dT`` at ``(mu_up, theta_hat_hat)``, with the data (the background
templates) live. The returned value is the last Newton step written so that JAX
differentiates it to exactly that: ``mu_up = m - (q(m; T) - c^2) / q'(m)`` with ``m``,
``theta_hat_hat`` and ``q'(m)`` held fixed. First derivatives are exact; second ones are
not (the fitted point and ``q'`` do not move), as for ``discovery_significance``'s envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from statistics import NormalDist
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.likelihood.expected import expected, nll, nuisance_names
from analysis.likelihood.fit import MAX_STEPS, FitResult, check_max_steps, profile, raise_for_fit
from analysis.likelihood.histograms import templates
from analysis.likelihood.model import FitError, Model
from analysis.stats._core import safe_sqrt

__all__ = ["ROOT_MAX_STEPS", "ROOT_RTOL", "UpperLimit", "background_asimov", "cls_limit",
           "raise_for_limit", "upper_limit"]

#: A Newton step of the root moving ``mu`` by at most ``ROOT_RTOL x mu`` ends the search.
ROOT_RTOL = 1e-12
#: The most Newton (or bisection) steps of the root, each one profile fit.
ROOT_MAX_STEPS = 60
#: Where no root was bracketed yet, a step never multiplies ``mu`` by more than this.
_GROW = 10.0


class UpperLimit(NamedTuple):
    """The expected CLs upper limit on ``mu`` and how it was found.

    Parameters
    ----------
    mu : jax.Array
        float64 scalar, the upper limit (``q(mu) = c^2``).
    q : jax.Array
        float64 scalar, ``q~mu`` at the last root step (``c^2`` at convergence).
    fit : FitResult
        The profile fit at the limit.
    converged : jax.Array
        bool scalar: the root converged (a step below ``ROOT_RTOL``, ``q`` finite) and the
        fit at the limit converged.
    steps : jax.Array
        int scalar, the number of root steps (one profile fit each).
    """

    mu: Any
    q: Any
    fit: FitResult
    converged: Any
    steps: Any


def background_asimov(tmpl: Mapping[str, Any], model: Model) -> dict[str, Any]:
    """Background-only Asimov data ``{channel: n}``: the expectation at ``mu = 0``,
    nominal nuisances.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`.
    model : Model
        The model the templates were made for.

    Returns
    -------
    dict of str to jax.Array
        ``{channel: n}``, float64 ``(nbins,)``.
    """
    n = len(nuisance_names(tmpl, model))
    return expected(tmpl, model, 0.0, jnp.zeros(n, dtype=jnp.float64))


def _critical(level: float) -> float:
    """``c = Phi^-1(1 - level / 2)``: ``sqrt(q)`` where ``CLs = 2 Phi(-sqrt(q)) = level``."""
    return NormalDist().inv_cdf(1.0 - level / 2.0)


@partial(jax.jit, static_argnames=("model", "level", "max_steps"))
def _limit(tmpl: Any, model: Model, level: float, max_steps: int) -> UpperLimit:
    c = _critical(level)
    n = len(nuisance_names(tmpl, model))
    zero = jnp.zeros(n, dtype=jnp.float64)
    live_data = background_asimov(tmpl, model)
    t, data = jax.lax.stop_gradient((tmpl, live_data))  # the search is not differentiated
    base = nll(t, model, data, 0.0, zero)
    dnll_dmu = jax.grad(lambda m, th: nll(t, model, data, m, th))

    def q_at(mu: Any) -> tuple[Any, Any, FitResult]:
        fit = profile(t, model, data, mu, differentiate=False, max_steps=max_steps)
        q = 2.0 * (nll(t, model, data, mu, fit.nuisances) - base)
        return q, 2.0 * dnll_dmu(mu, fit.nuisances), fit

    # start: q ~ (mu / sigma_mu)^2 near 0, sigma_mu^2 = [H^-1]_mumu at (0, 0)
    h = jax.hessian(lambda p: nll(t, model, data, p[0], p[1:]))(jnp.zeros(n + 1))
    var = jnp.linalg.solve(h, jnp.zeros(n + 1).at[0].set(1.0))[0]
    mu0 = jnp.where(jnp.isfinite(var) & (var > 0), c * safe_sqrt(var), 1.0)

    def body(state: tuple) -> tuple:
        i, mu, lo, hi, _, _, _, _ = state
        q, dq, fit = q_at(mu)
        root = safe_sqrt(jnp.maximum(q, 0.0))
        below = root < c
        lo = jnp.where(below, mu, lo)
        hi = jnp.where(below, hi, mu)
        # Newton on sqrt(q) - c: d sqrt(q) / dmu = dq / (2 sqrt(q))
        slope = dq / (2.0 * jnp.where(root > 0, root, 1.0))
        new = mu - (root - c) / jnp.where(slope > 0, slope, jnp.nan)
        bracketed = jnp.isfinite(hi)
        inside = jnp.isfinite(new) & (new > lo) & (new < jnp.where(bracketed, hi, _GROW * mu))
        new = jnp.where(inside, new, jnp.where(bracketed, 0.5 * (lo + hi), _GROW * mu))
        done = (jnp.abs(new - mu) <= ROOT_RTOL * mu) & jnp.isfinite(q)
        return i + 1, new, lo, hi, done, mu, (q, dq), fit

    def cond(state: tuple) -> Any:
        return (state[0] < ROOT_MAX_STEPS) & ~state[4]

    # the fit of the last step is carried out of the loop (one traced fit, not two)
    blank = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype),
                                   jax.eval_shape(lambda m: q_at(m)[2], mu0))
    init = (jnp.asarray(0), mu0, jnp.zeros(()), jnp.asarray(jnp.inf), jnp.asarray(False),
            mu0, (jnp.zeros(()), jnp.zeros(())), blank)
    steps, _, _, _, done, mu, (q, dq), fit = jax.lax.while_loop(cond, body, init)
    # the last Newton step from the last fitted mu, differentiable in the templates to the
    # implicit derivative -(dq/dT) / (dq/dmu) (module docstring): mu, theta, dq/dmu fixed
    theta = jax.lax.stop_gradient(fit.nuisances)
    q_live = 2.0 * (nll(tmpl, model, live_data, mu, theta) - nll(tmpl, model, live_data, 0.0, zero))
    out = mu - (q_live - c * c) / dq
    ok = done & fit.converged & jnp.isfinite(out) & (dq > 0)
    return UpperLimit(out, q, fit, ok, steps)


def cls_limit(
    states: Mapping[str, Any],
    model: Model,
    *,
    level: float = 0.05,
    max_steps: int = MAX_STEPS,
) -> UpperLimit:
    """:class:`UpperLimit` (the expected CLs upper limit on ``mu``, the fit at the limit,
    the root's status) of the states (module docstring).

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.
    level : float, optional
        Keyword-only. The CLs level, ``0 < level < 1`` (default 0.05: the 95% CL limit).
    max_steps : int, optional
        Keyword-only. The most BFGS steps of each profile fit (default 1000).

    Returns
    -------
    UpperLimit
        float64 JAX scalars, ``mu`` differentiable in the states (exact first derivatives);
        never raises inside JAX (check ``converged``).
    """
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"likelihood: level: expected a number in (0, 1), found {level!r}")
    check_max_steps(max_steps)
    return _limit(templates(states, model), model, float(level), max_steps)


def upper_limit(
    states: Mapping[str, Any],
    model: Model,
    *,
    level: float = 0.05,
    max_steps: int = MAX_STEPS,
) -> Any:
    """The expected CLs upper limit on ``mu`` (module docstring): a float64 JAX scalar,
    differentiable in the states. The status is not checked (use :func:`cls_limit`).

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}``.
    model : Model
        The model: channels, signal, normalisations, MC statistics.
    level : float, optional
        Keyword-only. The CLs level (default 0.05: the 95% CL limit).
    max_steps : int, optional
        Keyword-only. The most BFGS steps of each profile fit (default 1000).

    Returns
    -------
    jax.Array
        float64 scalar, the limit on ``mu``.
    """
    return cls_limit(states, model, level=level, max_steps=max_steps).mu


def raise_for_limit(limit: UpperLimit) -> None:
    """Raise :class:`~analysis.likelihood.FitError` (one line) unless ``limit`` (concrete
    values) converged: the fit at the limit's status, or the root's.

    Parameters
    ----------
    limit : UpperLimit
        A limit with concrete values (not under ``jax.jit``).

    Returns
    -------
    None
        Returns if the limit converged; raises :class:`FitError` otherwise.
    """
    if bool(np.asarray(limit.converged)):
        return
    mu = float(np.asarray(limit.mu))
    raise_for_fit(limit.fit, step=f"profile (mu = {mu:.6g}, at the CLs limit)")
    raise FitError(
        f"likelihood: the CLs upper limit did not converge: mu = {mu:.6g}, q~mu = "
        f"{float(np.asarray(limit.q)):.6g} after {int(np.asarray(limit.steps))} root steps "
        f"(no signal in any bin gives no limit)"
    )
