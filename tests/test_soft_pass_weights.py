"""analysis.soft.pass_weights: the engine's selection weights for own processors.

- values against the exact enumeration of every pass/fail configuration of each event
  (tests/reference ``configurations``), integer and soft ``n``, ``n = 0``, ``n`` above the
  multiplicity, events without objects, no events;
- gradients (in cut thresholds and in a traced ``n``) against central differences;
- the YAML engine (its numba kernel on configs/ttbar.yaml, the real ttbar file) and an
  own processor written with ``pass_weights`` give the same states and Jacobians.
"""

from __future__ import annotations

import math
from pathlib import Path

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from analysis import stats
from analysis.soft import pass_weights, soft_cut
from analysis.stats import Jagged
from tests.chunked_helpers import NANOAOD_WARNINGS, read_columns
from tests.conftest import central_difference
from tests.pipeline.backends.numba.test_fastkernel import leaves
from tests.reference import configurations

REPO = Path(__file__).resolve().parents[1]
pytestmark = NANOAOD_WARNINGS


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _step(frac: float, width: float) -> float:
    """The documented soft integer step (analysis.select.pbinom.integer_step's formula)."""
    if width == 0:
        return float(frac >= 0.5)
    lo, hi = _sigmoid(-0.5 / width), _sigmoid(0.5 / width)
    return (_sigmoid((frac - 0.5) / width) - lo) / (hi - lo)


def enumerated(p_lists: list[list[float]], n: float, width: float = 0.0):
    """``(objects, events)`` by enumeration: sum over configurations of
    probability x [j passes] x decision(K), decision the blend of two hard requirements."""
    lo = math.floor(n)
    s = _step(n - lo, width)
    objects, events = [], []
    for p in p_lists:
        conf, prob = configurations(p)
        k = conf.sum(axis=1)
        decision = (1 - s) * (k >= lo) + s * (k >= lo + 1)
        events.append(float(np.sum(prob * decision)))
        objects.append([float(np.sum(prob * decision * conf[:, j])) for j in range(len(p))])
    return objects, np.array(events)


def random_lists(seed: int, n_events: int = 40, hard: bool = False) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    out = []
    for c in rng.integers(0, 8, n_events):
        p = rng.uniform(0, 1, c)
        if hard:
            p = np.round(p)
        out.append(list(p))
    out[:3] = [[], [0.3], [1.0, 0.0, 1.0, 1.0]]
    return out


