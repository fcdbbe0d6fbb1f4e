"""Profile fits of the nuisances at fixed ``mu`` with optimistix, and their status.

:func:`profile` minimises :func:`~analysis.likelihood.expected.nll` over ``theta`` at a
fixed ``mu`` with ``optimistix.BFGS`` from the nominal point ``theta = 0``, then Newton
steps (exact Hessian) until one moves no ``theta`` by more than ``NEWTON_ATOL (1 +
max |theta|)`` (at most ``NEWTON_MAX_STEPS``), which takes the minimum to rounding:
the fitted point, Z, its gradient and the limit are then the same for any chunking of
the pass (templates equal to rounding) to ~1e-13. Derivatives
of the fitted ``theta`` with respect to the templates (``differentiate=True``) come
from optimistix's ``ImplicitAdjoint`` (implicit function theorem at the converged
minimum: exact, no unrolled iterations); with ``differentiate=False`` the templates
enter the fit without derivatives, for callers that only need the value at the
minimum (whose first derivative is then given by the envelope theorem).

A fit never raises inside JAX: its status is part of :class:`FitResult`, checked on
the host by :func:`raise_for_fit` (a :class:`~analysis.likelihood.FitError` of one
line naming the step and the status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from analysis.likelihood.expected import nll, nuisance_names
from analysis.likelihood.model import FitError, Model
from analysis.limits import FIT_MAX_STEPS

__all__ = ["FitResult", "check_max_steps", "fit_status", "profile", "raise_for_fit"]

# Tolerances of the minimiser: |d theta| <= ATOL + RTOL |theta| and the same for the
# NLL between steps. Then Newton steps (exact Hessian, ~1 ms each for ~50 nuisances)
# until a step moves no theta by more than NEWTON_ATOL (1 + max |theta|) (at most
# NEWTON_MAX_STEPS; a converged one skips the rest): the envelope gradient is first
# order in the distance to the minimum, and BFGS stops at a point that depends on its
# path (so on the rounding of the templates: chunking would change dZ/dparam by ~1e-8
# without them, and a fixed two steps left a BFGS stop far from the minimum short of it).
RTOL = 1e-9
ATOL = 1e-9
MAX_STEPS = FIT_MAX_STEPS  # analysis.limits: the config reads it without loading the fit
NEWTON_ATOL = 1e-12
NEWTON_MAX_STEPS = 6
GRAD_TOL = 1e-6  # largest |dNLL/dtheta| of a converged fit (rounding is ~1e-12)


def check_max_steps(max_steps: Any) -> int:
    """``max_steps`` when it is an integer >= 1 (the cap on BFGS steps of a fit, as the
    significance and the limit take it), else a one-line :class:`ValueError`.

    Parameters
    ----------
    max_steps : Any
        The value given.

    Returns
    -------
    int
        ``max_steps``.
    """
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"likelihood: max_steps: expected an integer >= 1, found {max_steps!r}")
    return max_steps


class FitResult(NamedTuple):
    """A profile fit: fitted ``nuisances`` (flat, ``nuisance_names`` order), the ``nll``
    there, the largest ``|dNLL/dtheta|`` there (``gradient``), ``converged`` (BFGS
    succeeded, the NLL is finite and ``gradient <= GRAD_TOL``), BFGS ``steps`` and
    optimistix's ``result`` code.

    Parameters
    ----------
    nuisances : jax.Array
        Fitted ``theta``, float64 ``(n_nuisances,)`` (empty without nuisances).
    nll : jax.Array
        float64 scalar, the NLL at ``nuisances``.
    gradient : jax.Array
        float64 scalar, the largest ``|dNLL/dtheta|`` there.
    converged : jax.Array
        bool scalar.
    steps : jax.Array
        int scalar, the number of BFGS steps.
    result : jax.Array
        int scalar, optimistix's result code (name: :func:`fit_status`).
    """

    nuisances: Any
    nll: Any
    gradient: Any
    converged: Any
    steps: Any
    result: Any


def profile(
    tmpl: Mapping[str, Any],
    model: Model,
    data: Mapping[str, Any],
    mu: Any,
    *,
    differentiate: bool = True,
    max_steps: int = MAX_STEPS,
) -> FitResult:
    """Minimise ``nll(tmpl, model, data, mu, theta)`` over ``theta`` (BFGS from 0, at
    most ``max_steps`` steps). JAX (jit-able). Without nuisances the "fit" is the point
    ``theta = ()``.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`.
    model : Model
        The model.
    data : Mapping[str, array]
        The counts ``{channel: n}`` (e.g. :func:`~analysis.likelihood.asimov`).
    mu : float or JAX scalar
        The fixed signal strength.
    differentiate : bool, optional
        Keyword-only. Derivatives of the fitted point with respect to ``tmpl``, ``data``
        and ``mu`` by the implicit adjoint (default True); False stops them.
    max_steps : int, optional
        Keyword-only. The most BFGS steps (default ``MAX_STEPS``, 1000).

    Returns
    -------
    FitResult
        The fit, its NLL, gradient, status and steps (float64); never raises inside JAX
        (check with :func:`raise_for_fit`).
    """
    n = len(nuisance_names(tmpl, model))
    args = (tmpl, data, mu)
    if not differentiate:
        args = jax.lax.stop_gradient(args)
    if n == 0:
        theta = jnp.zeros(0, dtype=jnp.float64)
        value = nll(args[0], model, args[1], args[2], theta)
        ok = jnp.asarray(True)
        return FitResult(theta, value, jnp.zeros(()), ok, jnp.asarray(0), jnp.asarray(0))

    def fn(theta, a):
        t, d, m = a
        return nll(t, model, d, m, theta)

    sol: Any = optx.minimise(
        fn,
        optx.BFGS(rtol=RTOL, atol=ATOL),
        jnp.zeros(n, dtype=jnp.float64),
        args=args,
        max_steps=max_steps,
        throw=False,
        adjoint=optx.ImplicitAdjoint(),
    )
    theta = _newton(fn, sol.value, args)
    value = fn(theta, args)
    gmax = jnp.max(jnp.abs(jax.grad(fn)(theta, args)))
    ok = (sol.result == optx.RESULTS.successful) & jnp.isfinite(value) & (gmax <= GRAD_TOL)
    return FitResult(theta, value, gmax, ok, sol.stats["num_steps"], sol.result._value)


def _newton(fn: Any, theta: Any, args: Any) -> Any:
    """Newton steps ``theta - H^-1 g`` from a converged BFGS minimum, each kept only if
    finite and not raising the NLL beyond rounding, until one moves no ``theta`` by more
    than ``NEWTON_ATOL (1 + max |theta|)`` or is refused (the later ones are skipped),
    at most ``NEWTON_MAX_STEPS``. A ``fori_loop`` of ``cond``s, not a ``while_loop``:
    reverse mode differentiates it (``gradient="implicit"``)."""
    grad, hess = jax.grad(fn), jax.hessian(fn)

    def newton(theta):
        value = fn(theta, args)
        new = theta - jnp.linalg.solve(hess(theta, args), grad(theta, args))
        ok = jnp.all(jnp.isfinite(new)) & (fn(new, args) <= value + 1e-12 * jnp.abs(value))
        new = jnp.where(ok, new, theta)
        scale = 1.0 + jnp.max(jnp.abs(theta))
        return new, ~ok | (jnp.max(jnp.abs(new - theta)) <= NEWTON_ATOL * scale)

    def step(_, state):
        theta, done = state
        return jax.lax.cond(done, lambda t: (t, done), newton, theta)

    return jax.lax.fori_loop(0, NEWTON_MAX_STEPS, step, (theta, jnp.asarray(False)))[0]


def fit_status(code: Any) -> str:
    """optimistix's name of a result code (``"successful"``, ``"max_steps_reached"``, ...).

    Parameters
    ----------
    code : int or array
        ``FitResult.result`` (concrete).

    Returns
    -------
    str
        The name, or ``"code N"`` for an unknown code.
    """
    code = int(np.asarray(code))
    for name, item in optx.RESULTS._name_to_item.items():
        if int(np.asarray(item._value)) == code:
            return name
    return f"code {code}"


def raise_for_fit(fit: FitResult, *, step: str) -> None:
    """Raise :class:`FitError` (one line naming ``step`` and the status) unless ``fit``
    (concrete values) converged.

    Parameters
    ----------
    fit : FitResult
        A fit with concrete values (not under ``jax.jit``).
    step : str
        Keyword-only. The name of the fit in the message (e.g. ``"step 0"``).

    Returns
    -------
    None
        Returns if the fit converged; raises :class:`FitError` otherwise.
    """
    if bool(np.asarray(fit.converged)):
        return
    value = float(np.asarray(fit.nll))
    status = fit_status(fit.result)
    if status == "successful":  # BFGS stopped, but not at a minimum
        status = f"largest |dNLL/dtheta| {float(np.asarray(fit.gradient)):.3g} > {GRAD_TOL:g}"
    raise FitError(
        f"likelihood: the {step} fit did not converge: {status} after "
        f"{int(np.asarray(fit.steps))} steps (NLL {value:.6g})"
    )
