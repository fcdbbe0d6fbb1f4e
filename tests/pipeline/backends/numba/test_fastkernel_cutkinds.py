"""Cut kinds on the numba kernel: a kind that declares ``sides`` (its probability is a
product of one-sided cuts, :mod:`analysis.select.cuts`) runs there as those threshold
cuts; any other kind stays on the JAX kernel.

- every registered kind with ``sides``: its ``probability`` equals the product of
  :func:`analysis.select.objects.soft_pass` over its sides at its edges (its bounds, or
  what its ``edges`` derives from them; values and gradients);
- a window on an object field (``lo`` a parameter) and on a per-event branch (``hi`` a
  parameter), with joint counts: the numba kernel's values and Jacobians equal the JAX
  kernel's (1e-12; the JAX kernel is checked against enumeration and awkward in
  ``tests/pipeline/test_cut_window.py``, which now runs on the numba kernel too);
- ``around`` (edges derived from a centre and a half-width, chained on the host:
  :mod:`analysis.pipeline.backends.numba.cutedges`) through the numba backend equals the
  JAX backend (1e-12; a kind added for the test only, against enumeration on the DY and
  ttbar files: ``tests/pipeline/test_cut_derived_edges.py``);
- a kind without ``sides`` has no numba rule: refused, naming it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis.pipeline.backend import run_once
from analysis.pipeline.backends.numba import _fasttables
from analysis.pipeline.request import Request
from analysis.select import cuts
from analysis.select.objects import soft_pass
from tests.conftest import numba_refusal
from tests.pipeline.backends.numba.test_fastkernel import (
    assert_close,
    compare,
    make_plan,
    sets_config,
    synthetic,
)


@pytest.mark.parametrize("kind", [k for k in cuts.KINDS if hasattr(k, "sides")],
                         ids=lambda k: type(k).__name__)
@pytest.mark.parametrize("width", [0.0, 0.7])
def test_sides_are_the_kinds_probability(kind, width):
    x = jnp.asarray(np.concatenate([np.linspace(-3, 3, 61), [1.0, -1.0]]))
    bounds = [jnp.asarray(-1.0 + 2.0 * i) for i in range(len(kind.bounds))]  # -1, 1
    for op in kind.ops:
        def product(b, op=op):
            p = jnp.ones_like(x)
            for (greater, inclusive), t in zip(kind.sides(op), cuts.edges_of(kind, op, b),
                                               strict=True):
                p = p * soft_pass(x, t, width, greater=greater, inclusive=inclusive)
            return p

        def own(b, op=op):
            return kind.probability(x, b, width, op=op)

        np.testing.assert_array_equal(np.asarray(own(bounds)), np.asarray(product(bounds)))
        ja, jb = jax.jacfwd(own)(bounds), jax.jacfwd(product)(bounds)
        for a, b in zip(ja, jb, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-15, atol=0)


def window_config(width: float) -> dict:
    cfg = sets_config(width=width)
    for name in ("pt_min", "met"):  # their cuts become windows
        del cfg["parameters"][name]
    cfg["parameters"]["lo"] = {"init": 30.0, "bounds": [15.0, 60.0]}
    cfg["parameters"]["met_hi"] = {"init": 90.0, "bounds": [40.0, 200.0]}
    cfg["objects"]["jets"]["cuts"][0] = {
        "var": "pt", "op": "window", "lo_param": "lo", "hi": 150.0, "width": 5.0 * width}
    cfg["selection"][-1] = {"var": "MET.pt", "op": "window", "lo": -30.0,
                            "hi_param": "met_hi", "width": 3.0 * width}
    return cfg


@pytest.mark.parametrize("width", [0.0, 1.0])
def test_window_cuts_equal_the_jax_kernels(width):
    plan, theta, widths = make_plan(window_config(width))
    assert numba_refusal(plan, 1) is None
    assert any(c.op == "window" for s in plan.sets.sets for c in s.cuts)
    value, jac = compare(plan, synthetic(700, seed=3, ties=width == 0.0, big=9), theta, widths)
    if width > 0:  # both windows' parameters move the yield
        d = jac["selected_sumw"]
        names = plan.trainable_names
        assert abs(d[names.index("lo")]) > 0 and abs(d[names.index("met_hi")]) > 0


@pytest.mark.parametrize("width", [0.0, 1.0])
def test_around_cuts_on_numba_equal_the_jax_backend(width):
    """``around`` (derived edges, :mod:`analysis.pipeline.backends.numba.cutedges`): the
    jets' window about a trainable centre and half-width, the MET's about a trainable
    centre; several sets, joint counts, every observable kind."""
    cfg = window_config(width)
    cfg["parameters"]["half"] = {"init": 40.0, "bounds": [10.0, 80.0]}
    cfg["objects"]["jets"]["cuts"][0] = {"var": "pt", "op": "around", "center_param": "lo",
                                         "half_param": "half", "width": 5.0 * width}
    cfg["selection"][-1] = {"var": "MET.pt", "op": "around", "center_param": "met_hi",
                            "half": 70.0, "width": 3.0 * width}
    plan, theta, widths = make_plan(cfg)
    theta[plan.param_names.index("lo")] = 70.0
    assert numba_refusal(plan, 1) is None
    cols = synthetic(700, seed=5, ties=width == 0.0, big=9)
    fast, slow = (run_once(cols, plan, Request(theta, widths, order=1), backend=b).derived
                  for b in ("numba", "jax"))
    assert_close(slow.value, fast.value, 1e-12, "value")
    assert_close(slow.jac, fast.jac, 1e-12, "jacobian")
    if width > 0:
        d = fast.jac["selected_sumw"]
        assert all(abs(d[plan.trainable_names.index(n)]) > 0 for n in ("lo", "half", "met_hi"))


def test_a_kind_without_sides_stays_on_the_jax_kernel(monkeypatch):
    plan, _, _ = make_plan(window_config(1.0))
    cut = next(c for c in plan.sets.sets[0].cuts if c.op == "window")
    assert len(_fasttables.one_sided((cut,))) == 2

    class Ring:  # a kind of its own: no product of one-sided cuts declared
        ops = ("ring",)
        bounds = ("lo", "hi")

    odd = dataclasses.replace(cut, op="ring")
    spec = dataclasses.replace(plan.sets.sets[0], cuts=(odd,))
    other = dataclasses.replace(plan, sets=dataclasses.replace(
        plan.sets, sets=(spec,) + plan.sets.sets[1:]))
    monkeypatch.setattr(cuts, "KINDS", cuts.KINDS + (Ring(),))
    assert _fasttables.one_sided((odd,)) is None
    assert ("a ring cut: no numba rule for cut kind 'ring' (rules for: <, <=, >, >=, around, window)"
            in numba_refusal(other, 1))
