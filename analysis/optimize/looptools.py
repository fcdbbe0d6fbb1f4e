"""The optimisation loop's parts that hold no run state: the annealing schedule of the
cut widths, the optimiser's update as one program, the unit coordinates of the
parameters, the checkpoint's fingerprint and its reading and writing.

:class:`analysis.optimize.loop.Optimization` uses them; every name is re-exported
there (see that module's docstring for the schedule and the coordinates).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax

from analysis.config.loader import Config
from analysis.optimize import checkpoint as _ckpt
from analysis.stats._programs import program_call

__all__ = [
    "Coordinates",
    "annealed_widths",
    "config_fingerprint",
    "jitted_update",
    "load_checkpoint",
    "save_checkpoint",
    "update_description",
]


def annealed_widths(
    w0: np.ndarray, step: int, config: Config, *, steps: int | None = None
) -> np.ndarray:
    """Cut widths at ``step`` (see the module docstring); ``steps``: the length of the
    schedule (default ``optimizer.steps``; a run extended with ``--resume --steps N``
    keeps its first length, so its path is unchanged and it goes on at the final widths)."""
    a = config.optimizer.anneal
    steps = config.optimizer.steps if steps is None else steps
    frac = 1.0 if steps <= 1 else min(step / (steps - 1), 1.0)
    if a.schedule == "none":
        factor = 1.0
    elif a.schedule == "linear":
        factor = 1.0 - (1.0 - a.final_width_factor) * frac
    else:
        factor = a.final_width_factor**frac
    return np.asarray(w0, dtype=np.float64) * factor


def jitted_update(transform: optax.GradientTransformationExtraArgs,
                  described: str | None = None) -> Any:
    """``(g, state, u, value) -> (u + update, state)``: one step of the first-order
    optax ``transform`` (``update`` with ``value=`` and no Hessian, then
    :func:`optax.apply_updates`) as one jitted program.

    Parameters
    ----------
    transform : optax.GradientTransformationExtraArgs
        The optimiser (:attr:`analysis.optimize.optimizers.Optimizer.transform`).
    described : str, optional
        Everything ``transform`` is made from (:func:`update_description`): the
        program is then compiled once per process under it, ahead of time
        (:func:`analysis.stats._programs.program_call`). ``None``: ``jax.jit``.

    Returns
    -------
    callable
        ``step(g, state, u, value)``: the new parameters (before clipping to the
        bounds) and the new optimiser state, as JAX arrays. Fused by XLA, its rounding
        may differ from the eager update's in the last place (the demo's path: 3e-7
        relative after 60 steps, below every printed figure).
    """

    def step(g: Any, state: Any, u: Any, value: Any) -> tuple[Any, Any]:
        updates, state = transform.update(g, state, u, value=value, hessian=None)
        return optax.apply_updates(u, updates), state

    if described is None:
        return jax.jit(step)

    def run(g: Any, state: Any, u: Any, value: Any, *, optimizer: str) -> tuple[Any, Any]:
        return step(g, state, u, value)

    return lambda g, state, u, value: program_call("optax_update", run, g, state, u, value,
                                                  optimizer=described)


def update_description(config: Config) -> str:
    """What :func:`analysis.optimize.optimizers.make_optimizer` builds the optax
    optimiser from (``config.optimizer``, every field): the key of its update program
    (:func:`jitted_update`) in this process."""
    return repr(config.optimizer)


class Coordinates:
    """Map trainable parameters to [0, 1]^P by their bounds, and back."""

    def __init__(self, config: Config, names: tuple[str, ...]) -> None:
        self.names = names
        # Unbounded entries (a learned score's weights) keep their own scale: u = theta.
        b = [config.bounds_of(n) or (np.nan, np.nan) for n in names]
        b = np.array(b, dtype=np.float64).reshape(len(names), 2)
        self.bounded = np.isfinite(b[:, 0])
        self.lower = np.where(self.bounded, b[:, 0], 0.0)
        self.upper = np.where(self.bounded, b[:, 1], 1.0)
        self.scale = self.upper - self.lower

    def clip(self, u: Any) -> np.ndarray:
        """``u`` clipped to [0, 1] where the parameter is bounded."""
        u = np.asarray(u, dtype=np.float64)
        return np.where(self.bounded, np.clip(u, 0.0, 1.0), u)

    def to_u(self, theta: Any) -> np.ndarray:
        """Unit coordinates of parameter values (in ``names`` order)."""
        return (np.asarray(theta) - self.lower) / self.scale

    def to_theta(self, u: Any) -> np.ndarray:
        """Parameter values of unit coordinates."""
        return self.lower + np.asarray(u) * self.scale

    def chain(self, u: Any, grad: Any, hess: Any = None) -> tuple[np.ndarray, Any]:
        """Gradient (and Hessian) in unit coordinates from those in the parameters
        (``u``: the point; the map is linear here, trainable edges' is not:
        :mod:`analysis.optimize.edgecoords`)."""
        g_u = np.asarray(grad) * self.scale
        return g_u, None if hess is None else np.asarray(hess) * np.outer(self.scale,
                                                                           self.scale)


def config_fingerprint(config: Config) -> str:
    """Hash of everything that changes the optimisation (the checkpoint must match it).

    Not ``optimizer.steps`` nor ``optimizer.replicas`` (the final report's bootstrap) nor
    ``optimizer.keep_best``, ``optimizer.validation.every`` / ``keep_best`` (what is
    evaluated after the loop): the
    step budget is the path's length, not the path
    (``--resume --steps N`` extends a run; the annealing keeps its first length)."""
    after = {"steps": True, "replicas": True, "keep_best": True,
             "validation": {"every", "keep_best"}}
    data = config.model_dump(
        mode="json", exclude={"output": True, "executor": True, "optimizer": after}
    )
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def save_checkpoint(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically, data only (see :mod:`analysis.optimize.checkpoint`)."""
    _ckpt.save_checkpoint(path, data)


def load_checkpoint(path: Path, fingerprint: str, **expect: Any) -> dict[str, Any]:
    """Read and validate a checkpoint, never unpickling (see :mod:`analysis.optimize.checkpoint`)."""
    return _ckpt.load_checkpoint(path, fingerprint, **expect)
