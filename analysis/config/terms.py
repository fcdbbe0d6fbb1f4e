"""Objective terms: one class per ``type``, with its config validation and its value.

Each class is the pydantic model of one entry of ``objective.terms`` (the config's
discriminated union :data:`ObjectiveTerm`, on ``type``) and knows

- ``bind(ctx, where)``: check it against the analysis (datasets, statistics), raising a
  one-line :class:`~analysis.errors.ConfigError` naming ``where``;
- ``check(stats, ctx)``: raise :class:`~analysis.errors.DiffcoffeaError` where it is
  undefined (e.g. zero background yield);
- ``loss(stats, ctx)``: a JAX function of the statistics; the objective (to minimise)
  is ``sum(term.weight * term.loss(stats, ctx))``;
- ``reads()``: the observables whose statistics ``loss`` reads (names; ``None``: it
  may read any). An optimisation step computes only the observables its terms read
  (:func:`analysis.pipeline.plan.only_observables`); yields, Monte Carlo variances and
  histogram templates are always there.

``ctx`` is a :class:`TermContext` (the :class:`analysis.optimize.objectives.Objective`
being built): ``source`` (for messages), ``datasets``, ``signal`` and ``background``
(dataset names by role), ``paths`` (every statistic a ``target`` may name),
``base_dir`` (the config file's directory, where a ``python`` term's module is looked
up first). ``stats[dataset]`` holds ``yield``,
``mc_variance``, ``mc_variance_floor``, ``selected_sumw``, ``selected_sumw2``, ``sumw``
and each observable's statistics, as in results.json (see :mod:`analysis.optimize.objectives`).

Adding a term is one class here, added to :data:`ObjectiveTerm` (see the README's
"Extending" section).
"""

from __future__ import annotations

import difflib
import importlib
import math
import numbers
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, Union, runtime_checkable

from pydantic import Field, PrivateAttr, model_validator

from analysis.config.schema import _fail, _Model
from analysis.config.yamlsafe import show_value
from analysis.errors import ConfigError, DiffcoffeaError
from analysis.limits import FIT_MAX_STEPS

__all__ = [
    "TERM_TYPES",
    "ClsUpperLimitTerm",
    "DiscoverySignificanceTerm",
    "MuUncertaintyTerm",
    "ObjectiveTerm",
    "PythonTerm",
    "SignificanceTerm",
    "TargetTerm",
    "Term",
    "TermContext",
    "asimov_significance",
    "significance_z",
]

_FUNCTION = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


# --- the Asimov significance (pure JAX) ------------------------------------------------
# JAX is imported inside the functions, not with the module: the config schema (this
# module) is checked without loading JAX, so that a bad config is refused at once.


def _log1p_minus(a):
    """``log1p(a) - a`` without cancellation for small ``|a|`` (series below 1e-2)."""
    import jax.numpy as jnp

    small = jnp.abs(a) < 1e-2
    a_s = jnp.where(small, a, 0.0)
    series = a_s * a_s * (-1 / 2 + a_s * (1 / 3 + a_s * (-1 / 4 + a_s * (1 / 5 + a_s * (-1 / 6)))))
    a_l = jnp.where(small, 1.0, a)
    return jnp.where(small, series, jnp.log1p(a_l) - a_l)


def asimov_significance(s, b, var_b):
    """Asimov discovery significance ``Z_A(s, b, var_b)`` (see :mod:`analysis.optimize.objectives`).

    ``b`` must be > 0 (the caller checks); ``var_b`` is an absolute variance.
    Written without cancellation (the two logarithms of the textbook form cancel
    to O(s^2) for small ``s/b``): with ``A = s b / (b^2 + (s+b) v)``,
    ``B = v s / (b (b+v))`` and ``g(a) = log1p(a) - a``,
    ``Z^2 / 2 = s^2 b^2 / ((b^2 + (s+b) v)(b + v)) + (s+b) g(A) - (b^2/v) g(B)``,
    and ``Z^2 / 2 = s^2 / b + (s+b) g(s/b)`` for ``v = 0``.
    """
    import jax.numpy as jnp

    from analysis.stats._core import safe_sqrt

    tiny = var_b <= 1e-12 * b * b
    v = jnp.where(tiny, 1.0, var_b)
    sb = s + b
    den = b * b + sb * v
    half_z2_v = (
        (s * b) ** 2 / (den * (b + v))
        + sb * _log1p_minus(s * b / den)
        - (b * b / v) * _log1p_minus(v * s / (b * (b + v)))
    )
    half_z2_0 = s * s / b + sb * _log1p_minus(s / b)
    return safe_sqrt(jnp.maximum(2.0 * jnp.where(tiny, half_z2_0, half_z2_v), 0.0))


