"""A learned score's values in one chunk, for its distribution plots.

:func:`score_entries` gives the score of every object of its collection (an
object-level score) or of every event (event-level), with its event's weight, at a
full parameter vector ``theta``: the distribution the score's cut acts on, before any
cut (:func:`analysis.cli.plots.plot_scores`). The values are the kernels' own
``score.NAME`` column (:func:`analysis.pipeline.score.with_scores` on the padded
arrays), unpadded.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from analysis.pipeline.layout import ChunkColumns, pad_columns
from analysis.pipeline.plan import Plan
from analysis.pipeline.score import ScoreSpec, with_scores

__all__ = ["score_entries"]


@partial(jax.jit, static_argnames=("scores",))
def _column(theta, arrays, scores: tuple[ScoreSpec, ...]):
    (spec,) = scores
    prefix = "event" if spec.collection is None else spec.collection
    return with_scores(theta, arrays, scores)[f"{prefix}:{spec.column}"]


def score_entries(cols: ChunkColumns, plan: Plan, theta, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, w)``: score ``name`` per object of its collection (object-level; objects in
    the chunk's order) or per event (event-level) and the event weight of each entry.
    float64 numpy, no padding; an empty chunk gives empty arrays. ``KeyError`` for a
    name that is not one of the plan's scores."""
    spec = next((s for s in plan.scores if s.name == name), None)
    if spec is None:
        raise KeyError(f"no score {name!r} in the plan; scores: {[s.name for s in plan.scores]}")
    arrays, _ = pad_columns(cols, plan)
    column = np.asarray(_column(jnp.asarray(theta, dtype=jnp.float64), arrays, (spec,)),
                        dtype=np.float64)
    weight = np.asarray(cols.weight, dtype=np.float64)
    if spec.collection is None:
        return column[: cols.n_events], weight
    counts = cols.collections.get(spec.collection, (np.zeros(0, np.int64), {}))[0]
    weight = np.repeat(weight, np.asarray(counts, dtype=np.int64))
    return column[: weight.size], weight
