"""The network weights' own learning rate: ``optax.multi_transform`` over the vector.

The loop optimises one vector ``u`` of unit coordinates (cut thresholds scaled by their
bounds; a learned score's weights, unbounded, as they are). :func:`split_optimizer`
labels each entry ``"cuts"`` or ``"score"`` and runs ``optax.multi_transform`` with
the configured optimiser at ``optimizer.learning_rate`` for the cuts and at
``optimizer.score_learning_rate`` for the weights, on ``{"cuts": u[cuts], "score":
u[score]}``; the updates are put back in vector order. Its state is a pytree of arrays
(checkpointed as data like any optax state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from analysis.config.score import SCORE_PREFIX
from analysis.pipeline.score import network
from analysis.select.weights import save_weights
from analysis.stats.mlp import Standardisation

__all__ = ["score_mask", "split_optimizer", "write_scores"]


def score_mask(names: tuple[str, ...]) -> np.ndarray:
    """True for the entries that are a learned score's parameters."""
    return np.array([n.startswith(SCORE_PREFIX) for n in names], dtype=bool)


def split_optimizer(config: Any, mask: np.ndarray, build) -> optax.GradientTransformationExtraArgs:
    """``build(learning_rate)`` (an optax transformation) for the cut entries at
    ``optimizer.learning_rate`` and for the ``mask`` entries at
    ``optimizer.score_learning_rate`` (module docstring)."""
    opt = config.optimizer
    lr_score = opt.score_learning_rate if opt.score_learning_rate is not None else opt.learning_rate
    inner = optax.multi_transform(
        {"cuts": optax.with_extra_args_support(build(opt.learning_rate)),
         "score": optax.with_extra_args_support(build(lr_score))},
        {"cuts": "cuts", "score": "score"},
    )
    idx_s = jnp.asarray(np.flatnonzero(mask))
    idx_c = jnp.asarray(np.flatnonzero(~mask))

    def split(v):
        v = jnp.asarray(v)
        return {"cuts": v[idx_c], "score": v[idx_s]}

    def join(d, like):
        out = jnp.zeros_like(jnp.asarray(like))
        return out.at[idx_c].set(d["cuts"]).at[idx_s].set(d["score"])

    def init(params):
        return inner.init(split(params))

    def update(updates, state, params=None, **extra):
        new, state = inner.update(split(updates), state,
                                  None if params is None else split(params), **extra)
        return join(new, updates), state

    return optax.GradientTransformationExtraArgs(init, update)


def write_scores(plan: Any, theta: Any, outdir: Path) -> list[Path]:
    """``score_NAME.npz`` (weights and standardisation, data only:
    :func:`analysis.select.weights.save_weights`) of every learned score of ``plan`` at
    the full parameter vector ``theta``, in ``outdir``; the paths written. The file is
    a valid ``init: {file: ...}`` for the same score."""
    out = []
    theta = jnp.asarray(theta, dtype=jnp.float64)
    for spec in plan.scores:
        net, standard = network(spec, theta)
        standard = Standardisation(np.asarray(standard.mean), np.asarray(standard.std))
        out.append(save_weights(Path(outdir) / f"score_{spec.name}.npz", net, standard=standard))
    return out