def significance_z(stats: dict[str, Any], signal: list[str], background: list[str], sigma_b):
    """JAX: ``Z_A`` of the summed signal over the summed background yields, with background
    variance ``(sigma_b b)^2`` plus the Monte Carlo variance and its floor."""
    import jax.numpy as jnp

    s = sum(stats[n]["yield"] for n in signal)
    b = sum(stats[n]["yield"] for n in background)
    var = (sigma_b * b) ** 2 + sum(
        stats[n]["mc_variance"] + stats[n]["mc_variance_floor"] for n in background
    )
    return asimov_significance(s, jnp.where(b > 0, b, 1.0), var)


# --- the terms ------------------------------------------------------------------------


@runtime_checkable
class TermContext(Protocol):
    """What a term knows of the analysis (module docstring); the objective provides it."""

    source: str
    base_dir: Path
    datasets: list[str]
    signal: list[str]
    background: list[str]
    paths: list[str]


class Term(_Model):
    """Base of the objective terms: a ``weight`` and the three hooks (module docstring)."""

    weight: float = 1.0

    def bind(self, ctx: TermContext, where: str) -> None:
        """Check the term against the analysis; raise :class:`ConfigError` naming ``where``."""

    def check(self, stats: dict[str, Any], ctx: TermContext) -> None:
        """Raise :class:`DiffcoffeaError` where the term is undefined for ``stats``."""

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        """JAX: the term's value (before ``weight``) from the statistics."""
        raise NotImplementedError

    def reads(self) -> frozenset[str] | None:
        """The observables (names) whose statistics :meth:`loss` reads; ``None`` (the
        default): any of them."""
        return None


class SignificanceTerm(Term):
    """``-Z_A`` of all ``role: signal`` over all ``role: background`` datasets, with a
    relative background uncertainty ``sigma_b``."""

    type: Literal["significance"] = "significance"
    sigma_b: float = Field(default=0.0, ge=0)

    def bind(self, ctx: TermContext, where: str) -> None:
        for role, names in (("signal", ctx.signal), ("background", ctx.background)):
            if not names:
                raise ConfigError(
                    f"{where}: significance needs a dataset with role: {role}; none of "
                    f"{', '.join(ctx.datasets)} has it"
                )

    def check(self, stats: dict[str, Any], ctx: TermContext) -> None:
        b = sum(float(stats[n]["yield"]) for n in ctx.background)
        if not b > 0:
            raise DiffcoffeaError(
                f"{ctx.source}: objective: background yield is {b:g} "
                f"(datasets {', '.join(ctx.background)}); the significance is undefined - "
                "loosen the selection or check the background files"
            )

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        return -significance_z(stats, ctx.signal, ctx.background, self.sigma_b)

    def reads(self) -> frozenset[str]:
        return frozenset()  # yields and Monte Carlo variances only


def _lookup(stats: dict, path: str) -> Any:
    node: Any = stats
    for part in path.split("."):
        node = node[part]
    return node


class TargetTerm(Term):
    """``(stat - value)^2`` for a statistic named ``dataset.observable.stat`` (e.g.
    ``ttbar.jet_pt.mean``, ``ttbar.jet_pt_eta.linear_fit.slope``) or ``dataset.yield``."""

    type: Literal["target"] = "target"
    stat: str | None = None
    value: float | None = None

    @model_validator(mode="after")
    def _check(self) -> TargetTerm:
        for key in ("stat", "value"):
            if getattr(self, key) is None:
                raise _fail(key, f"a target term needs '{key}'")
        return self

    def bind(self, ctx: TermContext, where: str) -> None:
        assert self.stat is not None
        dataset = self.stat.split(".", 1)[0]
        if dataset not in ctx.datasets:
            raise ConfigError(
                f"{where}.stat: {self.stat!r} names unknown dataset {dataset!r}; "
                f"datasets: {', '.join(ctx.datasets)}"
            )
        if self.stat not in ctx.paths:
            close = difflib.get_close_matches(self.stat, ctx.paths, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}.stat: unknown statistic {self.stat!r}{hint}")

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        assert self.stat is not None
        return (_lookup(stats, self.stat) - self.value) ** 2

    def reads(self) -> frozenset[str]:
        """``{observable}`` of ``dataset.observable.stat``; none for ``dataset.yield``
        (or another per-dataset number)."""
        assert self.stat is not None
        parts = self.stat.split(".")
        return frozenset(parts[1:2]) if len(parts) > 2 else frozenset()


