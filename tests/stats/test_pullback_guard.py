"""Own processors' reverse pass (``stats.derive`` with a ``"pullback"``
:class:`~analysis.stats.PassTheta`): a chunk whose values are all finite traces and
sweeps ``fn`` once, its plain states pulled; a chunk with a NaN entry also runs the
guarded program (``fn`` traced within :func:`analysis.stats.pullback.pulled_states`),
whose gradient is that of the chunk without the NaN entry in what the entry does not
reach. Synthetic, no files."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.stats.passes import PassTheta
from analysis.stats.pullback import prune, pullback_payload
from analysis.stats.taylor import _to_numpy

N = 64
BAD = 17
THETA = {"a": 0.3, "b": -0.2}


def _chunk(x, u, v, only_b):
    """``fn`` of one chunk: moments of ``x`` weighed ``exp(a u + b v)``, ``exp(b v)``
    where ``only_b`` (it closes over arrays only: compiled with them as arguments)."""

    def fn(th):
        w = jnp.where(only_b, jnp.exp(th["b"] * v), jnp.exp(th["a"] * u + th["b"] * v))
        return {"m": stats.moments(x, weight=w), "n": jnp.sum(w)}

    return fn


def _data():
    rng = np.random.default_rng(7)
    x, u, v = rng.normal(50.0, 10.0, N), rng.normal(0.0, 1.0, N), rng.normal(0.0, 1.0, N)
    return x, u, v, np.arange(N) == BAD  # the NaN entry's weight: b only


def _pullback(fn, merged):
    cotangent = jax.tree_util.tree_map(lambda s: np.full(np.shape(s), 0.7), merged)
    payload = prune(_to_numpy(pullback_payload(merged, cotangent)))
    return stats.derive(fn, PassTheta(THETA, "pullback", merged, payload))


def test_a_finite_chunk_is_traced_once_a_nan_chunk_once_more(monkeypatch) -> None:
    calls: list = []  # traces of fn: its calls of stats.moments
    moments = stats.moments
    monkeypatch.setattr(stats, "moments", lambda *a, **k: calls.append(1) or moments(*a, **k))
    x, u, v, only_b = _data()
    merged = stats.derive(_chunk(x, u, v, only_b), PassTheta(THETA, "values")).value
    calls.clear()
    finite = _pullback(_chunk(x, u, v, only_b), merged)
    assert len(calls) == 1  # the plain program only (two traces before: plain and pulled)
    assert np.all(np.isfinite(finite.grad))

    x_nan = x.copy()
    x_nan[BAD] = np.nan
    calls.clear()
    got = _pullback(_chunk(x_nan, u, v, only_b), merged)
    assert len(calls) == 1  # the plain program is reused; the guarded one is traced
    assert np.isnan(float(stats.mean(got.value["m"])))  # the value stays NaN
    calls.clear()
    assert _pullback(_chunk(x_nan, u, v, only_b), merged).grad.tobytes() == got.grad.tobytes()
    assert len(calls) == 0  # both compiled

    # the NaN entry reaches b (its weight), not a: a's share is that of the chunk
    # without the entry (the plain states' pull: only "n"'s share, the NaN state's 0)
    keep = ~only_b
    rest = _pullback(_chunk(x[keep], u[keep], v[keep], only_b[keep]), merged)
    assert np.isnan(got.grad[1])
    assert got.grad[0] == pytest.approx(rest.grad[0], rel=1e-12)
    assert got.grad[0] == pytest.approx(finite.grad[0], rel=1e-12)
