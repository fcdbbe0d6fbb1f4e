"""Each private JAX name that :mod:`analysis._compat.jax` uses is there, and does what
the package relies on; when a JAX release changes one, these tests name it and the
version (``CompatError``'s message)."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import Primitive

from analysis._compat import CompatError, jaxstate, lookup
from analysis._compat import jax as cj


def _resolve(name):
    return lookup(cj.PRIVATE, name, library="jax", written_for=cj.WRITTEN_FOR)


@pytest.mark.parametrize("name", sorted(cj.PRIVATE))
def test_each_private_name_is_there(name):
    try:
        _resolve(name)
    except CompatError as err:
        pytest.fail(str(err))
    assert name not in cj.MISSING


def test_a_missing_name_is_said_with_the_attribute_and_the_version(monkeypatch):
    monkeypatch.setitem(cj.PRIVATE, "Zero", ("jax.interpreters.ad", "NoSuchZero", "zeros"))
    with pytest.raises(CompatError) as err:
        _resolve("Zero")
    assert "jax.interpreters.ad.NoSuchZero" in str(err.value)
    assert f"jax {jax.__version__}" in str(err.value)
    monkeypatch.setitem(cj.MISSING, "eval_jaxpr", CompatError("gone"))
    with pytest.raises(CompatError, match="gone"):
        cj.eval_jaxpr(None, [])


def test_tracer_is_what_transforms_pass():
    seen = []

    def f(x):
        seen.append(isinstance(x, cj.Tracer))
        return x * 2.0

    jax.jit(f)(1.0)
    jax.grad(f)(1.0)
    jax.vmap(f)(jnp.ones(2))
    f(jnp.ones(2))
    f(np.ones(2))
    assert seen == [True, True, True, False, False]


def test_shaped_array_and_eval_jaxpr():
    aval = cj.shaped_array((3, 2), np.float64)
    assert aval.shape == (3, 2) and aval.dtype == np.float64

    def f(x):
        return jnp.sin(x) * 3.0, x.sum()

    x = np.linspace(0.0, 1.0, 5)
    closed = jax.make_jaxpr(f)(x)
    got = cj.eval_jaxpr(closed.jaxpr, closed.consts, x)
    np.testing.assert_array_equal(got[0], np.sin(x) * 3.0)
    np.testing.assert_allclose(got[1], x.sum(), rtol=1e-15)


def test_staged_only_while_tracing_for_compilation():
    seen = []

    def f(x):
        seen.append(cj.staged())
        return x * 2.0

    f(1.0)  # eager
    jax.grad(f)(1.0)  # eager transforms: nothing compiled around f
    jax.vmap(f)(jnp.ones(2))
    jax.jit(f)(1.0)
    jax.jit(jax.grad(f))(1.0)
    jax.lax.scan(lambda c, x: (c, f(x)), 0.0, jnp.ones(2))
    assert seen == [False, False, False, True, True, True]


# A toy primitive, scale(x) = 2 x, written with the rule functions only: a JAX that
# changes any of the registries (or the symbolic zeros and undefined primals the
# rules read) breaks jit, grad, vmap, jacfwd or jacrev of it here.
_scale_p = Primitive("diffcoffea_test_compat_scale")


def _scale(x):
    return _scale_p.bind(x)


def _jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _scale(x), (cj.zero(cj.shaped_array(x.shape, x.dtype)) if cj.is_zero(t) else _scale(t))


def _transpose(ct, x):
    assert cj.is_undefined_primal(x)
    return [cj.zero_cotangent(x) if cj.is_zero(ct) else _scale(ct)]


def _batch(args, dims):
    return _scale(args[0]), dims[0]


_scale_p.def_impl(lambda x: np.asarray(x) * 2.0)
_scale_p.def_abstract_eval(lambda x: cj.shaped_array(x.shape, x.dtype))
cj.register_lowering(_scale_p, lambda x: x * 2.0, multiple_results=False)
cj.register_jvp(_scale_p, _jvp)
cj.register_transpose(_scale_p, _transpose)
cj.register_batcher(_scale_p, _batch)


def test_a_primitive_with_the_rules_composes_with_every_transform():
    x = np.array([1.0, -2.0, 3.0])
    eye2 = 2.0 * np.eye(3)
    np.testing.assert_array_equal(_scale(x), 2.0 * x)
    np.testing.assert_array_equal(jax.jit(_scale)(x), 2.0 * x)
    np.testing.assert_array_equal(jax.vmap(_scale)(np.stack([x, x])), 2.0 * np.stack([x, x]))
    np.testing.assert_array_equal(jax.grad(lambda v: _scale(v).sum())(x), np.full(3, 2.0))
    np.testing.assert_array_equal(jax.jacfwd(_scale)(x), eye2)
    np.testing.assert_array_equal(jax.jacrev(_scale)(x), eye2)
    np.testing.assert_array_equal(jax.jit(jax.jacrev(_scale))(x), eye2)
    np.testing.assert_array_equal(jax.hessian(lambda v: (_scale(v) * v).sum())(x), 2 * eye2)
    # a symbolic zero in: the JVP and transpose rules' zero branches
    _, t = jax.jvp(lambda v: _scale(jax.lax.stop_gradient(v)), (x,), (x,))
    np.testing.assert_array_equal(t, np.zeros(3))


def test_jaxstate_reads_whether_backends_started():
    from jax._src import xla_bridge

    assert hasattr(xla_bridge, "backends_are_initialized"), (
        f"jax {jax.__version__} has no jax._src.xla_bridge.backends_are_initialized "
        "(analysis/_compat/jaxstate.py)")
    jnp.ones(1).block_until_ready()
    assert jaxstate.jax_backends_started()


def test_the_cache_warnings_that_quiet_filters_are_jaxs():
    """``--quiet`` filters JAX's persistent-cache warnings by their text
    (``analysis.cli.parser._JAX_CACHE_WARNING``): a JAX that words them otherwise would
    print them again, one per program."""
    import re

    from jax._src import compiler

    from analysis.cli.parser import _JAX_CACHE_WARNING

    source = inspect.getsource(compiler)
    for verb in ("reading", "writing"):
        text = f"Error {verb} persistent compilation cache entry"
        assert text in source, f"jax {jax.__version__} no longer warns '{text}' (jax/_src/compiler.py)"
        assert re.search(_JAX_CACHE_WARNING, text)
