"""Forward mode in blocks of tangents: any number of trainable parameters on the lane kernels.

The numba kernels carry :data:`~analysis.select.lanes.arith.LANES`
lanes per differentiated quantity: the value and up to ``LANES - 1`` tangents, one per
trainable parameter (a cut's tangent goes to the lane of its parameter's position in
``plan.trainable``, :func:`analysis.pipeline.backends.numba._fasttables._par_index`).
A plan with more trainable parameters runs the same pass once per *block*: the plan
with ``trainable`` set to the block's parameters (a parameter outside it is held
constant: its cuts seed no lane), so each sweep gives the Jacobian's columns of its
block, and :func:`in_blocks` joins them along the trailing parameter axis. The values
are the first block's (lane 0 does not read the tangent lanes: every block gives the
same floats). Memory stays that of one sweep (the chunk's lanes), whatever the
number of parameters; time grows with the number of blocks (``ceil(P / (LANES - 1))``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from analysis.pipeline.backends.numba._fastpool import splits
from analysis.pipeline.plan import Plan

__all__ = ["in_blocks", "join", "plans", "split"]


def split(trainable: tuple[int, ...], most: int) -> list[tuple[int, ...]]:
    """``trainable`` in consecutive blocks of at most ``most`` (>= 1) parameters, as
    few blocks as that allows and their sizes as equal as possible (one block: the
    tuple itself)."""
    n = len(trainable)
    edges = splits(n, max(1, -(-n // most)))
    return [tuple(trainable[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def join(jacs: list[Any]) -> Any:
    """The Jacobian trees of consecutive blocks joined along their trailing parameter
    axis (one tree: itself)."""
    if len(jacs) == 1:
        return jacs[0]
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=-1), *jacs)


def plans(plan: Plan, order: int, most: int) -> tuple[Plan, ...]:
    """The plans of a pass's sweeps: ``(plan,)`` where it fits ``most`` tangents (or
    ``order`` is 0), else ``plan`` with each block of :func:`split` trainable (made once
    per pass: the kernels' memos of a plan's tables are kept by identity)."""
    if order < 1 or len(plan.trainable) <= most:
        return (plan,)
    return tuple(dataclasses.replace(plan, trainable=block)
                 for block in split(plan.trainable, most))


def in_blocks(sweeps: tuple[Plan, ...],
              sweep: Callable[[Plan], tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    """``(value, jac, extra)`` of a pass from ``sweep(plan)`` on each plan of
    ``sweeps`` (:func:`plans`): the values and ``extra`` (what else a sweep returns,
    parameter-free) of the first, the Jacobians joined (:func:`join`)."""
    value, jac, extra = sweep(sweeps[0])
    if len(sweeps) == 1:
        return value, jac, extra
    return value, join([jac] + [sweep(p)[1] for p in sweeps[1:]]), extra
