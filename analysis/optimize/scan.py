"""The grid scan: the hard-cut objective at every point of a Cartesian grid, in one pass.

The driver (:meth:`analysis.driver.runner.Evaluator.run_grid`) evaluates the states of all
points per chunk (``vmap`` in batches, to bound memory); the objective and the
significance of every point then follow from the merged states. The command-line
entry (``diffcoffea scan``) is :func:`analysis.cli.parser.run_scan`.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis.config.loader import Config
from analysis.optimize.objectives import Objective

__all__ = ["grid_thetas", "scan"]


def grid_thetas(config: Config, param_names: tuple[str, ...], grid: dict[str, np.ndarray]):
    """``(points, thetas)``: the Cartesian product of ``grid`` (``(G, len(grid))``) and the
    full parameter vectors (``(G, len(param_names))``; parameters off the grid at init)."""
    init = config.initial_params()
    names = list(grid)
    points = np.array(list(itertools.product(*(grid[n] for n in names))), dtype=np.float64)
    thetas = np.tile(np.array([init[n] for n in param_names]), (len(points), 1))
    for j, n in enumerate(names):
        thetas[:, param_names.index(n)] = points[:, j]
    return points, thetas


def scan(config: Config, evaluator, grid: dict[str, np.ndarray]) -> dict[str, Any]:
    """Hard-cut objective on the Cartesian grid; all points computed in the same pass.

    Returns the scan.json structure: ``parameters`` (grid names), ``points``,
    ``objective`` and ``significance`` per point (``None`` where undefined: zero
    background yield or a non-finite objective), ``best``, ``n_points``, ``passes``.
    """
    objective = Objective(config, evaluator.plan)
    names = list(grid)
    points, thetas = grid_thetas(config, evaluator.plan.param_names, grid)
    states = evaluator.run_grid(thetas)
    values = {n: st.taylor()[0] for n, st in states.items()}
    sumw = {n: st.sumw for n, st in states.items()}
    events = {n: st.events for n, st in states.items()}

    def one(v):
        stats = objective.stats(v, sumw, events)
        return objective.value(stats), stats

    vals = jax.tree_util.tree_map(jnp.asarray, values)
    objs, stats = jax.vmap(one)(vals)
    objs = np.asarray(objs)
    bkg = (
        sum(np.asarray(stats[n]["yield"]) for n in objective.background)
        if objective.background
        else None
    )
    valid = np.isfinite(objs) & (bkg > 0 if bkg is not None else True)
    sig = None
    if objective.signal and objective.background:
        sig = np.asarray(
            jax.vmap(lambda v: objective.significance(objective.stats(v, sumw, events)))(vals)
        )
    best = int(np.nanargmin(np.where(valid, objs, np.inf))) if valid.any() else None
    return {
        "parameters": names,
        "points": points.tolist(),
        "objective": [float(x) if v else None for x, v in zip(objs, valid)],
        "significance": None
        if sig is None
        else [float(x) if v else None for x, v in zip(sig, valid)],
        "best": None
        if best is None
        else {
            "parameters": {n: float(points[best, j]) for j, n in enumerate(names)},
            "objective": float(objs[best]),
            "significance": None if sig is None else float(sig[best]),
        },
        "n_points": len(points),
        "passes": 1,
    }
