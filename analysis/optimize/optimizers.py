"""Optimisers with one interface: optax's ``GradientTransformationExtraArgs``.

:func:`make_optimizer` turns ``config.optimizer`` into an :class:`Optimizer`: an optax
transformation and the derivative order its update needs. The loop
(:mod:`analysis.optimize.loop`) calls every optimiser the same way::

    updates, state = opt.transform.update(g, state, u, value=objective, hessian=h)

Plain optax optimisers (``adam``, ``sgd``, ...) ignore the extra arguments
(:func:`optax.with_extra_args_support`); :func:`newton_trust_region` uses them.

Newton (``method: newton``): the exact Hessian comes from the same pass (chunk
Hessians merge like Jacobians); a trust region in unit coordinates with the usual
actual/predicted-decrease ratio test accepts or rejects each step.
"""

from __future__ import annotations

import difflib
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import optax

from analysis.config.loader import Config
from analysis.errors import ConfigError

__all__ = [
    "NewtonState",
    "Optimizer",
    "make_optimizer",
    "newton_trust_region",
    "newton_update",
]

# optax optimisers offered as spelling suggestions for an unknown name.
_KNOWN = (
    "adam", "adamw", "sgd", "rmsprop", "adagrad", "lion", "lbfgs", "nadam", "adabelief",
    "yogi", "radam", "amsgrad", "adamax", "novograd", "fromage", "lamb", "lars", "sm3",
    "noisy_sgd", "adafactor", "adadelta",
)  # fmt: skip


class Optimizer(NamedTuple):
    """An optax transformation and the derivative ``order`` its update needs.

    ``order`` is 1 (gradient) or 2 (gradient and Hessian, passed as ``hessian=``).
    """

    transform: optax.GradientTransformationExtraArgs
    order: int


