"""analysis.select.singlecall: the one-set recursion of ``analysis.soft.pass_weights`` by
numba kernels (XLA FFI calls through jax.custom_jvp, linear_call and custom_vmap) on CPU.

- values and every derivative (jacfwd, jacrev, grad, hessian, forward over forward,
  reverse over reverse, vmap) against the dense JAX recursion
  (analysis.select._recursions.dense_weights), events without objects, padding, ``p`` in
  {0, 1}, one to six count states;
- the fast path is taken (the kernels in the compiled program, no scan left) and the
  second derivative in a cut threshold against central differences of the exact
  enumeration;
- a compiled program that calls the kernels is kept by JAX's persistent compilation
  cache and runs in a new process that only imports analysis.soft (the targets are
  registered when traced), whose kernels load from numba's cache without numba's
  registries.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.select import singlekernels as kernels
from analysis.select._recursions import dense_weights
from analysis.select.singlecall import fast_weights
from analysis.soft import pass_weights, soft_cut
from analysis.stats.offsets import padded_segment_ids
from tests.conftest import central_difference
from tests.opt_helpers import cli_env
from tests.test_soft_pass_weights import enumerated

REPO = Path(__file__).resolve().parents[1]
M = 12  # the kernels hold S = 2, 3, 4 states as constants (singlekernels)


@pytest.fixture(autouse=True, scope="module")
def _available() -> None:
    # what fast_weights' callers check first (analysis.soft): the kernels registered and
    # linear_call's batching rules installed; without it a test run alone failed
    # ("Batching rule for 'linear_call' not implemented")
    from analysis.select.singlecall import available

    assert available()


def _lists(seed: int):
    rng = np.random.default_rng(seed)
    counts = rng.poisson(4, 60)
    counts[3], counts[7] = 0, M
    off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    n = int(off[-1])
    q = np.concatenate([rng.uniform(0, 1, n), np.zeros(5)])  # 5 padding elements
    q[2], q[5] = 0.0, 1.0
    return jnp.asarray(q), jnp.asarray(off), jnp.asarray(padded_segment_ids(off, n + 5))


def _close(got, want) -> None:
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13 * max(1.0, np.abs(w).max()))


# 2, 3, 4: the handlers with the count of states a constant (singlekernels.CONSTANT_STATES),
# each its own build; 1, 5, 6: the one build for any count (top -1, targets ``*_sn``). 6
# runs that build as 5 does, against the same dense recursion: slow (its JAX programs
# compile for ~5-10 s CPU), [5-False] checks the same in the default run. 2 and 4: slow
# (each build's three kernels compile for ~35 s CPU cold), covered in the default run by
# [3-True] (every mode and the second order against the same dense recursion: the same
# kernel functions, the count of states a constant) and by tests/test_soft_pass_weights.py
# on the s2 and s4 builds themselves (test_values_against_enumeration[1-0.0] and [3-0.0]:
# values against enumeration; test_many_events_in_blocks_against_enumeration: s4's
# tangent against central differences)
@pytest.mark.parametrize("states, second", [
    (1, False), pytest.param(2, False, marks=pytest.mark.slow), (3, True),
    pytest.param(4, False, marks=pytest.mark.slow), (5, False),
    pytest.param(6, False, marks=pytest.mark.slow)])
def test_kernels_against_dense_recursion(states: int, second: bool) -> None:
    q, off, ev = _lists(states)
    f = jnp.asarray(np.random.default_rng(states).uniform(0.2, 1.0, states))

    def dense(q, f):  # noqa: ANN001, ANN202
        return dense_weights(q, off, ev, f, max_objects=M)

    def fast(q, f):  # noqa: ANN001, ANN202
        return fast_weights(q, off, ev, f, max_objects=M)

    def loss(fn):  # noqa: ANN001, ANN202
        def value(q, f):  # noqa: ANN001, ANN202
            w, p = fn(q, f)
            return jnp.sum(jnp.sin(3.0 * w)) + jnp.sum(p**2)
        return value

    # The reference runs jitted: the same JAX recursion and derivatives, compiled once per
    # transform instead of dispatched op by op with a compilation per scan (half the time)
    want, got = jax.jit(dense)(q, f), fast(q, f)
    _close(got, want)
    # padding and events without objects: weight 0, P = f[0]
    assert np.all(np.asarray(got[0])[-5:] == 0.0) and float(got[1][3]) == float(f[0])
    # One reference Jacobian (JAX's forward mode of the dense recursion) for both modes of
    # the kernels, as the Hessian below: the reference's reverse mode is the same matrix
    # (its own compilation, 1-1.3 s CPU per case, measured)
    jacobian = jax.jit(jax.jacfwd(dense, argnums=(0, 1)))(q, f)
    for transform in (jax.jacfwd, jax.jacrev):
        _close(jax.jit(transform(fast, argnums=(0, 1)))(q, f), jacobian)
    _close(jax.grad(loss(fast), (0, 1))(q, f), jax.jit(jax.grad(loss(dense), (0, 1)))(q, f))
    if second:  # second order (JAX's derivatives of the reference's JVP and VJP; slow)
        # One reference Hessian for the three modes of the kernels: forward over forward
        # and reverse over reverse in q are its (q, q) block (each second-order program
        # of the dense recursion compiles for 10-15 s)
        hessian = jax.jit(jax.hessian(loss(dense), (0, 1)))(q, f)
        _close(jax.jit(jax.hessian(loss(fast), (0, 1)))(q, f), hessian)
        _close(jax.jit(jax.jacfwd(jax.jacfwd(loss(fast))))(q, f), hessian[0][0])
        _close(jax.jit(jax.jacrev(jax.grad(loss(fast))))(q, f), hessian[0][0])
    fs = jnp.stack([f, 0.5 * f])
    _close(jax.vmap(fast, (None, 0))(q, fs), jax.jit(jax.vmap(dense, (None, 0)))(q, fs))
    # a vmap over the tangents' lanes by hand (jax.jacfwd's lanes, several at once)
    dqs = jnp.asarray(np.random.default_rng(9).normal(size=(3,) + q.shape))
    lanes = jax.vmap(lambda d: jax.jvp(fast, (q, f), (d, f))[1])(dqs)
    _close(lanes, jax.jit(jax.vmap(lambda d: jax.jvp(dense, (q, f), (d, f))[1]))(dqs))


def test_forward_mode_calls_and_the_reverse_mode_paths() -> None:
    """Forward mode with the values (stats.derive) runs the primal kernel and the tangent
    kernel once each, all of jax.jacfwd's lanes in one call; the reverse-mode paths
    (linearized directly or by partial evaluation, under jax.checkpoint, in a lax.scan)
    transpose the tangent (linear_call) into the cotangent kernel: all agree with the
    dense recursion."""
    q, off, ev = _lists(11)
    f = jnp.asarray(np.random.default_rng(11).uniform(0.2, 1.0, 3))

    def fast(q, f):  # noqa: ANN001, ANN202
        return fast_weights(q, off, ev, f, max_objects=M)

    def dense(q, f):  # noqa: ANN001, ANN202
        return dense_weights(q, off, ev, f, max_objects=M)

    def both(fn):  # noqa: ANN001, ANN202
        def pair(f):  # noqa: ANN001, ANN202
            out = fn(q, f)
            return out, out  # the values as jax.jacfwd's auxiliary output (stats.derive)

        return jax.jacfwd(pair, has_aux=True)

    text = _program(both(fast), f)
    assert text.count("stablehlo.custom_call") == 2 and kernels.TANGENT in text
    assert kernels.PRIMAL in text and "while" not in text
    _close(jax.jit(both(fast))(f), both(dense)(f))

    def loss(fn):  # noqa: ANN001, ANN202
        def value(q, f):  # noqa: ANN001, ANN202
            w, p = fn(q, f)
            return jnp.sum(jnp.sin(3.0 * w)) + jnp.sum(p**2)
        return value

    def scanned(fn):  # noqa: ANN001, ANN202
        def value(q, f):  # noqa: ANN001, ANN202
            def body(c, x):  # noqa: ANN001, ANN202
                return c + loss(fn)(q, f * x), None
            return jax.lax.scan(body, 0.0, jnp.array([1.0, 0.9]))[0]
        return value

    want = jax.grad(loss(dense), (0, 1))(q, f)
    _close(jax.jit(jax.grad(jax.checkpoint(loss(fast)), (0, 1)))(q, f), want)
    _close(jax.grad(scanned(fast), (0, 1))(q, f), jax.grad(scanned(dense), (0, 1))(q, f))
    jax.config.update("jax_use_direct_linearize", False)
    try:
        _close(jax.grad(loss(fast), (0, 1))(q, f), want)
    finally:
        jax.config.update("jax_use_direct_linearize", True)
    _close(jax.jit(jax.jacrev(jax.jacfwd(loss(fast), 1), 1))(q, f),
           jax.jacfwd(jax.jacfwd(loss(dense), 1), 1)(q, f))


def test_cpu_only_traces_the_kernels_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the CPU is JAX's only backend, the kernel calls are traced without
    jax.lax.platform_dependent, whose other branch (the dense recursion's scans,
    differentiated and batched) was most of a first gradient pass's tracing; with another
    backend the program holds both branches. The same bits either way on the CPU."""
    from analysis.select import singlecall

    q, off, ev = _lists(5)
    f = jnp.asarray(np.random.default_rng(5).uniform(0.2, 1.0, 3))

    def program(m):  # noqa: ANN001, ANN202
        # m: the dense recursion's size (the kernels read the offsets); a new m, new
        # calls (JAX keeps the jaxprs it traced for the calls of one m)
        def run(q, f):  # noqa: ANN001, ANN202
            def loss(q, f):  # noqa: ANN001, ANN202
                w, p = fast_weights(q, off, ev, f, max_objects=m)
                return jnp.sum(jnp.sin(3.0 * w)) + jnp.sum(p**2)

            return (fast_weights(q, off, ev, f, max_objects=m),
                    jax.jacfwd(loss, (0, 1))(q, f), jax.grad(loss, (0, 1))(q, f))

        return str(jax.make_jaxpr(run)(q, f)), jax.jit(run)(q, f)

    assert singlecall._cpu_only()  # this test runs where JAX has the CPU alone
    alone, got = program(M)
    assert "scan" not in alone and "platform_index" not in alone
    monkeypatch.setattr(singlecall, "_cpu_only", lambda: False)
    both, want = program(M + 1)
    assert "scan" in both and "platform_index" in both
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _program(fn, *args) -> str:  # noqa: ANN001
    # Lowered for the CPU, where the kernels are registered, whatever JAX's default device
    # is (elsewhere jax.lax.platform_dependent takes the JAX recursion).
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cpu",)).as_text()


