"""A gradient of a chunked pass compiles no program of its own in a new process.

Each eager JAX operation compiles (or loads from the persistent cache) a program once
per shape and process, ~7 ms each: a new process's first gradient pass paid ~14 of
them for ``stats.differentiable``'s packing of the parameters, its tangents and their
transposes (benchmarks/bench_own.py, first pass with a warm cache). Counted in a child
process (a fresh JAX), by the names JAX logs as it compiles; the values and gradients
are checked against the closed form.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.opt_helpers import cli_env

CHILD = textwrap.dedent("""
    import json, logging
    import jax, jax.numpy as jnp, numpy as np
    from analysis import stats
    from analysis.stats.derived import Derived

    names = []

    class Names(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Compiling "):
                names.append(message.split()[1])

    logging.getLogger("jax").addHandler(Names())
    logging.getLogger("jax").setLevel(logging.WARNING)

    def run(theta):  # a pass's merged output: s = a^2 b, v = (a, a b)
        a, b = float(theta["a"]), float(theta["b"])
        return Derived(("a", "b"), {"s": np.float64(a * a * b), "v": np.array([a, a * b])},
                       {"s": np.array([2 * a * b, a * a]), "v": np.array([[1.0, 0.0], [b, a]])},
                       at=np.array([a, b]))

    f = stats.differentiable(run, mode="forward")
    with jax.log_compiles(True):
        # the loss's own operations (and JAX's cotangent seed) on arrays of the same
        # shapes, compiled first: what remains is the package's
        loss = lambda out: out["s"] + out["v"][1]
        jax.value_and_grad(loss)({"s": jnp.float64(1.0), "v": jnp.zeros(2)})
        seed = list(names)
        names.clear()
        value, grad = jax.value_and_grad(lambda th: loss(f(th)))(
            {"a": 1.5, "b": 2.0})
    print(json.dumps({"seed": seed, "ours": names, "value": float(value),
                      "grad": [float(grad["a"]), float(grad["b"])]}))
""")


def test_a_forward_mode_gradient_compiles_no_program_of_the_package():
    env = {**cli_env(), "JAX_ENABLE_X64": "1"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # the loss's programs are counted: a process that compiles nothing logs nothing
    assert got["seed"], got
    assert got["ours"] == [], got
    a, b = 1.5, 2.0  # s + v[1] = a^2 b + a b
    assert got["value"] == pytest.approx(a * a * b + a * b, rel=1e-15)
    np.testing.assert_allclose(got["grad"], [2 * a * b + b, a * a + a], rtol=1e-15)
