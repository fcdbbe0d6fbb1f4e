"""Reverse mode of an own processor with one NaN event (a NaN field value reaching a soft
cut): the gradient is the same for any chunking, NaN only in the parameters the NaN
event reaches (the pulled state is that of the finite entries,
:func:`analysis.stats.pullback.finite_entries`); the values stay NaN.

Real events (``nano_tt_v12.root``, 40 events): an event's entry is its soft HT (jets
above a soft pt cut ``jet_min``), weighed by a soft muon veto (threshold ``mu_min``; an
event without muons has weight 1, a constant). One jet of an event without muons is NaN:
its entry is NaN, its weight finite and independent of ``mu_min``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import uproot

from analysis import stats
from analysis.soft import soft_cut

N = 40
THETA = {"jet_min": 30.0, "mu_min": 15.0}


@pytest.fixture(scope="module")
def events(shared_data):
    with uproot.open(shared_data / "nano_tt_v12.root") as f:
        t = f["Events"]
        jets = t["Jet_pt"].array(entry_stop=N, library="np")
        mus = t["Muon_pt"].array(entry_stop=N, library="np")
    no_mu = [e for e in range(N) if len(mus[e]) == 0 and len(jets[e]) > 0]
    mid = [e for e in no_mu if 5 <= e < N - 5]
    bad = (mid or no_mu)[0]
    jets = [np.asarray(j, dtype=np.float64).copy() for j in jets]
    jets[bad][0] = np.nan
    return jets, [np.asarray(m, dtype=np.float64) for m in mus], bad


class _Widths:
    """An object ``fn`` closes over: its chunks take the traced path (not compiled with
    the arrays as arguments), whose pullback is built apart."""

    jet = 5.0


def _run(events, bounds, widths=None):
    jets, mus, _ = events

    def run(theta):
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            jpt = np.concatenate(jets[a:b])
            jseg = np.repeat(np.arange(b - a), [len(j) for j in jets[a:b]])
            mpt = np.concatenate(mus[a:b])
            mseg = np.repeat(np.arange(b - a), [len(m) for m in mus[a:b]])

            def fn(th, jpt=jpt, jseg=jseg, mpt=mpt, mseg=mseg, n=b - a):
                width = 5.0 if widths is None else widths.jet
                ht = jax.ops.segment_sum(jpt * soft_cut(jpt, ">", th["jet_min"], width), jseg, n)
                veto = jnp.log(soft_cut(mpt, "<", th["mu_min"], 3.0))
                w = jnp.exp(jax.ops.segment_sum(veto, mseg, n))
                nj = jax.ops.segment_sum(soft_cut(jpt, ">", th["jet_min"], 5.0), jseg, n)
                return {"ht": stats.moments(ht, weight=w), "co": stats.comoments(nj, ht, weight=w)}

            parts.append(stats.derive(fn, theta))
        return sum(parts)

    return run


def _loss(s):
    co = s["co"]  # the means (their cotangents finite at a NaN state)
    return stats.mean(s["ht"]) + 3.0 * (co.center_x + co.dmean_x) + 0.5 * (co.center_y + co.dmean_y)


def _reverse(events, bounds, widths=None):
    """The reverse-mode pass of ``events`` chunked at ``bounds``."""
    return stats.differentiable(_run(events, bounds, widths), mode="reverse")


def _grad(f, loss=_loss):
    """``(states, gradient of loss)`` at THETA: the merged states out of the gradient's
    own passes (no separate values pass)."""
    g, value = jax.grad(lambda th: (loss(s := f(th)), s), has_aux=True)(THETA)
    return value, {k: float(v) for k, v in g.items()}


def test_nan_event_gradient_independent_of_chunking(events) -> None:
    bad = events[2]
    # the NaN event last in a chunk, first in one, in one chunk of all
    chunkings = ([0, bad + 1, N], [0, bad, N], [0, 3, bad + 2, 27, N])
    losses = (_loss, lambda s: s["co"].dmean_y)  # both states; the co-moments alone
    grads: list[list[float]] = [[] for _ in losses]
    for bounds in chunkings:
        f = _reverse(events, bounds)  # one pass object for both losses
        for loss, seen in zip(losses, grads, strict=True):
            value, g = _grad(f, loss)
            assert np.isnan(float(stats.mean(value["ht"])))  # the value state stays NaN
            assert np.isnan(float(value["co"].center_x + value["co"].dmean_x))
            assert np.isnan(g["jet_min"])  # the NaN event reaches it
            mu = g["mu_min"]
            assert np.isfinite(mu) and mu != 0.0  # it does not reach this
            seen.append(mu)
    for seen in grads:
        assert seen == pytest.approx([seen[0]] * len(seen), rel=1e-10)


@pytest.mark.filterwarnings("ignore:stats.derive")
def test_nan_event_traced_path(events) -> None:
    """The same on the traced path (a function closing over an object)."""
    bad = events[2]
    grads = [_grad(_reverse(events, b, _Widths()))[1] for b in ([0, bad + 1, N], [0, bad, N])]
    assert np.isnan(grads[0]["jet_min"]) and np.isfinite(grads[0]["mu_min"])
    assert grads[1]["mu_min"] == pytest.approx(grads[0]["mu_min"], rel=1e-10)