def test_fast_path_is_taken_and_second_order_against_enumeration() -> None:
    rng = np.random.default_rng(3)
    lists = [list(rng.uniform(10.0, 60.0, c)) for c in rng.integers(0, 7, 40)]
    lists[:2] = [[], [35.0, 40.0, 20.0]]
    pt = ak.Array(lists)

    def total(cut):  # noqa: ANN001, ANN202
        objects, events = pass_weights(soft_cut(pt, ">", cut, 5.0), 2)
        return jnp.sum(objects.values) + jnp.sum(events)

    forward = _program(jax.jacfwd(total), 30.0)  # the primal is not needed there
    assert kernels.TANGENT in forward and "while" not in forward
    assert kernels.PRIMAL in _program(total, 30.0)
    assert kernels.COTANGENT in _program(jax.grad(total), 30.0)

    def enumerated_total(cut: float) -> float:
        p = [[1.0 / (1.0 + np.exp(-(v - cut) / 5.0)) for v in lst] for lst in lists]
        objects, events = enumerated(p, 2)
        return sum(sum(o) for o in objects) + float(events.sum())

    cut = np.array([31.0])
    np.testing.assert_allclose(float(total(31.0)), enumerated_total(31.0), rtol=1e-12)
    fd1 = central_difference(lambda t: np.array([enumerated_total(t[0])]), cut, 1e-2, points=5)
    np.testing.assert_allclose(float(jax.grad(total)(31.0)), fd1[0, 0], rtol=1e-8)
    np.testing.assert_allclose(float(jax.jacfwd(total)(31.0)), fd1[0, 0], rtol=1e-8)
    h = 0.1  # the five-point second difference of the enumeration
    e = [enumerated_total(31.0 + i * h) for i in (-2, -1, 0, 1, 2)]
    fd2 = (-e[0] + 16.0 * e[1] - 30.0 * e[2] + 16.0 * e[3] - e[4]) / (12.0 * h * h)
    for second in (jax.hessian(total), jax.jacfwd(jax.jacfwd(total)), jax.jacrev(jax.grad(total))):
        np.testing.assert_allclose(float(second(31.0)), fd2, rtol=1e-6)


