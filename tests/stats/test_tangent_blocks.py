"""Forward derivatives in blocks of tangents (issue 49: a pass's memory bounded by the
chunk, not by the parameter count): :func:`analysis.stats.taylor.value_and_derivatives`
with ``block`` tangents at a time equals ``jax.jacfwd`` (and forward over forward for the
Hessian) and the closed form; the default block follows the chunk's size; the
``tangent_block`` option of the backend reaches the JAX kernel.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from analysis.config.loader import config_from_dict
from analysis.pipeline.backend import Backend, chunk_state
from analysis.pipeline.backends.jax import passes
from analysis.pipeline.plan import build_plan, initial_widths
from analysis.stats.taylor import MIN_BLOCK, chunk_elements, tangent_block, value_and_derivatives
from tests.chunked_helpers import read_columns

REPO = Path(__file__).resolve().parents[2]
# the module (analysis.stats.derive, the package attribute, is the function)
derive_module = importlib.import_module("analysis.stats.derive")
P = 11
A = np.random.default_rng(0).normal(size=(5, P))
X = np.linspace(-1.0, 1.0, 400)


def fn(t):
    """``a = A sin(t)`` and ``b = sum_x exp(x t_0) t_1^2``: Jacobian and Hessian known."""
    return {"a": jnp.asarray(A) @ jnp.sin(t), "b": jnp.sum(jnp.exp(jnp.asarray(X) * t[0])) * t[1] ** 2}


def closed_form(t):
    t = np.asarray(t)
    e = np.exp(X * t[0])
    jac_b = np.zeros(P)
    jac_b[0], jac_b[1] = np.sum(X * e) * t[1] ** 2, 2 * np.sum(e) * t[1]
    hess_a = -np.einsum("ij,j,jk->ijk", A, np.sin(t), np.eye(P))
    hess_b = np.zeros((P, P))
    hess_b[0, 0] = np.sum(X * X * e) * t[1] ** 2
    hess_b[0, 1] = hess_b[1, 0] = 2 * np.sum(X * e) * t[1]
    hess_b[1, 1] = 2 * np.sum(e)
    return {"a": A * np.cos(t)}, {"b": jac_b}, {"a": hess_a, "b": hess_b}


T0 = jnp.linspace(0.1, 1.1, P)


@pytest.mark.parametrize("block", [1, 3, P, 2 * P])
def test_blocks_equal_jacfwd_and_the_closed_form(block) -> None:
    value, jac, hess = jax.jit(lambda t: value_and_derivatives(fn, t, order=2, block=block))(T0)
    ref_jac = jax.jit(jax.jacfwd(fn))(T0)
    ref_hess = jax.jit(jax.jacfwd(jax.jacfwd(fn)))(T0)
    jac_a, jac_b, hess_ab = closed_form(T0)
    for k in ("a", "b"):
        np.testing.assert_array_equal(value[k], jax.jit(fn)(T0)[k])
        if block >= P:  # one block: jacfwd's program, bit for bit
            np.testing.assert_array_equal(jac[k], ref_jac[k])
            np.testing.assert_array_equal(hess[k], ref_hess[k])
        # smaller blocks: XLA vectorises other batch sizes (a few ulps of the largest entry)
        scale = np.max(np.abs(ref_jac[k]))
        np.testing.assert_allclose(jac[k], ref_jac[k], rtol=0, atol=1e-15 * scale)
        np.testing.assert_allclose(hess[k], ref_hess[k], rtol=0,
                                   atol=1e-15 * np.max(np.abs(ref_hess[k])))
        np.testing.assert_allclose(jac[k], {**jac_a, **jac_b}[k], rtol=1e-13, atol=1e-13 * scale)
        np.testing.assert_allclose(hess[k], hess_ab[k], rtol=1e-13,
                                   atol=1e-13 * np.max(np.abs(hess_ab[k])))
    # order 1 of the same blocks: the same Jacobian
    _, jac1, hess1 = value_and_derivatives(fn, T0, order=1, block=block)
    assert hess1 is None
    for k in ("a", "b"):
        np.testing.assert_allclose(jac1[k], jac[k], rtol=0, atol=1e-15 * np.max(np.abs(jac[k])))


def test_the_default_block_follows_the_chunk() -> None:
    assert tangent_block(4, 10**9) == 4  # the common case: one block whatever the chunk
    assert tangent_block(1000, 10**9) == MIN_BLOCK
    assert tangent_block(1000, 1000, budget=64_000) == 64
    assert tangent_block(30, 1000, budget=64_000) == 30
    big = np.ones(4000)

    def g(t):
        return jnp.sum(jnp.asarray(big) * t[0]) * jnp.sum(t ** 2)

    seen = []
    real = jax.lax.map

    def spy(f, xs, **kw):
        seen.append(xs.shape)
        return real(f, xs, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jax.lax, "map", spy)
        _, jac, _ = value_and_derivatives(g, jnp.ones(40), order=1, budget=4000 * 10)
    # 40 tangents of a 4,000-element chunk under a budget of 10 such tangents: 4 blocks of 10
    assert seen == [(4, 10, 40)]
    np.testing.assert_allclose(jac, jax.jacfwd(g)(jnp.ones(40)), rtol=1e-15)


def test_the_chunk_size_counts_what_the_function_makes() -> None:
    """An intermediate larger than every input (a network's hidden units, count states),
    also inside a jitted function or a loop body, sets the size."""
    x, y = np.ones(300), np.ones(7)

    @jax.jit
    def inner(t):
        return jnp.sum(jnp.outer(jnp.asarray(x), jnp.asarray(y)) * t[0])

    def looped(t):
        return jax.lax.fori_loop(0, 2, lambda i, c: c + inner(t), 0.0)

    assert chunk_elements(lambda t: jnp.sum(jnp.asarray(x) * t[0]), jnp.ones(3)) == 300
    assert chunk_elements(inner, jnp.ones(3)) == 2100
    assert chunk_elements(looped, jnp.ones(3)) == 2100


def test_derive_passes_its_block_on() -> None:
    got = []
    real = derive_module.value_and_derivatives

    def spy(f, t, *, order, block=None, **kw):
        got.append(block)
        return real(f, t, order=order, block=block, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(derive_module, "value_and_derivatives", spy)
        d = derive_module.derive(lambda th: {"s": jnp.sum(jnp.sin(th["x"]))},
                                 {"x": np.linspace(0.0, 1.0, 5)}, block=2)
    assert got == [2]
    np.testing.assert_allclose(d.jac["s"], np.cos(np.linspace(0.0, 1.0, 5)), rtol=1e-15)
    with pytest.raises(ValueError, match="block"):
        derive_module.derive(lambda th: {"s": jnp.sum(th["x"])}, {"x": np.ones(2)}, block=0)


def test_the_backend_option_reaches_the_jax_kernel(shared_data) -> None:
    config = config_from_dict(yaml.safe_load((REPO / "configs" / "ttbar.yaml").read_text()))
    plan = build_plan(config)
    theta = np.array([config.parameters[n].init for n in plan.param_names])
    widths = np.asarray(initial_widths(config))
    cols = read_columns(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root", plan)
    got = []
    real = passes.value_and_derivatives

    def spy(f, t, *, order, block=None):
        got.append(block)
        return real(f, t, order=order, block=block)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(passes, "value_and_derivatives", spy)
        states = {b: chunk_state(cols, plan, theta, widths, order=1,
                                 backend=Backend("jax", tangent_block=b)) for b in (None, 1)}
    assert 1 in got  # (the default's program may be compiled already in this process)
    leaves = {b: jax.tree_util.tree_leaves(s.derived.jac) for b, s in states.items()}
    for one, whole in zip(leaves[1], leaves[None], strict=True):
        np.testing.assert_allclose(one, whole, rtol=1e-14, atol=1e-14 * np.max(np.abs(whole)))
    assert "tangent_block=1" in Backend("jax", tangent_block=1).describe()
    with pytest.raises(ValueError, match="tangent_block"):
        Backend("jax", tangent_block=0)


def test_the_yaml_key_reaches_the_evaluators_backend() -> None:
    """``engine: {tangent_block: N}`` is the backend's option; 0 is refused naming the key."""
    from analysis.driver.runner import Evaluator
    from analysis.errors import ConfigError

    data = yaml.safe_load((REPO / "configs" / "ttbar.yaml").read_text())
    data["engine"] = {"backend": "jax", "tangent_block": 3}
    config = config_from_dict(data, source="t.yaml", base_dir=REPO / "configs")
    assert config.engine.tangent_block == 3
    with Evaluator(config, cache=False) as ev:
        assert ev.backend.tangent_block == 3
    data["engine"]["tangent_block"] = 0
    with pytest.raises(ConfigError, match=r"engine\.tangent_block"):
        config_from_dict(data, source="t.yaml", base_dir=REPO / "configs")