def _search_path(config_dir: Path | None) -> list[str]:
    """Where a ``python`` term's module is looked up: the config's directory, then ``sys.path``.

    ``sys.path[0]`` is the entry point's own directory (the current directory for
    ``python -m analysis``, the script's ``bin/`` for ``diffcoffea``); it is left out for
    those two entry points so that both import the same module.
    """
    path = list(sys.path)
    entry = sys.argv[0] if sys.argv else ""
    if path and (
        Path(entry).name in ("diffcoffea", "diffcoffea.exe")
        or Path(entry).parts[-2:] == ("analysis", "__main__.py")
    ):
        path = path[1:]
    return ([str(config_dir)] if config_dir is not None else []) + path


def _import_function(spec: str, where: str, config_dir: Path | None = None) -> Callable:
    """Import ``"pkg.module:func"`` from the config's directory, else ``sys.path``.

    Trust model: a config that names Python code runs it, like a Makefile; only run
    configs you trust. Nothing else in a config or data file runs code.
    """
    module, _, name = spec.partition(":")
    saved = sys.path[:]
    try:
        sys.path[:] = _search_path(config_dir)  # restored below: only this lookup changes
        try:
            fn = getattr(importlib.import_module(module), name)
        finally:
            sys.path[:] = saved
    except Exception as err:
        looked = f"; looked in {config_dir} and sys.path" if config_dir is not None else ""
        raise ConfigError(
            f"{where}: cannot import {spec!r} ({type(err).__name__}: {err}){looked}"
        ) from None
    if not callable(fn):
        raise ConfigError(f"{where}: {spec!r} is not callable")
    return fn


class TermReturnError(DiffcoffeaError):
    """A ``python`` term returned something other than a real finite scalar (the loop
    adds the step and the checkpoint kept)."""


def _call_user(fn: Callable, spec: str, stats: dict[str, Any], source: str) -> Any:
    """Call a user's ``python`` term; its exceptions become one-line user-facing errors.

    Its return value is untrusted: it must be a real scalar (a Python or numpy number,
    or a JAX scalar, also while traced), finite when concrete; anything else (a string,
    ``None``, an array, a complex number, NaN) is one line naming the function and what
    it returned. ``SystemExit`` raised inside is reported, not obeyed (a
    ``KeyboardInterrupt`` is the user's Ctrl-C: exit 130, "interrupted").
    """
    where = f"{source}: objective: python function {spec!r}"
    try:
        value = fn(stats)
    except DiffcoffeaError:
        raise
    except (Exception, SystemExit) as err:
        msg = " ".join(str(err).split())
        raise DiffcoffeaError(f"{where} raised {type(err).__name__}: {msg}") from err
    problem = _not_a_real_scalar(value)
    if problem:
        raise TermReturnError(f"{where} returned {problem}; expected a real finite scalar")
    return value


