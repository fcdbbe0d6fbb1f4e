"""Negative total background bins (negative-weight MC): clipped to 0 within a tolerance
by default, everywhere with ``clip_negative``, refused in one line naming the option
otherwise; against a hand computation, pyhf on hand-clipped templates and the
gradient's definition (0 where clipped)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from tests.likelihood.test_pyhf import pyhf_model, pyhf_z

SIG = np.array([3.0, 5.0, 2.0])
TT = np.array([20.0, 12.0, 6.0])
DY = np.array([4.0, 3.0, 1.0])


def hist(sumw, sumw2=None):
    sumw = np.asarray(sumw, dtype=np.float64)
    sumw2 = 0.05 * np.abs(sumw) if sumw2 is None else np.asarray(sumw2, dtype=np.float64)
    return stats.Histogram([0.0, 1.0, 2.0, 3.0], np.r_[0.0, sumw, 0.0], np.r_[0.0, sumw2, 0.0])


def states(dy=DY, dy_up=None, tt_up=None):
    """Signal, ttbar and a Drell-Yan sample whose up variation may go negative."""
    dy_up = DY * 1.1 if dy_up is None else dy_up
    tt_up = TT * 1.05 if tt_up is None else tt_up
    return {
        "sig": {"h": hist(SIG), "up": hist(SIG * 1.02), "down": hist(SIG * 0.98)},
        "tt": {"h": hist(TT), "up": hist(tt_up), "down": hist(TT * 0.96)},
        "dy": {"h": hist(dy), "up": hist(dy_up), "down": hist(np.asarray(dy) * 0.9)},
    }


def model(**kw):
    return lk.Model([lk.Channel("sr", "h", {"jes": ("up", "down")})], ["sig"], **kw)


def test_a_soft_tails_negative_bin_is_clipped_by_default():
    """A variation's total background of -7.6e-8 in a bin (a soft tail of negative
    weights: 1e-9 of the channel's scale) is set to 0 by default, every other bin and
    template passed through bit for bit."""
    up_tt = TT * 1.05
    up_tt[1] = 0.0
    s = states(dy_up=np.array([4.4, -7.64e-8, 1.1]), tt_up=up_tt)
    m = model()
    t = lk.templates(s, m)["sr"]
    np.testing.assert_array_equal(t["dy"]["variations"]["jes"]["up"], [4.4, 0.0, 1.1])
    np.testing.assert_array_equal(t["tt"]["variations"]["jes"]["up"], up_tt)
    for ds, arr in (("sig", SIG), ("tt", TT), ("dy", DY)):
        np.testing.assert_array_equal(t[ds]["nominal"]["sumw"], arr)
    lk.check_templates(lk.templates(s, m), m)  # nothing left to refuse


def test_a_real_negative_bin_is_refused_naming_clip_negative():
    s = states(dy=np.array([4.0, -20.0, 1.0]))
    m = model()
    with pytest.raises(lk.LikelihoodError) as err:
        lk.check_templates(lk.templates(s, m), m, lk.edges(s, m))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("likelihood: channel 'sr', bin 1 [1, 2)"), msg
    assert "total background sumw = -8" in msg and "clip_negative: true" in msg, msg
    s = states(dy_up=np.array([4.4, -20.0, 1.1]))
    with pytest.raises(lk.LikelihoodError) as err:
        lk.check_templates(lk.templates(s, m), m, lk.edges(s, m))
    assert "systematic 'jes' up" in str(err.value) and "clip_negative: true" in str(err.value)


def test_clip_negative_sets_the_total_to_zero_as_by_hand():
    """``clip_negative``: each background's entries of a template in a bin whose total
    background is negative are 0 (nominal sumw and sumw2, or the variation's), the
    rest as given: a hand computation."""
    dy, dy_up = np.array([4.0, -20.0, 1.0]), np.array([-30.0, 3.3, 1.1])
    t = lk.templates(states(dy=dy, dy_up=dy_up), model(clip_negative=True))["sr"]
    nominal_kept = (TT + dy) >= 0
    up_kept = (TT * 1.05 + dy_up) >= 0
    assert nominal_kept.tolist() == [True, False, True] and up_kept.tolist() == [False, True, True]
    for ds, nom, up in (("tt", TT, TT * 1.05), ("dy", dy, dy_up)):
        np.testing.assert_array_equal(t[ds]["nominal"]["sumw"], np.where(nominal_kept, nom, 0.0))
        np.testing.assert_array_equal(t[ds]["nominal"]["sumw2"],
                                      np.where(nominal_kept, 0.05 * np.abs(nom), 0.0))
        np.testing.assert_array_equal(t[ds]["variations"]["jes"]["up"],
                                      np.where(up_kept, up, 0.0))
    np.testing.assert_array_equal(t["sig"]["nominal"]["sumw"], SIG)  # signal untouched


def test_clipped_significance_equals_pyhf_on_hand_clipped_templates():
    """Z of the model with a variation clipped = pyhf's Z of the same model whose
    templates were clipped by hand (pyhf has no clipping of its own)."""
    dy_up = np.array([4.4, -15.0, 1.1])
    raw = states(dy_up=dy_up)
    by_hand = states(dy_up=np.where(TT * 1.05 + dy_up >= 0, dy_up, 0.0),
                     tt_up=np.where(TT * 1.05 + dy_up >= 0, TT * 1.05, 0.0))
    m = model(clip_negative=True)
    result = lk.significance(raw, m)
    lk.raise_for_fit(result.fit, step="test")
    ref = pyhf_z(pyhf_model(by_hand, model()))
    assert abs(float(result.z) - ref) < 1e-6, (float(result.z), ref)


def test_the_clip_has_gradient_zero_where_it_clips():
    """``h' = h [B >= 0]``: d h'/d h is 1 where kept, 0 where clipped (like max(B, 0))."""
    m = model(clip_negative=True)

    def clipped_up(dy_up):
        s = states()
        s["dy"]["up"] = stats.Histogram(s["dy"]["up"].edges, jnp.concatenate(
            [jnp.zeros(1), dy_up, jnp.zeros(1)]), s["dy"]["up"].sumw2_flow)
        return lk.templates(s, m)["sr"]["dy"]["variations"]["jes"]["up"]

    jac = jax.jacfwd(clipped_up)(jnp.array([4.4, -15.0, 1.1]))
    np.testing.assert_array_equal(np.asarray(jac), np.diag([1.0, 0.0, 1.0]))


def test_model_refuses_a_clip_negative_that_is_not_a_bool():
    with pytest.raises(lk.LikelihoodError, match="clip_negative: expected true or false"):
        model(clip_negative="yes")


def _negative_dy(small_data, **likelihood):
    """The likelihood pipeline's config whose Drell-Yan 'neg' up variation weighs every
    event by -3 (negative-weight MC dominating every bin): its total background is
    negative wherever Drell-Yan is the background."""
    import copy

    from tests.likelihood.test_yaml_pipeline import lk_config

    cfg = copy.deepcopy(lk_config(small_data))
    cfg["systematics"].append({"name": "neg", "type": "weight", "up": "-3", "down": "1",
                               "datasets": ["dy"]})
    cfg["likelihood"].update(likelihood, upper_limit=False)
    return cfg


def test_evaluate_refuses_a_negative_variation_naming_the_option(small_data, tmp_path):
    from tests.likelihood.test_yaml_pipeline import _evaluate_error

    line = _evaluate_error(_negative_dy(small_data), tmp_path)
    assert "systematic 'neg' up, dataset 'dy', bin 0 [20, 60)" in line, line
    assert "expected >= 0 (set likelihood: {clip_negative: true} to clip" in line, line


@pytest.mark.slow  # one evaluate pass, ~30 s
def test_evaluate_with_clip_negative_writes_the_clipped_templates(small_data, tmp_path):
    import json

    from analysis.cli.parser import main
    from tests.conftest import write_config

    path = write_config(tmp_path, _negative_dy(small_data, clip_negative=True))
    out = tmp_path / "out"
    assert main(["evaluate", str(path), "--output", str(out), "--quiet"]) == 0
    sec = json.loads((out / "results.json").read_text())["likelihood"]
    dy = sec["channels"]["b1"]["samples"]["dy"]
    assert np.sum(dy["nominal"]["sumw"]) > 0
    assert dy["variations"]["neg"]["up"] == [0.0] * len(dy["nominal"]["sumw"])
    assert sec["significance"]["value"] > 0