CHILD = """
import json
import jax, jax.numpy as jnp, numpy as np
import analysis.runtime
analysis.runtime.configure()  # JAX's persistent cache, as the command line's
from analysis.soft import pass_weights, soft_cut
from analysis.stats import Jagged

events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
offsets = jnp.asarray(np.array([0, 3, 3, 7, 9]))
pt = Jagged(jnp.asarray(np.linspace(20.0, 45.0, 9)), offsets)

def total(c):
    objects, weights = pass_weights(soft_cut(pt, ">", c, 5.0), 2)
    return jnp.stack([jnp.sum(objects.values * pt.values), jnp.sum(weights)])

def run(cut):
    return jnp.concatenate([total(cut), jax.jacfwd(total)(cut)])

out = jax.jit(run)(jnp.asarray(30.0))
import sys
from analysis.select import singlekernels as k
print(json.dumps({"values": [float(x) for x in out],
                  "hits": events.count("/jax/compilation_cache/cache_hits"),
                  "handlers": sorted(k.HANDLERS),
                  "kernel_hits": sum(h.cache_hits for h in k.HANDLERS.values()),
                  "registries": "numba.np.arraymath" in sys.modules}))
"""


def test_a_program_of_the_kernels_is_loaded_from_jax_s_cache_in_a_new_process(
        tmp_path: Path) -> None:
    """The executable (kernels by name, no host callback) is kept by JAX's persistent
    compilation cache and run by a new process, which loads it: the FFI targets exist
    once analysis.soft's kernels are traced (the same values, bit for bit)."""
    env = cli_env({"DIFFCOFFEA_JAX_CACHE": str(tmp_path / "cache")})
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                             cwd=REPO, env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[1]["hits"] >= 1  # loaded from the cache
    assert runs[0]["values"] == runs[1]["values"]
    # the handlers' machine code from numba's cache without numba's registries (1.2-1.7 s
    # of the first gradient pass of a new process: analysis._compat.numba.cached_cfunc)
    assert runs[1]["kernel_hits"] == 2 and not runs[1]["registries"]
    # only the handlers the program traces were made (compiled on first use), at its three
    # states: the values and one tangent (four lanes); forward mode never traces the
    # tangent's transpose, so the cotangent kernel is not made (analysis._compat.jax's
    # batched linear_call traces it only when transposed)
    assert runs[0]["handlers"] == runs[1]["handlers"] == [
        "diffcoffea_single_primal_s3", "diffcoffea_single_tangent_s3_l4"]