def _not_a_real_scalar(value: Any) -> str:
    """What is wrong with a ``python`` term's return value ("" if nothing)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from analysis._compat.jax import Tracer

    if isinstance(value, (bool, np.bool_)):
        return f"a bool ({value})"
    if not isinstance(value, (numbers.Number, np.generic, np.ndarray, jax.Array)):
        return f"{type(value).__name__} {show_value(value)}"
    try:
        shape, dtype = np.shape(value), jnp.result_type(value)
    except (TypeError, ValueError, OverflowError):  # e.g. an int beyond int64
        return f"{type(value).__name__} {show_value(value)}"
    if shape != ():
        return f"an array of shape {shape}"
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        return f"a {dtype} value ({value})"
    if isinstance(value, Tracer):
        return ""
    try:
        x = float(value)
    except OverflowError:  # an int beyond float64
        x = math.inf
    return "" if math.isfinite(x) else f"{type(value).__name__} {show_value(value)} (not finite)"


class PythonTerm(Term):
    """``f(stats)`` with ``f`` a user's JAX function imported from ``"pkg.module:func"``.

    The module is looked up in the config file's directory first, then on ``sys.path``
    (see :func:`_search_path`). Trust model: a config that names Python code runs it,
    like a Makefile.
    """

    type: Literal["python"] = "python"
    function: str | None = None
    _fn: Callable | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> PythonTerm:
        if self.function is None:
            raise _fail("function", "a python term needs 'function: pkg.module:func'")
        if not _FUNCTION.match(self.function):
            raise _fail("function", f"expected 'pkg.module:func', got '{self.function}'")
        return self

    def bind(self, ctx: TermContext, where: str) -> None:
        assert self.function is not None
        self._fn = _import_function(self.function, f"{where}.function", ctx.base_dir)

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        assert self._fn is not None and self.function is not None, "bind() first"
        return _call_user(self._fn, self.function, stats, ctx.source)


def _lk():
    """:mod:`analysis.likelihood`, imported on first use: it loads evermore, optimistix
    and flax (~2 s), which a config without likelihood terms never needs."""
    from analysis import likelihood

    return likelihood


class _LikelihoodTerm(Term):
    """Base of the binned-likelihood terms (:mod:`analysis.likelihood`): they read the
    model's templates (``ctx.likelihood_states(stats)``, ``ctx.likelihood_model``)."""

    def bind(self, ctx: TermContext, where: str) -> None:
        if getattr(ctx, "likelihood_model", None) is None:
            kind = getattr(self, "type", "this term")
            raise ConfigError(
                f"{where}: {kind} needs a 'likelihood:' section (channels of histograms)"
            )

    def reads(self) -> frozenset[str]:
        return frozenset()  # the templates only

    def check(self, stats: dict[str, Any], ctx: TermContext) -> None:
        """Refuse unusable templates (one line naming channel, sample and bin), a
        ``mu = 0`` fit or a limit that did not converge (:class:`analysis.likelihood.FitError`)."""
        states = ctx.likelihood_states(stats)  # type: ignore[attr-defined]
        model = ctx.likelihood_model  # type: ignore[attr-defined]
        lk = _lk()
        lk.check_templates(lk.templates(states, model), model, lk.edges(states, model))
        if isinstance(self, DiscoverySignificanceTerm):
            fit = lk.significance(states, model, max_steps=self.max_steps).fit
            lk.raise_for_fit(fit, step="mu = 0 profile")
        if isinstance(self, ClsUpperLimitTerm):
            lk.raise_for_limit(lk.cls_limit(states, model, level=self.level,
                                            max_steps=self.max_steps))


class DiscoverySignificanceTerm(_LikelihoodTerm):
    """``-Z``: the expected (Asimov, mu = 1) discovery significance of the binned model
    with every nuisance profiled (:func:`analysis.likelihood.discovery_significance`);
    ``gradient``: ``envelope`` (default) or ``implicit`` (optimistix's implicit adjoint)."""

    type: Literal["discovery_significance"] = "discovery_significance"
    gradient: Literal["envelope", "implicit"] = "envelope"
    max_steps: int = Field(default=FIT_MAX_STEPS, ge=1)  # of the mu = 0 profile fit

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        return -_lk().discovery_significance(
            ctx.likelihood_states(stats), ctx.likelihood_model,  # type: ignore[attr-defined]
            gradient=self.gradient, max_steps=self.max_steps,
        )


class MuUncertaintyTerm(_LikelihoodTerm):
    """``sigma_mu``: the expected uncertainty on the signal strength with every nuisance
    profiled (:func:`analysis.likelihood.mu_uncertainty`), to minimise."""

    type: Literal["mu_uncertainty"] = "mu_uncertainty"

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        return _lk().mu_uncertainty(
            ctx.likelihood_states(stats), ctx.likelihood_model  # type: ignore[attr-defined]
        )


class ClsUpperLimitTerm(_LikelihoodTerm):
    """``mu_up``: the expected CLs upper limit on the signal strength at ``level`` (0.05:
    95% CL; asymptotic ``q~mu`` on background-only Asimov data, every nuisance profiled:
    :func:`analysis.likelihood.upper_limit`), to minimise."""

    type: Literal["cls_upper_limit"] = "cls_upper_limit"
    level: float = Field(default=0.05, gt=0, lt=1)
    max_steps: int = Field(default=FIT_MAX_STEPS, ge=1)  # of each profile fit

    def loss(self, stats: dict[str, Any], ctx: TermContext) -> Any:
        return _lk().upper_limit(
            ctx.likelihood_states(stats), ctx.likelihood_model,  # type: ignore[attr-defined]
            level=self.level, max_steps=self.max_steps,
        )


# The config's union of terms, told apart by ``type``: add a new term class here.
_TERMS = (SignificanceTerm, TargetTerm, PythonTerm, DiscoverySignificanceTerm, MuUncertaintyTerm,
          ClsUpperLimitTerm)
ObjectiveTerm = Annotated[Union[_TERMS], Field(discriminator="type")]  # noqa: UP007
TERM_TYPES: tuple[str, ...] = tuple(t.model_fields["type"].default for t in _TERMS)
