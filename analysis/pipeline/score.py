"""Learned scores in a plan: their static description and their per-chunk columns.

A :class:`ScoreSpec` (built by :func:`score_specs` from ``config.scores``,
:mod:`analysis.config.score`) says which columns feed the network and where its
parameters sit in the plan's full parameter vector ``theta``: ``n_weights`` entries
from ``start`` (the equinox :class:`~analysis.stats.MLP`'s leaves, raveled in pytree
order), then ``n_inputs`` means and ``n_inputs`` standard deviations.

:func:`with_scores` adds each score's values to a chunk's padded arrays as one more
column, ``"C:score.NAME"`` (per object of collection ``C``: object-level) or
``"event:score.NAME"`` (event-level), so the kernels cut it like any field or branch:
``score = MLP((x - mean) / std)`` (:func:`analysis.stats.mlp.score`), a JAX function
of ``theta`` (differentiable in the weights). Padding entries get a finite score and
zero weight. Empty chunks give empty columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import jax.numpy as jnp

from analysis.config.score import SCORE_PREFIX, score_inputs, template
from analysis.stats._params import ParamSpec, param_spec
from analysis.stats.mlp import Standardisation, score

if TYPE_CHECKING:
    from analysis.stats._mlpnet import MLP

__all__ = ["ScoreSpec", "network", "score_specs", "with_scores"]


@dataclass(frozen=True)
class ScoreSpec:
    """One learned score of a plan (module docstring). ``inputs``: ``(key, absolute)``
    per input, ``key`` a field of ``collection`` (object-level, ``set`` its set) or a
    per-event branch (event-level, ``set``/``collection`` ``None``)."""

    name: str
    set: str | None
    collection: str | None
    inputs: tuple[tuple[str, bool], ...]
    hidden: tuple[int, ...]
    activation: str
    start: int
    n_weights: int

    @property
    def column(self) -> str:
        """The column the kernels read: ``score.NAME``."""
        return SCORE_PREFIX + self.name

    @property
    def n_inputs(self) -> int:
        return len(self.inputs)

    @property
    def stop(self) -> int:
        """One past the last of its parameters (weights, means, stds)."""
        return self.start + self.n_weights + 2 * self.n_inputs


@lru_cache(maxsize=64)
def _spec(n_inputs: int, hidden: tuple[int, ...], activation: str) -> tuple[MLP, ParamSpec]:
    net = template(n_inputs, hidden, activation)
    return net, param_spec(net, "score")


def network(spec: ScoreSpec, theta) -> tuple[MLP, Standardisation]:
    """The score's network and standardisation with their values from ``theta`` (JAX)."""
    _, ps = _spec(spec.n_inputs, spec.hidden, spec.activation)
    w = spec.start + spec.n_weights
    net = ps.unflatten(theta[spec.start : w])
    n = spec.n_inputs
    return net, Standardisation(theta[w : w + n], theta[w + n : w + 2 * n])


def score_specs(config, names: tuple[str, ...], collection_of) -> tuple[ScoreSpec, ...]:
    """The plan's :class:`ScoreSpec` s (``names``: the full parameter names;
    ``collection_of(set)``: a set's collection)."""
    out = []
    for cfg in config.scores:
        set_name, nodes = score_inputs(cfg, config.objects)
        hidden = tuple(cfg.mlp.hidden)
        _, ps = _spec(len(nodes), hidden, cfg.mlp.activation)
        first = f"{SCORE_PREFIX}{cfg.score}.{ps.names[0]}"
        inputs = tuple(((n.field if set_name is not None else n.head), n.absolute) for n in nodes)
        out.append(ScoreSpec(
            cfg.score, set_name, None if set_name is None else collection_of(set_name),
            inputs, hidden, cfg.mlp.activation, names.index(first), ps.size,
        ))
    return tuple(out)


def with_scores(theta, arrays: dict, scores: tuple[ScoreSpec, ...]) -> dict:
    """``arrays`` with one ``score.NAME`` column per score (module docstring)."""
    if not scores:
        return arrays
    out = dict(arrays)
    for spec in scores:
        prefix = "event" if spec.collection is None else spec.collection
        cols = []
        for key, absolute in spec.inputs:
            x = arrays[f"{prefix}:{key}"]
            cols.append(jnp.abs(x) if absolute else x)
        net, standard = network(spec, theta)
        out[f"{prefix}:{spec.column}"] = score(net, cols, standard=standard)
    return out
