"""Expected yields and the negative log-likelihood of a :class:`~analysis.likelihood.Model`.

Per channel ``c``, bin ``b`` and sample (dataset) ``s`` with nominal template ``h_s``
(sum of weights), the expected count is (pyhf's composition, evermore's effects)

    lambda_cb = max(floor, sum_s  scale_s * (h_s + sum_k delta_k(theta_k; up_sk, down_sk, h_s)))
    scale_s   = mu^[s signal] * prod_j kappa_j^(theta_j [s in datasets_j]) * gamma_cb

* shape nuisances ``theta_k``: vertical template morphing ``delta_k`` (evermore's
  ``VerticalTemplateMorphing`` = pyhf ``histosys`` ``code4p``: a 6th-order polynomial
  for ``|theta| <= 1``, linear extrapolation of ``up - h`` / ``h - down`` outside),
  added over ``k``;
* lnN nuisances ``theta_j``: ``kappa_j ** theta_j`` (evermore ``SymmetricExponential``
  = pyhf ``normsys`` ``code1`` with ``hi = kappa``, ``lo = 1 / kappa``);
* MC statistics (``mc_stat``): Barlow-Beeston-lite, one factor per bin shared by all
  samples of the channel, ``gamma_cb = 1 + sigma_cb theta_cb`` with
  ``sigma_cb = sqrt(sum_s sumw2_sb) / sum_s sumw_sb`` (pyhf ``staterror``; evermore's
  ``Linear`` effect); 0 where the bin is empty (the factor then has no effect).

Every ``theta`` has a unit Gaussian constraint (evermore ``Normal``), so
``gamma_cb ~ N(1, sigma_cb)`` as in pyhf. The negative log-likelihood is

    NLL(mu, theta) = - sum_cb log Pois(n_cb | lambda_cb) / Pois(n_cb | n_cb) + sum theta^2 / 2

(evermore ``PoissonContinuous``, normalised to the saturated model: constants do not
change any likelihood ratio). ``floor`` (``Model.floor``, default 1e-9): an empty or
negative expected bin counts as ``floor``, so logarithms, values and gradients stay
finite (the gradient is zero where the floor applies); a negative *total background*
is refused by :func:`~analysis.likelihood.check_templates` instead.

The nuisance vector ``theta`` is flat, in the order of :func:`nuisance_names`:
normalisations, shapes, then per channel its bins' MC-statistics factors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import evermore as evm
import jax.numpy as jnp
import numpy as np

from analysis.likelihood.model import Model
from analysis.stats._core import safe_div, safe_sqrt

__all__ = ["asimov", "expected", "mc_stat_widths", "nll", "nuisance_names"]


def _nbins(tmpl: Mapping[str, Any], channel: str) -> int:
    first = next(iter(tmpl[channel].values()))
    return int(jnp.shape(first["nominal"]["sumw"])[0])


def nuisance_names(tmpl: Mapping[str, Any], model: Model) -> tuple[str, ...]:
    """Names of the entries of ``theta``: normalisations, shapes, then ``mc_stat_CH[i]``.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`, ``{channel:
        {dataset: {"nominal": ..., "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model the templates were made for.

    Returns
    -------
    tuple of str
        The normalisations' names, the shape systematics' names (sorted), then
        ``mc_stat_CH[i]`` per channel ``CH`` and bin ``i`` (with ``mc_stat``); empty
        without nuisances.
    """
    names = list(model.norm_names) + list(model.shape_names)
    if model.mc_stat:
        for c in model.channels:
            names += [f"mc_stat_{c.name}[{i}]" for i in range(_nbins(tmpl, c.name))]
    return tuple(names)


def mc_stat_widths(tmpl: Mapping[str, Any], model: Model) -> dict[str, Any]:
    """``{channel: sigma_b}``: relative MC-statistics width per bin, 0 for empty bins.

    The formula: ``sigma_cb = sqrt(sum_s sumw2_sb) / sum_s sumw_sb`` over the channel's
    samples ``s``.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`, ``{channel:
        {dataset: {"nominal": ..., "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model the templates were made for.

    Returns
    -------
    dict of str to jax.Array
        ``{channel: sigma}``, float64 ``(nbins,)``.
    """
    out = {}
    for c in model.channels:
        samples = tmpl[c.name].values()
        sumw = sum(s["nominal"]["sumw"] for s in samples)
        sumw2 = sum(s["nominal"]["sumw2"] for s in samples)
        out[c.name] = jnp.where(sumw > 0, safe_div(safe_sqrt(sumw2), sumw, 0.0), 0.0)
    return out


def _stacked(chan: Mapping[str, Any], model: Model) -> tuple[Any, Any, Any]:
    """A channel's templates as arrays: nominal ``(S, B)`` and up/down ``(K, S, B)`` for
    the model's K shape nuisances (the nominal where a sample has no such variation:
    its morphing is then exactly 0)."""
    samples = list(chan.values())
    nominal = jnp.stack([jnp.asarray(s["nominal"]["sumw"], dtype=jnp.float64) for s in samples])
    if not model.shape_names:
        return nominal, None, None

    def side(name: str, key: str) -> Any:
        rows = [
            s["variations"][name][key] if name in s["variations"] else s["nominal"]["sumw"]
            for s in samples
        ]
        return jnp.stack([jnp.asarray(r, dtype=jnp.float64) for r in rows])

    up = jnp.stack([side(k, "up") for k in model.shape_names])
    down = jnp.stack([side(k, "down") for k in model.shape_names])
    return nominal, up, down


def expected(tmpl: Mapping[str, Any], model: Model, mu: Any, theta: Any) -> dict[str, Any]:
    """``{channel: lambda}`` (float64, ``(nbins,)``) at signal strength ``mu`` and
    nuisances ``theta`` (flat, :func:`nuisance_names` order). JAX, differentiable in
    every argument but ``model``; vectorised over samples and nuisances (one evermore
    effect per kind and channel, so compiled fits stay small).

    The formula is the module docstring's ``lambda_cb``.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`, ``{channel:
        {dataset: {"nominal": ..., "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model the templates were made for.
    mu : float or JAX scalar
        The signal strength.
    theta : array
        The nuisances, flat ``(len(nuisance_names(tmpl, model)),)``.

    Returns
    -------
    dict of str to jax.Array
        ``{channel: lambda}``, float64 ``(nbins,)``, at least ``model.floor``.
    """
    theta = jnp.asarray(theta, dtype=jnp.float64)
    n_norm, n_shape = len(model.normalisations), len(model.shape_names)
    widths = mc_stat_widths(tmpl, model) if model.mc_stat else {}
    shapes_end = n_norm + n_shape
    start = shapes_end  # of the next channel's MC-statistics factors
    out = {}
    for c in model.channels:
        chan = tmpl[c.name]
        nominal, up, down = _stacked(chan, model)
        names = list(chan)
        signal = np.array([ds in model.signal for ds in names])
        scale = jnp.where(jnp.asarray(signal)[:, None], mu, 1.0) * jnp.ones_like(nominal)
        offset = jnp.zeros_like(nominal)
        if n_shape:
            morph = evm.effect.VerticalTemplateMorphing(up, down)
            offset = morph(theta[n_norm:shapes_end, None, None], nominal[None]).offset.sum(axis=0)
        if n_norm:
            # kappa_j for the samples of normalisation j, 1 (no effect) elsewhere: (J, S, 1)
            kappa = jnp.asarray(
                [
                    [n.kappa if ds in n.datasets else 1.0 for ds in names]
                    for n in model.normalisations
                ],
                dtype=jnp.float64,
            )[:, :, None]
            lnn = evm.effect.SymmetricExponential(kappa)(theta[:n_norm, None, None], nominal[None])
            scale = scale * lnn.scale.prod(axis=0)
        if model.mc_stat:
            nb = nominal.shape[1]
            gamma = evm.effect.Linear(offset=1.0, slope=widths[c.name])(
                theta[start : start + nb], nominal
            )
            start += nb
            scale = scale * gamma.scale
        out[c.name] = jnp.maximum(jnp.sum(scale * (nominal + offset), axis=0), model.floor)
    return out


def asimov(tmpl: Mapping[str, Any], model: Model) -> dict[str, Any]:
    """Asimov data ``{channel: n}``: the expectation at ``mu = 1``, nominal nuisances.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`, ``{channel:
        {dataset: {"nominal": ..., "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model the templates were made for.

    Returns
    -------
    dict of str to jax.Array
        ``{channel: n}``, float64 ``(nbins,)``: :func:`expected` at ``mu = 1``,
        ``theta = 0``.
    """
    n = len(nuisance_names(tmpl, model))
    return expected(tmpl, model, 1.0, jnp.zeros(n, dtype=jnp.float64))


def nll(tmpl: Mapping[str, Any], model: Model, data: Mapping[str, Any], mu: Any, theta: Any) -> Any:
    """Negative log-likelihood (scalar) of ``data`` ``{channel: n}`` (see module docstring).

    The formula: ``NLL = - sum_cb log(Pois(n_cb | lambda_cb) / Pois(n_cb | n_cb)) +
    sum theta**2 / 2`` with ``lambda`` from :func:`expected`.

    Parameters
    ----------
    tmpl : Mapping[str, Any]
        The template pytree of :func:`~analysis.likelihood.templates`, ``{channel:
        {dataset: {"nominal": ..., "variations": ...}}}`` (float64 arrays ``(nbins,)``).
    model : Model
        The model the templates were made for.
    data : Mapping[str, array]
        The observed counts ``{channel: n}`` (float64 ``(nbins,)``; real numbers allowed,
        as Asimov data).
    mu : float or JAX scalar
        The signal strength.
    theta : array
        The nuisances, flat in :func:`nuisance_names` order.

    Returns
    -------
    jax.Array
        float64 scalar, differentiable in ``tmpl``, ``data``, ``mu`` and ``theta``.
    """
    theta = jnp.asarray(theta, dtype=jnp.float64)
    lam = expected(tmpl, model, mu, theta)
    value = jnp.zeros((), dtype=jnp.float64)
    for c in model.channels:
        value = value - jnp.sum(evm.pdf.PoissonContinuous(lam[c.name]).log_prob(data[c.name]))
    if theta.shape[0]:
        unit = evm.pdf.Normal(mean=jnp.zeros(()), width=jnp.ones(()))
        value = value - jnp.sum(unit.log_prob(theta))
    return value