@pytest.mark.parametrize(
    "n, width",
    [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0), (2, 0.7), (2.4, 0.0), (2.6, 0.0), (2.4, 0.5),
     (3.7, 2.0), (7.3, 0.4), (9, 0.0), (-1.0, 0.0)],
)
def test_values_against_enumeration(n: float, width: float) -> None:
    lists = random_lists(1)
    p = ak.Array(lists)
    ref_obj, ref_ev = enumerated(lists, n, width)
    for given in (p, stats.from_awkward(p), jnp.asarray(n)):
        arg = given if not isinstance(given, jax.Array) else p
        nn = n if not isinstance(given, jax.Array) else given
        obj, ev = pass_weights(arg, nn, width=width)
        assert isinstance(obj, Jagged) and obj.values.dtype == jnp.float64
        assert ev.dtype == jnp.float64 and ev.shape == (len(lists),)
        np.testing.assert_array_equal(np.asarray(obj.counts), ak.num(p))
        np.testing.assert_allclose(ev, ref_ev, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(obj.values, np.concatenate([np.array(o) for o in ref_obj]),
                                   rtol=1e-12, atol=1e-15)


def test_many_events_in_blocks_against_enumeration() -> None:
    """Thousands of events go through the recursion in blocks of events
    (analysis.select._recursions.event_block), the last one partial: values against the
    enumeration, by a direct call and inside a compiled stats.derive (traced lists of
    the exact length), with the Jacobian against central differences."""
    from analysis.select._recursions import event_block

    rng = np.random.default_rng(7)
    lists = [list(rng.uniform(0, 1, c)) for c in rng.integers(0, 9, 3000)]
    lists[1234] = list(rng.uniform(0, 1, 13))  # 16 object slots
    assert event_block(3000, 16 * 4) < 3000 and 3000 % event_block(3000, 16 * 4)
    ref_obj, ref_ev = enumerated(lists, 3)
    ref_obj = np.concatenate([np.array(o) for o in ref_obj])
    p = ak.Array(lists)
    obj, ev = pass_weights(p, 3)
    np.testing.assert_allclose(ev, ref_ev, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(obj.values, ref_obj, rtol=1e-12, atol=1e-15)

    q = stats.from_awkward(p)
    x = q.with_values(np.linspace(1.0, 2.0, q.num_elements))

    def fn(t):  # noqa: ANN001, ANN202
        objects, events = pass_weights(q * t["scale"], 3)
        return {"x": stats.moments(x, weight=objects), "events": jnp.sum(events)}

    def sums(scale: float) -> np.ndarray:
        o, e = enumerated([[v * scale for v in lst] for lst in lists], 3)
        w = np.concatenate([np.array(v) for v in o])
        return np.array([w.sum(), (w * np.asarray(x.values)).sum() / w.sum(), e.sum()])

    got = stats.derive(fn, {"scale": 0.9})
    sumw, center, dmean = (float(got.value["x"][i]) for i in range(3))
    np.testing.assert_allclose([sumw, center + dmean, float(got.value["events"])], sums(0.9),
                               rtol=1e-12)
    fd = central_difference(lambda t: sums(t[0]), np.array([0.9]), 1e-3, points=5)
    np.testing.assert_allclose([got.jac["x"][0][0], got.jac["events"][0]], fd[[0, 2], 0],
                               rtol=1e-8)


def test_hard_probabilities_are_the_hard_cut() -> None:
    lists = random_lists(2, hard=True)
    obj, ev = pass_weights(ak.Array(lists), 2)
    k = np.array([sum(v) for v in lists])
    np.testing.assert_array_equal(ev, (k >= 2).astype(float))
    ref = np.concatenate([np.array(v) * (kk >= 2) for v, kk in zip(lists, k)])
    np.testing.assert_array_equal(obj.values, ref)


def test_edges() -> None:
    none = Jagged(np.zeros(0), np.zeros(1, dtype=np.int64))
    obj, ev = pass_weights(none, 2)
    assert obj.num_lists == 0 and obj.num_elements == 0 and ev.shape == (0,)
    empty_events = Jagged(np.zeros(0), np.zeros(4, dtype=np.int64))
    for n, want in ((0, 1.0), (1, 0.0), (2.5, 0.0)):
        obj, ev = pass_weights(empty_events, n)
        np.testing.assert_array_equal(ev, np.full(3, want))
    p = ak.Array([[0.2, 0.9], [0.5]])
    obj, ev = pass_weights(p, 0)
    np.testing.assert_allclose(obj.values, [0.2, 0.9, 0.5], rtol=1e-15)
    np.testing.assert_array_equal(ev, [1.0, 1.0])
    obj, ev = pass_weights(p, 50)  # above every multiplicity: zeros, not NaN
    np.testing.assert_array_equal(ev, [0.0, 0.0])
    np.testing.assert_array_equal(obj.values, [0.0, 0.0, 0.0])
    for bad, needle in [
        (lambda: pass_weights(np.array([0.1, 0.2]), 1), "expected one list"),
        (lambda: pass_weights(p, float("nan")), "n: expected a finite number"),
        (lambda: pass_weights(p, 1, cap=-1), "cap: expected an integer"),
        (lambda: pass_weights(p, 1, width=-1.0), "width: expected a finite number"),
    ]:
        with pytest.raises(ValueError) as err:
            bad()
        assert needle in str(err.value) and "\n" not in str(err.value)


def test_gradients_against_finite_differences() -> None:
    """d/d(pt cut, eta cut, n) of weighted sums, with ``n`` traced (no cap: exact for every
    n) and between integers (the soft count step), and with a cap."""
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 7, 60)
    pt = ak.unflatten(rng.exponential(40, counts.sum()) + 15, counts)
    eta = ak.unflatten(rng.normal(0, 1.5, counts.sum()), counts)

    def f(theta, cap=None):  # noqa: ANN001, ANN202
        p = soft_cut(pt, ">", theta[0], 5.0) * soft_cut(abs(eta), "<", theta[1], 0.3)
        obj, ev = pass_weights(p, theta[2], width=0.6, cap=cap)
        return jnp.stack([stats.mean(pt, weight=obj), jnp.sum(ev), jnp.sum(obj.values ** 2)])

    theta = np.array([35.0, 1.8, 2.4])
    fd = central_difference(lambda t: f(jnp.asarray(t)), theta, [1e-3, 1e-4, 1e-4], points=5)
    for cap in (None, 4):
        jac = np.asarray(jax.jacrev(lambda t, cap=cap: f(t, cap))(jnp.asarray(theta)))
        np.testing.assert_allclose(jac, fd, rtol=1e-7)
    fwd = np.asarray(jax.jacfwd(f)(jnp.asarray(theta)))
    np.testing.assert_allclose(fwd, jac, rtol=1e-12)
    assert np.all(np.abs(fd) > 0)
    # a traced n above the given cap is NaN (the engine's rule), never a silent bias
    assert np.isnan(np.asarray(jax.jit(lambda t: f(t, 2))(jnp.asarray(theta)))).all()


def _own_states(events, theta, widths):
    """An own processor's chunk states for configs/ttbar.yaml's selection, written with
    soft_cut, Jagged arithmetic and pass_weights."""
    pt = stats.from_awkward(events.Jet.pt)
    eta = stats.from_awkward(events.Jet.eta)
    gen = jnp.asarray(np.asarray(events.genWeight, dtype=np.float64))

    def fn(t):  # noqa: ANN001, ANN202
        p = soft_cut(pt, ">", t[0], widths[0]) * soft_cut(abs(eta), "<", t[1], widths[1])
        objects, event = pass_weights(p, 2)
        w_obj = objects * gen
        w_ev = event * gen
        return {
            "selected_sumw": jnp.sum(w_ev),
            "selected_sumw2": jnp.sum(w_ev * w_ev),
            "jet_pt": stats.moments(pt, weight=w_obj),
            "jet_pt_eta": stats.comoments(pt, eta, weight=w_obj),
        }

    return fn


def _engine_form(own: dict) -> dict:
    """The own states in the engine's state tree (to flatten both alike)."""
    return {"selected_sumw": own["selected_sumw"], "selected_sumw2": own["selected_sumw2"],
            "observables": {"jet_pt": {"moments": own["jet_pt"]},
                            "jet_pt_eta": {"comoments": own["jet_pt_eta"]}}}


@pytest.mark.slow
def test_yaml_engine_and_own_processor_agree(shared_data: Path) -> None:
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backends.numba import fastkernel
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.testing import load_chunk

    cfg = yaml.safe_load((REPO / "configs" / "ttbar.yaml").read_text())
    cfg["datasets"] = {"sig": {"files": ["unused.root"], "weight": "genWeight"}}
    config = config_from_dict(cfg)
    plan = build_plan(config)
    theta = np.array([config.initial_params()[n] for n in plan.param_names])
    widths = np.array(initial_widths(config))
    path = shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root"
    cols = read_columns(path, plan)
    events = load_chunk(path)
    names = list(plan.param_names)
    idx = [names.index("jet_pt_min"), names.index("jet_abs_eta_max")]
    assert [names[i] for i in plan.trainable] == ["jet_pt_min", "jet_abs_eta_max"]
    for pt_min in (30.0, 45.0):
        theta[idx[0]] = pt_min
        value, jac = fastkernel.evaluate_columns(cols, plan, theta, widths, order=1)
        fn = _own_states(events, theta, widths[[0, 1]])
        t0 = jnp.asarray(theta[idx])
        own, own_jac = fn(t0), jax.jacrev(fn)(t0)
        value = {**value, "observables": {k: value["observables"][k]
                                          for k in ("jet_pt", "jet_pt_eta")}}
        jac = {**jac, "observables": {k: jac["observables"][k] for k in ("jet_pt", "jet_pt_eta")}}
        a, b = leaves(value), leaves(_engine_form(own))
        ja, jb = leaves(jac), leaves(_engine_form(own_jac))
        assert a.keys() == b.keys()
        for k in b:
            scale = np.max(np.abs(a[k]))
            assert np.max(np.abs(a[k] - b[k])) <= 1e-12 * scale, (k, a[k], b[k])
            scale = np.max(np.abs(ja[k]))
            assert np.max(np.abs(ja[k] - jb[k])) <= 1e-11 * max(scale, 1e-300), (k, ja[k], jb[k])
        assert abs(float(a["jet_pt/moments/sumw"])) > 0
        assert np.abs(ja["jet_pt/moments/m2"]).max() > 0


# --- several sets, joint counts ----------------------------------------------------------


def _joint_enumerated(own, parents, counts, event):
    """Per event: the members over all configurations of every own bit (jets, bjets of
    the same jets, muons), the counts' hard decisions, and their expectations."""
    from tests.reference import members

    mem, prob = members({k: v[event] for k, v in own.items()}, parents)
    ok = np.ones(len(prob), dtype=bool)
    for which, op, n in counts:
        which = (which,) if isinstance(which, str) else which
        k = sum(mem[s].sum(axis=1) for s in which)
        ok &= {">": k > n, ">=": k >= n, "<": k < n, "<=": k <= n, "==": k == n}[op]
    objects = {s: (prob[:, None] * (mem[s] & ok[:, None])).sum(axis=0) for s in own}
    return objects, float(np.sum(prob * ok))


@pytest.mark.parametrize("counts", [
    [("jets", ">=", 2), ("bjets", ">=", 1)],
    [("jets", ">=", 2), ("bjets", "==", 1), ("muons", "<", 2)],
    [(("jets", "bjets"), ">", 2), (("bjets", "muons"), "<=", 2), ("jets", "==", 9)],
    [("muons", ">=", 7)],
    [],
])
def test_joint_against_enumeration(counts) -> None:  # noqa: ANN001
    from analysis.soft import joint_pass_weights

    rng = np.random.default_rng(5)
    n_ev = 25
    nj, nm = rng.integers(0, 5, n_ev), rng.integers(0, 3, n_ev)
    nj[:2], nm[:2] = [0, 4], [0, 2]
    def lists(c):  # noqa: ANN001, ANN202
        return [list(rng.uniform(0, 1, k)) for k in c]
    own = {"jets": lists(nj), "bjets": lists(nj), "muons": lists(nm)}
    own["jets"][1][0] = 1.0
    own["bjets"][1][1] = 0.0
    parents = {"bjets": "jets"}
    got, ev = joint_pass_weights({k: ak.Array(v) for k, v in own.items()}, counts,
                                 parents=parents)
    for e in range(n_ev):
        ref_obj, ref_ev = _joint_enumerated(own, parents, counts, e)
        np.testing.assert_allclose(ev[e], ref_ev, rtol=1e-12, atol=1e-15)
        for s in own:
            np.testing.assert_allclose(got[s].to_awkward()[e].to_numpy(), ref_obj[s],
                                       rtol=1e-12, atol=1e-15, err_msg=f"{s} event {e}")


def test_joint_matches_single_and_gradients() -> None:
    from analysis.soft import joint_pass_weights

    lists = random_lists(4)
    p = ak.Array(lists)
    obj, ev = pass_weights(p, 2.4, width=0.5)
    jobj, jev = joint_pass_weights({"jets": p}, [("jets", ">=", 2.4)], widths=[0.5])
    np.testing.assert_allclose(jev, ev, rtol=1e-13)
    np.testing.assert_allclose(jobj["jets"].values, obj.values, rtol=1e-13, atol=1e-16)
    x = stats.from_awkward(ak.Array([[float(i) for i in range(len(v))] for v in lists]))

    def f(t):  # noqa: ANN001, ANN202
        q = stats.from_awkward(p).map(lambda v: v ** t[0])
        o, e = joint_pass_weights({"jets": q, "b": q * 0.5}, [("jets", ">=", t[1]),
                                  (("jets", "b"), "<", 5)], parents={"b": "jets"},
                                  widths=[0.5, 0.0])
        return jnp.stack([jnp.sum(e), stats.mean(x, weight=o["b"])])

    t0 = np.array([1.3, 2.4])
    jac = np.asarray(jax.jacrev(f)(jnp.asarray(t0)))
    fd = central_difference(lambda t: f(jnp.asarray(t)), t0, 1e-4, points=5)
    np.testing.assert_allclose(jac, fd, rtol=1e-7)
    with pytest.raises(ValueError, match="'c' is not a set"):
        joint_pass_weights({"jets": p}, [("c", ">=", 1)])
    with pytest.raises(ValueError, match="same collection"):
        joint_pass_weights({"jets": p, "b": ak.Array([[0.5]] * len(lists))}, [],
                           parents={"b": "jets"})


def test_a_compiled_derive_runs_pass_weights_on_the_host_s_segment_ids(
        monkeypatch, tmp_path) -> None:  # noqa: ANN001
    """Inside a compiled stats.derive, pass_weights finds each object's event in the
    program's arguments (computed on the host), not by a prefix sum over the objects
    (~2 s of XLA compilation per program for a 50k-event chunk): its trace calls no
    associative scan; values against the exact enumeration."""
    from analysis.stats import _compiled

    rng = np.random.default_rng(11)
    lists = [list(rng.uniform(0, 1, c)) for c in rng.integers(0, 6, 40)]
    q = stats.from_awkward(ak.Array(lists))

    def fn(t):  # noqa: ANN001, ANN202
        objects, events = pass_weights(q * t["scale"], 2)
        return {"o": stats.sum(objects), "e": jnp.sum(events)}

    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    _compiled._PROGRAMS.clear()
    scans: list = []
    real = jax.lax.associative_scan
    monkeypatch.setattr(jax.lax, "associative_scan",
                        lambda *a, **k: scans.append(1) or real(*a, **k))
    try:
        built = _compiled.BUILT["programs"]
        got = stats.derive(fn, {"scale": 0.8})
        assert _compiled.BUILT["programs"] == built + 1 and not scans
    finally:
        _compiled._PROGRAMS.clear()
        jax.config.update("jax_compilation_cache_dir", before)
    ref_obj, ref_ev = enumerated([[v * 0.8 for v in lst] for lst in lists], 2)
    np.testing.assert_allclose(float(got.value["o"]),
                               sum(float(np.sum(o)) for o in ref_obj), rtol=1e-12)
    np.testing.assert_allclose(float(got.value["e"]), float(np.sum(ref_ev)), rtol=1e-12)
