"""stats.derive in forward mode runs the chunk function compiled, its arrays as arguments.

References: the eager evaluation (``value_and_derivatives`` of the same function, as
derive ran before) to 1e-12 for orders 0, 1, 2; central finite differences for the
Jacobian; one compiled program per structure, reused by a second chunk of the same
shapes with other data (so the data are arguments, not constants); a function with
Python control flow on values runs eagerly after one warning line.
"""

from __future__ import annotations

import awkward as ak
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import stats
from analysis.soft import pass_weights, soft_cut
from analysis.stats import _compiled
from analysis.stats._closure import size_bucket
from analysis.stats._params import numpy_vector, param_spec
from analysis.stats.derive import _checked_states
from analysis.stats.taylor import value_and_derivatives
from tests.conftest import central_difference

THETA = {"pt_min": 30.0, "eta_max": 2.1}


def _programs() -> int:
    """Programs built or loaded from disk (a rerun finds them in the program store)."""
    return _compiled.BUILT["programs"]


def _chunk(seed: int, n: int = 300):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 7, n)
    pt = ak.unflatten(15 + rng.exponential(30, counts.sum()), counts)
    eta = ak.unflatten(rng.normal(0, 1.5, counts.sum()), counts)
    return stats.from_awkward(pt), abs(stats.from_awkward(eta))


def _fn(pt, abs_eta):  # noqa: ANN001, ANN202
    def fn(theta):  # noqa: ANN001, ANN202
        p = soft_cut(pt, ">", theta["pt_min"], 5.0) * soft_cut(abs_eta, "<", theta["eta_max"], 0.2)
        jets, events = pass_weights(p, 2)
        return {"jet_pt": stats.moments(pt, weight=jets), "selected": events.sum(),
                "n": np.float64(len(pt))}

    return fn


def _eager(fn, order: int):  # noqa: ANN001, ANN202
    spec = param_spec(THETA, "test")
    t0 = jnp.asarray(numpy_vector(spec, THETA))
    return value_and_derivatives(lambda t: _checked_states(fn(spec.unflatten(t)), "t"), t0,
                                 order=order)


def _close(a, b, rtol: float = 1e-12) -> None:  # noqa: ANN001
    """Leaves equal to ``rtol`` of the largest of the pair, a state's centre and offset
    summed (the offset is a rounding-level correction of the centre)."""

    def flat(tree):  # noqa: ANN001, ANN202
        out = []
        for leaf in jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "_fields")):
            if hasattr(leaf, "_fields"):
                f = {k: np.asarray(v) for k, v in leaf._asdict().items()}
                for centre, offset in (("center", "dmean"), ("center_x", "dmean_x"),
                                       ("center_y", "dmean_y")):
                    if centre in f:
                        f[centre] = f[centre] + f.pop(offset)
                out.extend(f.values())
            else:
                out.append(np.asarray(leaf))
        return out

    for x, y in zip(flat(a), flat(b), strict=True):
        scale = max(np.max(np.abs(x), initial=0.0), np.max(np.abs(y), initial=0.0), 1e-300)
        assert np.max(np.abs(x - y), initial=0.0) <= rtol * scale, (x, y)


@pytest.fixture(scope="module")
def eager_order_2() -> tuple:
    """The eager reference of chunk 1 at order 2 (value, Jacobian, Hessian): one
    evaluation for the three orders below (its value and Jacobian are those of orders 0
    and 1; each eager order traced on its own cost ~2-4 s more)."""
    return _eager(_fn(*_chunk(1)), 2)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_compiled_equals_eager(order: int, eager_order_2: tuple) -> None:
    fn = _fn(*_chunk(1))
    d = stats.derive(fn, THETA, order=order)
    value, jac, hess = eager_order_2
    _close(d.value, value)
    if order >= 1:
        _close(d.jac, jac)
    if order == 2:
        _close(d.hess, hess)


