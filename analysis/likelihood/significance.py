"""Objectives of a binned model: expected discovery significance and uncertainty on mu.

Both are JAX functions of merged histogram states ``{dataset: {key: stats.Histogram}}``
(the ``value`` of ``{dataset: stats.Derived}``, or what :func:`analysis.stats.differentiable`
returns), so ``jax.grad`` / ``Derived.value_and_grad`` differentiate them with respect
to the cut parameters.

**Asimov convention.** The data are the expectation at ``mu = 1`` with every nuisance
at its nominal value (``n = lambda(1, 0)``, auxiliary measurements at 0). The
unconditional fit on these data is then exactly ``mu_hat = 1, theta_hat = 0`` (every
term of the NLL is at its own minimum there), so it is not run. This is pyhf's
expected discovery significance for observed data equal to that expectation
(``pyhf.infer.test_statistics.q0`` on ``model.expected_data([1, nominal...])``; the
tests compare with it).

* :func:`discovery_significance`: ``Z = sqrt(q0)``,
  ``q0 = 2 (NLL(0, theta_hat_hat) - NLL(1, 0))`` with every nuisance profiled at
  ``mu = 0`` (:func:`~analysis.likelihood.fit.profile`). Gradient: the envelope theorem
  (``dq0/dT = 2 (dNLL/dT at (0, theta_hat_hat) - dNLL/dT at (1, 0))``, the fitted point
  held fixed: exact at a converged minimum, no unrolled iterations; its *second*
  derivatives are wrong, since the fitted point does not move), or with
  ``gradient="implicit"`` optimistix's implicit adjoint through the fit (the same first
  derivative, and exact second derivatives: use it for Hessians). ``Z`` is 0 (gradient 0) where
  ``q0 <= 0`` (no signal).
* :func:`mu_uncertainty`: ``sigma_mu = sqrt([H^-1]_{mu mu})``, ``H`` the Hessian of the
  NLL in ``(mu, theta)`` at the Asimov minimum: the inverse curvature of the profile
  likelihood of ``mu`` at its minimum (the Gaussian width of ``q(mu)``). No fit.
* :func:`significance`: ``Z`` with ``q0`` and the :class:`FitResult` of the ``mu = 0``
  fit, for ``jax.value_and_grad(..., has_aux=True)``; :func:`raise_for_fit` then stops
  a run whose fit failed with one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from analysis.likelihood.expected import asimov, nll, nuisance_names
from analysis.likelihood.fit import MAX_STEPS, FitResult, check_max_steps, profile
from analysis.likelihood.histograms import templates
from analysis.likelihood.model import Model
from analysis.stats._core import safe_sqrt

__all__ = ["Significance", "discovery_significance", "mu_uncertainty", "significance"]

Gradient = Literal["envelope", "implicit"]


class Significance(NamedTuple):
    """``z`` (expected discovery significance), ``q0`` and the ``mu = 0`` profile ``fit``.

    Parameters
    ----------
    z : jax.Array
        float64 scalar, ``sqrt(max(q0, 0))``.
    q0 : jax.Array
        float64 scalar, ``2 (NLL(0, theta_hat_hat) - NLL(1, 0))``.
    fit : FitResult
        The ``mu = 0`` profile fit.
    """

    z: Any
    q0: Any
    fit: FitResult


@partial(jax.jit, static_argnames=("model", "gradient", "max_steps"))
def _significance(tmpl: Any, model: Model, gradient: Gradient, max_steps: int) -> Significance:
    data = asimov(tmpl, model)
    n = len(nuisance_names(tmpl, model))
    fit = profile(tmpl, model, data, 0.0, differentiate=gradient == "implicit", max_steps=max_steps)
    theta0 = fit.nuisances if gradient == "implicit" else jax.lax.stop_gradient(fit.nuisances)
    # Envelope: the NLL at the fitted point, re-evaluated with live templates and data.
    q0 = 2.0 * (nll(tmpl, model, data, 0.0, theta0) - nll(tmpl, model, data, 1.0, jnp.zeros(n)))
    z = safe_sqrt(jnp.maximum(q0, 0.0))
    return Significance(z, q0, fit)


def _check_gradient(gradient: Any) -> Gradient:
    if gradient not in ("envelope", "implicit"):
        raise ValueError(
            f"likelihood: gradient: expected 'envelope' or 'implicit', found {gradient!r}"
        )
    return gradient


def significance(
    states: Mapping[str, Any],
    model: Model,
    *,
    gradient: Gradient = "envelope",
    max_steps: int = MAX_STEPS,
) -> Significance:
    """:class:`Significance` (``z``, ``q0``, the ``mu = 0`` fit of at most ``max_steps``
    BFGS steps) of the states.

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.
    gradient : {"envelope", "implicit"}, optional
        Keyword-only. How the fit is differentiated (module docstring): the envelope
        theorem (default) or optimistix's implicit adjoint (for second derivatives).
    max_steps : int, optional
        Keyword-only. The most BFGS steps of the fit (an integer ``>= 1``; default 1000).

    Returns
    -------
    Significance
        float64 JAX scalars ``z`` and ``q0`` (``z = 0`` where ``q0 <= 0``) and the fit,
        differentiable in the states.
    """
    check_max_steps(max_steps)
    return _significance(templates(states, model), model, _check_gradient(gradient), max_steps)


def discovery_significance(
    states: Mapping[str, Any],
    model: Model,
    *,
    gradient: Gradient = "envelope",
    max_steps: int = MAX_STEPS,
) -> Any:
    """Expected (Asimov) discovery significance ``Z = sqrt(q0)``: a float64 JAX scalar,
    differentiable in the states. The fit status is not checked (use
    :func:`significance` and :func:`~analysis.likelihood.raise_for_fit` for that).

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.
    gradient : {"envelope", "implicit"}, optional
        Keyword-only. How the fit is differentiated (module docstring): the envelope
        theorem (default) or optimistix's implicit adjoint (for second derivatives).
    max_steps : int, optional
        Keyword-only. The most BFGS steps of the fit (an integer ``>= 1``; default 1000).

    Returns
    -------
    jax.Array
        float64 scalar ``Z``, 0 (gradient 0) where ``q0 <= 0``.
    """
    return significance(states, model, gradient=gradient, max_steps=max_steps).z


@partial(jax.jit, static_argnames=("model",))
def _mu_uncertainty(tmpl: Any, model: Model) -> Any:
    data = asimov(tmpl, model)
    n = len(nuisance_names(tmpl, model))

    def f(p):
        return nll(tmpl, model, data, p[0], p[1:])

    h = jax.hessian(f)(jnp.concatenate([jnp.ones(1), jnp.zeros(n)]))
    e0 = jnp.zeros(n + 1).at[0].set(1.0)
    return safe_sqrt(jnp.linalg.solve(h, e0)[0])


def mu_uncertainty(states: Mapping[str, Any], model: Model) -> Any:
    """Expected uncertainty on ``mu`` (Asimov, every nuisance profiled): a float64 JAX
    scalar, ``sqrt([H^-1]_{mu mu})`` (module docstring). Differentiable in the states.

    Parameters
    ----------
    states : Mapping[str, Any]
        Merged histogram states ``{dataset: {key: stats.Histogram}}`` (e.g. the ``value``
        of a processor's ``{dataset: stats.Derived}``).
    model : Model
        The model: channels, signal, normalisations, MC statistics.

    Returns
    -------
    jax.Array
        float64 scalar ``sigma_mu``.
    """
    return _mu_uncertainty(templates(states, model), model)
