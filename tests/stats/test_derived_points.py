"""``Derived`` merges check the parameter values (issue 21.6): states derived at different
points would merge silently into a mixture of two selections; now ``a + b`` names the
parameter. Equal points (to ~1e-12) merge as before, and the point survives pickling."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats


def _fn(theta):
    x = jnp.arange(5.0)
    w = 1 / (1 + jnp.exp(-(x - theta["cut"])))
    return {"x": stats.moments(x, weight=w), "n": w.sum() * theta["scale"]}


def test_different_points_are_refused_naming_the_parameter() -> None:
    a = stats.derive(_fn, {"cut": 1.0, "scale": 2.0})
    b = stats.derive(_fn, {"cut": 1.5, "scale": 2.0})
    with pytest.raises(ValueError, match=r"derived at different values of parameter 'cut': "
                                         r"1.0 vs 1.5"):
        a + b


def test_equal_points_merge_and_the_point_pickles() -> None:
    a = stats.derive(_fn, {"cut": 1.0, "scale": 2.0})
    b = stats.derive(_fn, {"cut": 1.0 + 1e-15, "scale": 2.0})
    merged = sum([a, b])
    assert merged.at == (1.0, 2.0)
    np.testing.assert_allclose(float(merged.value["n"]), 2 * float(a.value["n"]), rtol=1e-14)
    back = pickle.loads(pickle.dumps(merged))
    assert back.at == merged.at and back.names == merged.names
    unknown = stats.Derived(a.names, a.value, a.jac)  # no point: nothing to compare
    assert (unknown + b).at == b.at


@pytest.mark.parametrize("order", [1, 2])
def test_a_deep_copy_owns_its_arrays_and_keeps_everything_else(order) -> None:
    """coffea's ``accumulate`` deep-copies a dataset's first output: the copy has the
    same names, point, types and leaves bit for bit, and no array of the original."""
    import copy

    hist = stats.histogram(jnp.arange(5.0), [0.0, 2.0, 4.0])
    a = stats.derive(lambda t: {**_fn(t), "h": hist}, {"cut": 1.0, "scale": 2.0}, order=order)
    b = copy.deepcopy(a)
    assert (b.names, b.at, b.order) == (a.names, a.at, a.order)
    trees = [t for t in (a.value, a.jac, a.hess) if t is not None]
    copies = [t for t in (b.value, b.jac, b.hess) if t is not None]
    for t, c in zip(trees, copies, strict=True):
        assert jax.tree_util.tree_structure(t) == jax.tree_util.tree_structure(c)
        for x, y in zip(jax.tree_util.tree_leaves(t), jax.tree_util.tree_leaves(c), strict=True):
            assert type(x) is type(y) and np.asarray(x).tobytes() == np.asarray(y).tobytes()
            assert not np.shares_memory(x, y)
    assert type(b.value["x"]) is type(a.value["x"])