def test_one_program_per_bucket_and_finite_differences() -> None:
    _compiled._PROGRAMS.clear()
    built = _programs()
    pt, eta = _chunk(2)
    assert pt.num_elements != size_bucket(pt.num_elements)  # so padding is exercised
    fn_a, fn_b = _fn(pt, eta), _fn(*_chunk(3))  # fn_b: other lists, other object count
    d_a = stats.derive(fn_a, THETA)
    assert _programs() == built + 1
    stats.derive(fn_a, THETA)
    other = _fn(pt.with_values(pt.values * 1.1), eta)  # same shapes, other data
    d_other = stats.derive(other, THETA)
    assert _programs() == built + 1  # data are arguments, not constants
    assert not np.allclose(d_other.value["jet_pt"].m2, d_a.value["jet_pt"].m2)
    _close(d_other.jac, _eager(other, 1)[1])
    d_b = stats.derive(fn_b, THETA)  # other lists in the same buckets: same program
    assert _chunk(3)[0].num_elements != pt.num_elements
    assert _programs() == built + 1
    value_b, jac_b, _ = _eager(fn_b, 1)  # padding changes nothing
    _close(d_b.value, value_b)
    _close(d_b.jac, jac_b)
    names = sorted(THETA)  # the parameter order of a dict (analysis.stats._params)

    def f(t):  # noqa: ANN001, ANN202
        return stats.derive(fn_a, dict(zip(names, t)), order=0).value["jet_pt"].m2

    fd = central_difference(f, np.array([THETA[k] for k in names]), 1e-4, points=5)
    np.testing.assert_allclose(d_a.jac["jet_pt"].m2, fd, rtol=1e-7)


def test_padding_is_weight_zero() -> None:
    """Statistics of a padded Jagged (unweighted, per list, per event) equal the
    unpadded ones: the padding lies in no list and has weight 0."""
    pt, eta = _chunk(5, n=37)
    n_obj = pt.num_elements

    def fn(theta):  # noqa: ANN001, ANN202
        w = soft_cut(pt, ">", theta["pt_min"], 5.0)
        # log(0) at the padding: masked, not NaN; empty lists give NaN (both paths)
        per_event = stats.mean(pt.map(jnp.log), weight=w, axis=1)
        return {"all": stats.moments(pt), "w": stats.moments(pt, weight=w),
                "co": stats.comoments(pt, eta, weight=w), "event": jnp.nansum(per_event)}

    d = stats.derive(fn, {"pt_min": 30.0})
    value, jac, _ = value_and_derivatives(
        lambda t: _checked_states(fn({"pt_min": t[0]}), "t"), jnp.asarray([30.0]), order=1)
    assert size_bucket(n_obj) > n_obj
    _close(d.value, value)
    _close(d.jac, jac)
    assert float(d.value["all"].sumw) == n_obj  # the real objects only


def test_a_chunked_pass_compiles_a_bounded_number_of_times() -> None:
    """20 chunks as coffea makes them (one event count, object counts and longest
    lists that differ): at most 3 programs for the pass, none for a second pass."""
    _compiled._PROGRAMS.clear()
    built = _programs()
    chunks = [_chunk(100 + i, n=500) for i in range(20)]
    sizes = {c[0].num_elements for c in chunks}
    assert len(sizes) >= 15  # the object counts differ
    for pt, eta in chunks:
        stats.derive(_fn(pt, eta), THETA)
    first = _programs() - built
    assert 1 <= first <= 3, first
    for pt, eta in chunks:
        stats.derive(_fn(pt, eta), THETA)
    assert _programs() - built == first


def test_untraceable_function_runs_eagerly() -> None:
    pt, _ = _chunk(4)

    def fn(theta):  # noqa: ANN001, ANN202
        w = soft_cut(pt, ">", theta["pt_min"], 5.0)
        if float(jnp.max(pt.values)) > 0:  # Python control flow on (data) values
            w = w * 2.0
        return {"pt": stats.moments(pt, weight=w)}

    with pytest.warns(RuntimeWarning, match=r"^stats\.derive: fn cannot be compiled") as rec:
        d = stats.derive(fn, {"pt_min": 30.0})
    assert "\n" not in str(rec[0].message)
    value, jac, _ = value_and_derivatives(
        lambda t: _checked_states(fn({"pt_min": t[0]}), "t"), jnp.asarray([30.0]), order=1)
    _close(d.value, value)
    _close(d.jac, jac)


def test_a_pickled_chunk_function_reuses_the_program() -> None:
    """coffea sends the processor to its workers by cloudpickle: every chunk's function
    arrives with a fresh globals dict and new code objects; the program is reused."""
    import cloudpickle

    _compiled._PROGRAMS.clear()
    built = _programs()
    fn = _fn(*_chunk(6))
    results = [stats.derive(cloudpickle.loads(cloudpickle.dumps(fn)), THETA) for _ in range(3)]
    assert _programs() == built + 1
    _close(results[0].jac, results[2].jac)


