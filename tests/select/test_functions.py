"""Expression kinds (analysis.select.functions): the registry behind the grammar, and
``mt`` against ``vector``. Fast: no data (``mt(muons[0], MET)`` through the pipeline on
the DY and ttbar files: tests/pipeline/test_function_mt.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import vector

import analysis  # noqa: F401  (float64)
from analysis.config.loader import config_from_dict
from analysis.errors import ConfigError
from analysis.pipeline.plan import build_plan
from analysis.select import exprs, functions
from analysis.select.fourvec import P4


def test_the_grammar_knows_every_registered_function():
    assert set(functions.FUNCTIONS) <= set(exprs.FUNCTIONS)
    for name, kind in functions.FUNCTIONS.items():
        args = ", ".join(f"jets[{i}]" for i in range(kind.arity))
        node = exprs.parse(f"{name}({args})")
        assert (node.kind, node.fn, node.level) == ("call", name, "candidate")
        assert node.slots == tuple(("jets", i) for i in range(kind.arity))


def test_mt_with_a_per_event_object():
    node = exprs.resolve(exprs.parse("mt(muons[0], MET)"), {"muons"})
    assert node.slots == (("muons", 0),) and node.groups == ("MET",)
    assert node.args == (("muons[0]",), ("MET",))


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("mt(muons[0])", "mt takes 2 arguments, e.g. mt(jets[0], jets[1])"),
        ("mt(muons[0] + muons[1], MET)", "mt takes single objects, not sums"),
        ("mt(MET, Puppi)", "mt needs an indexed object among its arguments"),
        ("mt(muons[0], MET.pt)", "expected an indexed object like jets[0] or a per-event object"),
    ],
)
def test_mt_syntax_errors(text, expect):
    with pytest.raises(ValueError, match=expect.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")):
        exprs.parse(text)


def test_a_set_is_not_a_per_event_object():
    with pytest.raises(ValueError, match="expected an indexed object like muons"):
        exprs.resolve(exprs.parse("mt(jets[0], muons)"), {"jets", "muons"})


def test_the_plan_reads_the_fields_the_function_declares():
    cfg = config_from_dict({
        "datasets": {"d": {"files": ["x.root"]}},
        "objects": {"muons": {"collection": "Muon"}},
        "selection": [{"count": "muons", "op": ">=", "value": 1}],
        "observables": [{"name": "mt", "x": "mt(muons[0], MET)", "stats": ["mean"]}],
    })  # fmt: skip
    plan = build_plan(cfg)
    assert dict(plan.sets.fields)["Muon"] == ("pt", "phi")  # rank_by pt, then mt's fields
    assert plan.event_keys == ("MET.pt", "MET.phi")
    with pytest.raises(ConfigError, match="observables.0.x: mt takes 2 arguments"):
        config_from_dict({**cfg.model_dump(by_alias=True, exclude_unset=True),
                          "observables": [{"name": "mt", "x": "mt(muons[0])", "stats": ["mean"]}]})


def test_mt_equals_vector_and_has_finite_gradients():
    rng = np.random.default_rng(3)
    pt1, pt2 = rng.uniform(1, 100, 50), rng.uniform(1, 100, 50)
    phi1, phi2 = rng.uniform(-np.pi, np.pi, 50), rng.uniform(-np.pi, np.pi, 50)
    phi2[:3] = phi1[:3]  # collinear: mT = 0
    a = vector.array({"rho": pt1, "phi": phi1})
    b = vector.array({"rho": pt2, "phi": phi2})
    want = np.sqrt(np.maximum((a.rho + b.rho) ** 2 - (a + b).rho ** 2, 0.0))
    mt = functions.FUNCTIONS["mt"]

    def value(x):
        return mt.value(P4(x[0], 0.0, x[1], 0.0), P4(x[2], 0.0, x[3], 0.0))

    x = jnp.asarray(np.stack([pt1, phi1, pt2, phi2]))
    np.testing.assert_allclose(np.asarray(value(x)), want, rtol=1e-9, atol=1e-6)
    assert np.all(np.asarray(value(x))[:3] == 0)
    g = np.asarray(jax.grad(lambda x: jnp.sum(value(x)))(x))
    assert np.all(np.isfinite(g))
