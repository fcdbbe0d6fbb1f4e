"""One-line errors of the likelihood: bad models, bad templates, a fit that fails."""

from __future__ import annotations

import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from analysis.errors import DiffcoffeaError


def h(sumw, edges=(0.0, 1.0, 2.0, 3.0), sumw2=None):
    sumw = np.asarray(sumw, dtype=np.float64)
    sumw2 = 0.1 * np.abs(sumw) if sumw2 is None else np.asarray(sumw2, dtype=np.float64)
    return stats.Histogram(edges, np.r_[0.0, sumw, 0.0], np.r_[0.0, sumw2, 0.0])


def states(sig=(2.0, 3.0, 1.0), bkg=(10.0, 8.0, 5.0)):
    return {
        "sig": {"h": h(sig), "up": h(np.asarray(sig) * 1.1), "down": h(np.asarray(sig) * 0.9)},
        "bkg": {"h": h(bkg), "up": h(np.asarray(bkg) * 1.05), "down": h(np.asarray(bkg) * 0.97)},
    }


MODEL = lk.Model([lk.Channel("sr", "h", {"jes": ("up", "down")})], ["sig"])


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("likelihood: "), msg
    assert isinstance(err.value, DiffcoffeaError)
    return msg


def test_non_finite_template_names_the_bin():
    s = states()
    s["bkg"]["up"] = h([10.5, np.nan, 5.0])
    tmpl = lk.templates(s, MODEL)
    with pytest.raises(lk.LikelihoodError) as err:
        lk.check_templates(tmpl, MODEL, lk.edges(s, MODEL))
    assert one_line(err) == (
        "likelihood: channel 'sr', dataset 'bkg', variation 'jes' up, bin 1 [1, 2): nan; "
        "expected a finite number"
    )


def test_negative_background_names_the_bin():
    s = states(bkg=(10.0, 8.0, -0.5))
    with pytest.raises(lk.LikelihoodError) as err:
        lk.check_templates(lk.templates(s, MODEL), MODEL, lk.edges(s, MODEL))
    assert "channel 'sr', bin 2 [2, 3): total background sumw = -0.5; expected >= 0" in one_line(
        err
    )
    lk.check_templates(lk.templates(states(bkg=(10.0, 0.0, 5.0)), MODEL), MODEL)  # the floor


def test_edges_differ_between_templates():
    s = states()
    s["bkg"]["down"] = h([9.0, 7.0, 4.0], edges=(0.0, 1.0, 2.5, 3.0))
    with pytest.raises(lk.LikelihoodError) as err:
        lk.edges(s, MODEL)
    assert "dataset 'bkg' jes down histogram 'down' has edges [0.0, 1.0, 2.5, 3.0]" in one_line(err)


def test_edges_not_increasing():
    with pytest.raises(ValueError, match=r"strictly increasing edges, found edges\[2\] = 1"):
        stats.histogram(np.ones(3), [0.0, 2.0, 1.0])


def test_channel_without_signal():
    with pytest.raises(lk.LikelihoodError) as err:
        lk.Model([lk.Channel("cr", "h", datasets=["bkg"])], ["sig"])
    assert one_line(err) == (
        "likelihood: channel 'cr' has no signal dataset (datasets ['bkg'], signal ['sig']); "
        "every channel needs one"
    )
    s = {"bkg": states()["bkg"]}
    with pytest.raises(lk.LikelihoodError) as err:
        lk.templates(s, MODEL)
    assert "channel 'sr' has no signal dataset" in one_line(err)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: lk.Normalisation("n", ["bkg"], 0.0),
            "normalisation 'n': kappa = 0.0; expected a finite number > 0",
        ),
        (
            lambda: lk.Normalisation("n", "bkg", 1.1),
            "normalisation 'n': datasets: expected a list of names",
        ),
        (
            lambda: lk.Channel("sr", "h", {"jes": "up"}),
            "channel 'sr': variations: expected {name: (up_key, down_key)}",
        ),
        (lambda: lk.Model([], ["sig"]), "channels: expected one or more Channel"),
        (
            lambda: lk.Model([lk.Channel("a", "h"), lk.Channel("a", "g")], ["sig"]),
            "channels: names repeat",
        ),
        (
            lambda: lk.Model(
                [lk.Channel("sr", "h", {"n": ("u", "d")})],
                ["sig"],
                [lk.Normalisation("n", ["bkg"], 1.1)],
            ),
            "nuisance names repeat",
        ),
    ],
)
def test_bad_model_one_line(build, message):
    with pytest.raises(lk.LikelihoodError) as err:
        build()
    assert message in one_line(err)


def test_missing_histogram_key():
    s = states()
    del s["sig"]["up"]
    with pytest.raises(lk.LikelihoodError) as err:
        lk.templates(s, MODEL)
    assert one_line(err) == (
        "likelihood: channel 'sr': variation 'jes': dataset 'sig' has no histogram 'up' "
        "(found ['down', 'h'])"
    )


def test_fit_that_does_not_converge_names_step_and_status():
    s = states()
    result = lk.significance(s, MODEL, max_steps=1)
    assert not bool(result.fit.converged)
    with pytest.raises(lk.FitError) as err:
        lk.raise_for_fit(result.fit, step="step 3 (mu = 0 profile)")
    assert one_line(err).startswith(
        "likelihood: the step 3 (mu = 0 profile) fit did not converge: nonlinear_max_steps_reached after 1 steps"
    )
    good = lk.significance(s, MODEL)
    lk.raise_for_fit(good.fit, step="step 3")  # converged: no error
    assert bool(good.fit.converged)


def test_results_section_is_the_contract():
    """The likelihood section of results.json: keys, in-range sums, JSON types."""
    import json

    s = states()
    result = lk.significance(s, MODEL)
    out = lk.results_section(s, MODEL, result, {"cut": 0.25})
    assert json.loads(json.dumps(out)) == out
    assert set(out) == {"channels", "normalisations", "signal", "mc_stat", "floor",
                        "significance", "fit"}
    assert out["floor"] == MODEL.floor
    sr = out["channels"]["sr"]
    assert sr["edges"] == [0.0, 1.0, 2.0, 3.0]
    assert sr["samples"]["bkg"]["nominal"] == {"sumw": [10.0, 8.0, 5.0], "sumw2": [1.0, 0.8, 0.5]}
    assert sr["samples"]["sig"]["variations"]["jes"]["up"] == [2.2, 3.3000000000000003, 1.1]
    assert out["signal"] == ["sig"] and out["mc_stat"] is True and out["normalisations"] == {}
    assert out["significance"] == {"value": float(result.z), "grad": {"cut": 0.25},
                                   "reliable": True}
    assert out["fit"]["converged"] is True
    limit = lk.cls_limit(s, MODEL)
    with_limit = lk.results_section(s, MODEL, result, {"cut": 0.25}, limit=limit,
                                    limit_grad={"cut": -0.5})
    assert json.loads(json.dumps(with_limit)) == with_limit
    assert with_limit["upper_limit"] == {"value": float(limit.mu), "grad": {"cut": -0.5},
                                         "level": 0.05, "reliable": True,
                                         "data": "background-only asimov"}
    assert list(out["fit"]["nuisances"]) == [
        "jes",
        "mc_stat_sr[0]",
        "mc_stat_sr[1]",
        "mc_stat_sr[2]",
    ]