def test_other_closures_take_the_traced_path() -> None:
    """A function closing over an object of a class of its own, or calling
    count_at_least (concrete lists), is traced as it is: same values, no program."""
    from analysis.soft import count_at_least

    pt, eta = _chunk(7)

    class Holder:
        pass

    holder = Holder()
    holder.pt = pt

    def held(theta):  # noqa: ANN001, ANN202
        return {"pt": stats.moments(holder.pt, weight=soft_cut(holder.pt, ">", theta["pt_min"],
                                                               5.0))}

    def counted(theta):  # noqa: ANN001, ANN202
        p = soft_cut(pt, ">", theta["pt_min"], 5.0)
        return {"n": count_at_least(p, 2).sum(), "pt": stats.moments(pt, weight=p)}

    _compiled._PROGRAMS.clear()
    built = _programs()
    for fn in (held, counted):
        d = stats.derive(fn, {"pt_min": 30.0})
        value, jac, _ = value_and_derivatives(
            lambda t, fn=fn: _checked_states(fn({"pt_min": t[0]}), "t"),
            jnp.asarray([30.0]), order=1)
        _close(d.value, value)
        _close(d.jac, jac)
    assert _programs() == built


def test_raw_values_never_see_the_padding() -> None:
    """A reduction of ``.values`` in your function (``jnp.mean(pt.values)``) counted the
    padding of the compiled program; now reading ``.values`` there makes derive trace the
    function on the chunk's own arrays: the eager values, to 1e-12."""
    pt, eta = _chunk(7)
    assert pt.num_elements != size_bucket(pt.num_elements)

    def fn(theta):  # noqa: ANN001, ANN202
        w = soft_cut(pt.values, ">", theta["pt_min"], 5.0)  # flat, as in the processors guide
        return {"mean": jnp.mean(pt.values) * theta["eta_max"],
                "jet_pt": stats.moments(pt.values, weight=w)}

    d = stats.derive(fn, THETA)
    value, jac, _ = _eager(fn, 1)
    _close(d.value, value)
    _close(d.jac, jac)


def test_values_read_in_the_compiled_program_raise() -> None:
    from analysis.stats._closure import closure_inputs
    from analysis.stats.offsets import PaddedValuesError

    pt, _ = _chunk(8)
    seen = []

    def fn(theta):  # noqa: ANN001, ANN202
        return {"s": jnp.sum(pt.values) * theta["pt_min"]}

    _, args, rebuild = closure_inputs(fn)

    def body(a):  # noqa: ANN001, ANN202
        f = rebuild(a)
        try:
            return f({"pt_min": 1.0})
        except PaddedValuesError as err:
            seen.append(str(err))
            return {"s": 0.0}
        finally:
            from analysis.stats.offsets import forget_bounds

            forget_bounds()

    jax.jit(body)(args)
    assert len(seen) == 1 and "\n" not in seen[0] and "padded" in seen[0]


def test_padded_arguments_kept_with_the_jagged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later derive over the same Jagged (kept columns) pads nothing again; a Jagged
    given new values is padded again (never the old values), with the reference's
    results."""
    from analysis.stats import _closure

    made = []
    real = _closure._padded

    def counted(values, offsets):  # noqa: ANN001, ANN202
        made.append(1)
        return real(values, offsets)

    monkeypatch.setattr(_closure, "_padded", counted)
    pt, eta = _chunk(4)
    fn = _fn(pt, eta)
    first = stats.derive(fn, THETA)
    assert len(made) == 2  # pt and |eta|
    again = stats.derive(fn, {"pt_min": 31.0, "eta_max": 2.1})
    assert len(made) == 2  # kept
    assert again.value["jet_pt"].sumw != first.value["jet_pt"].sumw  # other theta
    value, jac, _ = _eager(_fn(pt, eta), 1)
    _close(first.value, value)
    _close(first.jac, jac)
    pt.values = pt.values * 1.1  # the same object, other values: padded again
    changed = stats.derive(fn, THETA)
    assert len(made) == 3
    value, jac, _ = _eager(_fn(pt, eta), 1)
    _close(changed.value, value)
    _close(changed.jac, jac)
    assert not np.allclose(changed.value["jet_pt"].m2, first.value["jet_pt"].m2)
