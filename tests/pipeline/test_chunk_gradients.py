"""Exact gradients, chunk by chunk and merged.

- Each chunk's Jacobian (``evaluate_chunk``) equals central finite differences of
  that chunk's own states, and its Hessian (``order=2``) equals finite differences
  of its Jacobian.
- The Jacobian/Hessian of the statistics of the *merged* chunk states equal
  ``jax.jacfwd``/``jax.hessian`` of the same statistics computed on the whole file
  held in memory as one JAX computation.
- The gradients ``Evaluator`` reports equal central finite differences of
  ``Evaluator`` itself (a full coffea pass at ``theta +- h``).

States hold a constant centre (no gradient) plus a differentiable offset; the
centre moves with ``theta``, so they are compared as ``mean = center + dmean``.
"""

from __future__ import annotations

from functools import partial, reduce
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.config.loader import config_from_dict
from analysis.driver.runner import Evaluator
from analysis.pipeline.backend import chunk_state
from analysis.pipeline.backends.jax.passes import chunk_states, evaluate_chunk
from analysis.pipeline.layout import pad_columns
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.pipeline.results import dataset_report, derivatives, statistics
from tests.chunked_helpers import (
    DY,
    NANOAOD_WARNINGS,
    TTBAR,
    analysis_config,
    flatten,
    read_columns,
    slice_columns,
)
from tests.conftest import central_difference

REL_STEP = 1e-5  # central differences: truncation ~(h/width)^2, rounding ~1e-16/h
FD_RTOL = 1e-6

pytestmark = NANOAOD_WARNINGS


@pytest.fixture(scope="module")
def setup():
    config = config_from_dict(analysis_config())
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names])
    widths = np.array(initial_widths(config))
    return config, plan, theta, widths


@pytest.fixture(scope="module")
def columns(setup):
    _, plan, _, _ = setup
    return {"ttbar": read_columns(TTBAR, plan), "dy": read_columns(DY, plan)}


