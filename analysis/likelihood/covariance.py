"""Post-fit covariance of the nuisances of a profile fit at fixed ``mu``.

:func:`fit_covariance` is the inverse of the Hessian of
:func:`~analysis.likelihood.expected.nll` in ``theta`` at the fitted point, ``mu`` held
fixed: ``C = H^-1``, ``H_ij = d^2 NLL / d theta_i d theta_j`` (the Gaussian
approximation of the profile likelihood at its minimum; what MINUIT's HESSE and
pyhf's ``return_uncertainties=True`` report, for ``-log L`` with ``errordef = 0.5``).
The post-fit uncertainty of nuisance ``i`` is ``sqrt(C_ii)``; with a unit Gaussian
prior on every ``theta`` it is below 1 where the data constrain the nuisance beyond its
prior.

The MC-statistics nuisances are ours, ``gamma = 1 + sigma theta``
(:mod:`analysis.likelihood.expected`): pyhf's ``staterror`` uncertainty on ``gamma`` is
``sigma`` times ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from analysis.likelihood.expected import nll
from analysis.likelihood.model import Model

__all__ = ["fit_covariance"]


def fit_covariance(
    tmpl: Mapping[str, Any], model: Model, data: Mapping[str, Any], mu: Any, theta: Any
) -> Any:
    """The covariance ``H^-1`` of the nuisances at the fitted point ``theta`` (``mu``
    fixed; module docstring).

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`.
    model : Model
        The model.
    data : Mapping[str, array]
        The counts ``{channel: n}`` the fit was made to.
    mu : float or JAX scalar
        The fixed signal strength of the fit.
    theta : array
        The fitted nuisances (``FitResult.nuisances``), flat in
        :func:`~analysis.likelihood.nuisance_names` order.

    Returns
    -------
    jax.Array
        float64 ``(n, n)``, ``n`` the number of nuisances (``(0, 0)`` without any); every
        entry NaN where the Hessian is not positive definite (no minimum there).
    """
    theta = jnp.asarray(theta, dtype=jnp.float64)
    if theta.shape[0] == 0:
        return jnp.zeros((0, 0), dtype=jnp.float64)
    return _covariance(tmpl, model, data, mu, theta)


@partial(jax.jit, static_argnames=("model",))
def _covariance(tmpl: Any, model: Model, data: Any, mu: Any, theta: Any) -> Any:
    h = jax.hessian(lambda t: nll(tmpl, model, data, mu, t))(theta)
    h = (h + h.T) / 2  # symmetric up to rounding; eigvalsh reads one triangle
    ok = jnp.all(jnp.linalg.eigvalsh(h) > 0)
    return jnp.where(ok, jnp.linalg.inv(h), jnp.nan)