def _optax_optimizer(config: Config) -> optax.GradientTransformation:
    """Any optax optimiser by name, with an optional optax schedule for the learning rate."""
    opt = config.optimizer
    where = f"{config.source}: optimizer"
    factory = getattr(optax, opt.name, None)
    if factory is None or not callable(factory) or opt.name.startswith("_"):
        names = [n for n in _KNOWN if hasattr(optax, n)]
        close = difflib.get_close_matches(opt.name, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; e.g. {', '.join(names[:6])}"
        raise ConfigError(f"{where}.name: unknown optax optimiser {opt.name!r}{hint}")
    lr: Any = opt.learning_rate
    if opt.schedule is not None:
        sched = getattr(optax, opt.schedule.name, None)
        if sched is None or not callable(sched):
            raise ConfigError(
                f"{where}.schedule.name: unknown optax schedule {opt.schedule.name!r}"
            )
        kwargs = dict(opt.schedule.kwargs)
        kwargs.setdefault("init_value", opt.learning_rate)
        try:
            lr = sched(**kwargs)
        except TypeError as err:
            raise ConfigError(f"{where}.schedule: {err}") from None
    try:
        return factory(learning_rate=lr, **opt.kwargs)
    except TypeError as err:
        raise ConfigError(f"{where}: cannot build optax.{opt.name}: {err}") from None


def make_optimizer(config: Config) -> Optimizer:
    """The configured optimiser: Newton's trust region, or an optax one by ``name``.

    The optax optimiser is built (and its name checked) for ``method: newton`` too,
    so a misspelt name is an error whatever the method.
    """
    first_order = optax.with_extra_args_support(_optax_optimizer(config))
    if config.optimizer.method == "newton":
        return Optimizer(newton_trust_region(), order=2)
    return Optimizer(first_order, order=1)


def newton_update(g_u: np.ndarray, h_u: np.ndarray, radius: float = 0.1) -> np.ndarray:
    """A damped Newton step in unit coordinates, inside a trust region of ``radius``.

    ``(H + lambda I) d = -g`` with ``lambda`` making the matrix positive definite; the
    step is shortened to ``radius`` if longer.
    """
    h = 0.5 * (h_u + h_u.T)
    eig = np.linalg.eigvalsh(h) if h.size else np.zeros(0)
    lam = max(0.0, -float(eig.min(initial=0.0))) + 1e-6 * max(
        1.0, float(np.abs(eig).max(initial=0.0))
    )
    d = -np.linalg.solve(h + lam * np.eye(len(g_u)), g_u)
    norm = float(np.linalg.norm(d))
    return d * (radius / norm) if norm > radius else d


class NewtonState(NamedTuple):
    """Trust-region state: the radius, the last accepted point ``u`` with its objective,
    gradient ``g`` and Hessian ``h``, and the last step ``d`` with its predicted decrease.

    Fixed shapes (a pytree of float64 arrays); ``started`` is 0 before the first step.
    """

    radius: Any
    started: Any
    u: Any
    obj: Any
    g: Any
    h: Any
    d: Any
    pred: Any


def newton_trust_region(
    radius: float = 0.1, *, max_radius: float = 0.5, lower: float = 0.0, upper: float = 1.0
) -> optax.GradientTransformationExtraArgs:
    """Newton's method with a trust region, as an optax transformation.

    ``update(g, state, params, *, value, hessian)`` needs the objective ``value`` and
    the ``hessian`` at ``params`` (one pass per step, as first order). The ratio
    ``rho`` of the actual to the predicted decrease of the last step decides:
    ``rho < 0`` rejects it (back to the last accepted point, radius / 4),
    ``rho < 1/4`` accepts but shrinks the radius, ``rho > 3/4`` with a step at the
    radius widens it (up to ``max_radius``). Steps stay inside ``[lower, upper]``.
    With annealing the objectives of successive steps also differ by the change of
    widths. Runs eagerly in numpy float64 (P is a handful of parameters).
    """

    def init(params: Any) -> NewtonState:
        p = int(np.size(params))
        nan = np.float64(np.nan)
        return NewtonState(
            radius=np.float64(radius),
            started=np.float64(0.0),
            u=np.full(p, np.nan),
            obj=nan,
            g=np.full(p, np.nan),
            h=np.full((p, p), np.nan),
            d=np.zeros(p),
            pred=nan,
        )

    def update(
        updates: Any, state: NewtonState, params: Any = None, *, value: Any = None,
        hessian: Any = None, **extra: Any,
    ) -> tuple[Any, NewtonState]:  # fmt: skip
        if params is None or value is None or hessian is None:
            raise ValueError("newton_trust_region needs params, value= and hessian=")
        u = np.asarray(params, dtype=np.float64)
        obj = float(value)
        g_u = np.asarray(updates, dtype=np.float64)
        h_u = np.asarray(hessian, dtype=np.float64)
        st = NewtonState(*(np.asarray(x, dtype=np.float64) for x in state))
        r = float(st.radius)
        if not st.started:
            accept = True
        else:
            rho = (float(st.obj) - obj) / max(float(st.pred), 1e-300)
            accept = rho >= 0
            if rho < 0.25:
                r /= 4.0
            elif rho > 0.75 and np.linalg.norm(st.d) >= 0.99 * r:
                r = min(2.0 * r, max_radius)
        base_u, base_obj, g, h = (np.array(u), obj, g_u, h_u) if accept else (st.u, st.obj, st.g, st.h)
        d = newton_update(g, h, radius=r)
        d = np.clip(base_u + d, lower, upper) - base_u  # the step actually taken (bounds)
        pred = -(float(g @ d) + 0.5 * float(d @ h @ d))
        new = NewtonState(
            radius=np.float64(r),
            started=np.float64(1.0),
            u=base_u,
            obj=np.float64(base_obj),
            g=g,
            h=h,
            d=d,
            pred=np.float64(pred),
        )
        return jnp.asarray(base_u + d - u), new

    return optax.GradientTransformationExtraArgs(init, update)