def _chunks(cols) -> list:
    # Irregular boundaries, including a single-event chunk and an empty one.
    n = cols.n_events
    edges = sorted({0, 7, 8, n // 2, (3 * n) // 4, n - 1, n})
    return [slice_columns(cols, a, b) for a, b in zip(edges[:-1], edges[1:], strict=True)] + [
        slice_columns(cols, n, n)
    ]


def state_leaves(tree: dict) -> dict[str, np.ndarray]:
    """Flat ``{path: array}`` of a states pytree (values, Jacobian or Hessian alike),
    with each ``center*``/``dmean*`` pair replaced by their sum (the mean)."""
    out = {
        "selected_sumw": np.asarray(tree["selected_sumw"]),
        "selected_sumw2": np.asarray(tree["selected_sumw2"]),
    }
    for name, entry in tree["observables"].items():
        for kind, named in entry.items():
            fields = named._asdict()
            for field, leaf in fields.items():
                if field.startswith("center"):
                    continue
                if field.startswith("dmean"):
                    leaf = leaf + fields["center" + field[len("dmean") :]]
                out[f"{name}/{kind}/{field}"] = np.asarray(leaf)
    return out


def _assert_fd_close(analytic: np.ndarray, fd: np.ndarray, typical: float, what: str) -> bool:
    """Check one leaf; return whether it was non-trivial (not ~zero on both sides).

    Entries are compared relative to the largest entry of the leaf, or to
    ``typical`` (the size of the same derivative on the whole file) if larger: a
    chunk's state can be zero up to rounding (M4 of a single selected event is
    ~1e-64), and finite differences of rounding noise carry no information.
    """
    scale = max(np.max(np.abs(analytic)), np.max(np.abs(fd)))
    atol = FD_RTOL * max(scale, typical)
    np.testing.assert_allclose(analytic, fd, rtol=FD_RTOL, atol=atol, err_msg=what)
    return bool(scale > 1e-6 * typical)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["ttbar", "dy"])
def test_chunk_jacobian_and_hessian_match_finite_differences(setup, columns, dataset) -> None:
    _, plan, theta, widths = setup
    cols = columns[dataset]
    arrays, shapes = pad_columns(cols, plan)
    _, jac_all, hess_all = evaluate_chunk(theta, widths, arrays, plan, shapes, order=2)
    typical_jac = {k: float(np.max(np.abs(v))) for k, v in state_leaves(jac_all).items()}
    typical_hess = {k: float(np.max(np.abs(v))) for k, v in state_leaves(hess_all).items()}
    checked = nontrivial = 0
    for cols in _chunks(columns[dataset]):
        arrays, shapes = pad_columns(cols, plan)
        value, jac, hess = evaluate_chunk(theta, widths, arrays, plan, shapes, order=2)
        jac_l, hess_l = state_leaves(jac), state_leaves(hess)
        if state_leaves(value)["selected_sumw"] == 0:
            # No selected weight (empty chunk, or events without 2 jets): every
            # derivative must be exactly zero, not NaN.
            for leaf in (*jac_l.values(), *hess_l.values()):
                assert np.all(leaf == 0)
            continue

        def leaves(t, order, part, arrays=arrays, shapes=shapes):
            return state_leaves(evaluate_chunk(t, widths, arrays, plan, shapes, order=order)[part])

        steps = REL_STEP * np.abs(theta)
        fd_value = central_difference(
            lambda t: leaves(t, 0, 0), theta, steps, indices=plan.trainable
        )
        fd_jac = central_difference(lambda t: leaves(t, 1, 1), theta, steps, indices=plan.trainable)
        for k in range(len(plan.trainable)):
            for key in jac_l:
                nontrivial += _assert_fd_close(
                    jac_l[key][..., k],
                    fd_value[key][..., k],
                    typical_jac[key],
                    f"d {key} / d theta{k}",
                )
                # Row k of the Hessian is the derivative of the Jacobian along theta_k.
                nontrivial += _assert_fd_close(
                    hess_l[key][..., k, :],
                    fd_jac[key][..., k],
                    typical_hess[key],
                    f"d2 {key} / d theta{k} d theta",
                )
        checked += 1
    assert checked >= 4
    # 18 state leaves x 2 parameters x (Jacobian, Hessian row) per chunk; a few are
    # legitimately zero (e.g. M2 of a chunk with one selected event).
    assert nontrivial >= 0.8 * checked * 18 * 2 * 2


@partial(jax.jit, static_argnames=("plan", "shapes"))
def _whole_file(t, theta, widths, arrays, plan, shapes):
    """Statistics of a whole file held as one chunk, with their Jacobian and Hessian
    w.r.t. the trainable parameters, by JAX directly (no states, no merging)."""

    def stats(t):
        full = theta.at[jnp.asarray(plan.trainable)].set(t)
        return statistics(chunk_states(full, widths, arrays, plan, shapes), plan)

    return stats(t), jax.jacfwd(stats)(t), jax.jacfwd(jax.jacfwd(stats))(t)


def _close_trees(a: Any, b: Any, rtol: float, what: str) -> None:
    # By key: JAX returns dicts with sorted keys, so the leaf order may differ.
    fa, fb = dict(flatten(a)), dict(flatten(b))
    assert fa.keys() == fb.keys()
    for key, x in fa.items():
        x, y = np.asarray(x), np.asarray(fb[key])
        scale = max(np.max(np.abs(x)), np.max(np.abs(y)))
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale, err_msg=f"{what} {key}")


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["ttbar", "dy"])
def test_merged_derivatives_equal_jax_on_whole_file(setup, columns, dataset) -> None:
    _, plan, theta, widths = setup
    cols = columns[dataset]
    merged = reduce(
        lambda a, b: a + b, (chunk_state(c, plan, theta, widths, order=2) for c in _chunks(cols))
    )
    assert merged.events == cols.n_events and merged.chunks == len(_chunks(cols))
    values, jacs, hesses = merged.taylor()
    value, grad, hess = derivatives(lambda s: statistics(s, plan), values, jacs, hesses, order=2)

    arrays, shapes = pad_columns(cols, plan)
    want_value, want_grad, want_hess = _whole_file(
        jnp.asarray(theta[list(plan.trainable)]),
        jnp.asarray(theta),
        jnp.asarray(widths),
        arrays,
        plan,
        shapes,
    )
    leaves = [np.asarray(x) for _, x in flatten(want_value)]
    assert all(np.isfinite(x).all() for x in leaves), "all statistics should be defined"
    # Same numbers up to rounding: the chunks' merge is exact, not approximate.
    _close_trees(value, want_value, 1e-10, "value")
    _close_trees(grad, want_grad, 1e-9, "gradient")
    _close_trees(hess, want_hess, 1e-8, "hessian")


def test_evaluator_gradients_equal_finite_differences_of_evaluate(tmp_path) -> None:
    data = analysis_config({"ttbar": {"files": ["skhep:" + TTBAR.name], "weight": "genWeight"}})
    config = config_from_dict(data)
    with Evaluator(config, executor="iterative", chunksize=100) as ev:
        assert len(ev.chunks) == 2  # so that the reported gradient is a merged one
        plan = ev.plan
        base = dataset_report(ev.run()["ttbar"], plan)
        params = config.initial_params()
        flat_base = dict(flatten(base))
        names = plan.trainable_names
        x = np.array([params[n] for n in names])

        def report(v: np.ndarray) -> dict[str, float]:
            run = ev.run(dict(zip(names, (float(t) for t in v), strict=True)))
            report = dict(flatten(dataset_report(run["ttbar"], plan)))
            return {k: v for k, v in report.items() if k in selected}

        # Values (or null) of the statistics and yields, and their gradient keys.
        selected = {}
        for key in flat_base:
            if key.endswith("/value"):
                selected[key] = f"{key[: -len('value')]}grad/"
            elif key in ("selected_sumw", "selected_sumw2"):
                selected[key] = f"{key}_grad/"
        fd = central_difference(report, x, REL_STEP * x)
        for j, name in enumerate(names):
            checked = 0
            for key, value in flat_base.items():
                if key not in selected:
                    continue
                grad_key = selected[key] + name
                assert flat_base[grad_key] == pytest.approx(fd[key][j], rel=FD_RTOL), (
                    key,
                    name,
                    value,
                )
                checked += 1
            assert checked == 2 + 2 * 5 + 2 + 4
