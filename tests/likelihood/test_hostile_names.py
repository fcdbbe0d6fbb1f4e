"""Hostile names and templates (issue 37, class 1): names whose derived names collide
are refused at load time, variations are checked like the nominal, an unconverged fit
marks Z unreliable, and an lnN kappa beyond the constraint's reach is refused.

References: the collisions are written out by hand (``a:jes:up``, ``mc_stat_a[0]``);
the templates are small numbers whose signs are known."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from analysis import likelihood as lk
from analysis import stats
from analysis.cli.parser import main
from analysis.config.loader import ConfigError, config_from_dict
from analysis.limits import KAPPA_MAX
from tests.conftest import one_line_error, write_config
from tests.likelihood.test_yaml_pipeline import lk_config


def h(sumw, edges=(0.0, 1.0, 2.0, 3.0)):
    sumw = np.asarray(sumw, dtype=np.float64)
    return stats.Histogram(edges, np.r_[0.0, sumw, 0.0], np.r_[0.0, 0.1 * np.abs(sumw), 0.0])


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


# --- names ------------------------------------------------------------------------------


def test_channel_named_as_a_variation_key_is_refused():
    """Channel ``a:jes:up`` beside channel ``a`` and shape ``jes``: both would write the
    template key ``a:jes:up`` (Z moved 15.48 -> 16.19, exit 0, before)."""
    with pytest.raises(lk.LikelihoodError) as err:
        lk.Model([lk.Channel("a", "a", {"jes": ("a:jes:up", "a:jes:down")}),
                  lk.Channel("a:jes:up", "a:jes:up", {"jes": ("x", "y")})], ["sig"])
    assert one_line(err) == (
        "likelihood: histogram key 'a:jes:up' is both the up template of systematic 'jes' in "
        "channel 'a' and the nominal template of channel 'a:jes:up'; rename the channel or "
        "the systematic")
    # one histogram shared by two channels (same role) stays allowed
    lk.Model([lk.Channel("a", "h", {"jes": ("u", "d")}),
              lk.Channel("b", "h", {"jes": ("u", "d")})], ["sig"])


def test_nuisance_named_as_an_mc_stat_factor_is_refused():
    with pytest.raises(lk.LikelihoodError) as err:
        lk.Model([lk.Channel("a", "h")], ["sig"], [lk.Normalisation("mc_stat_a[0]", ["sig"], 1.1)])
    assert one_line(err) == ("likelihood: nuisance name 'mc_stat_a[0]' is the name of the "
                             "MC-statistics nuisance of channel 'a', bin 0; rename it")
    # without MC statistics, or for another channel's name, there is no such nuisance
    lk.Model([lk.Channel("a", "h")], ["sig"], [lk.Normalisation("mc_stat_a[0]", ["sig"], 1.1)],
             mc_stat=False)
    lk.Model([lk.Channel("a", "h")], ["sig"], [lk.Normalisation("mc_stat_b[0]", ["sig"], 1.1)])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return lk_config(tmp_path_factory.mktemp("nodata"))


def _refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    return one_line(err)


def test_config_template_key_collision(base):
    cfg = copy.deepcopy(base)
    cfg["likelihood"]["channels"]["b1:jes:up"] = {"histogram": "lead"}
    msg = _refused(cfg)
    assert "likelihood.channels.b1:jes:up" in msg and "template key 'b1:jes:up'" in msg
    assert "the up template of systematic 'jes' in channel 'b1'" in msg


def test_config_mc_stat_collision(base):
    cfg = copy.deepcopy(base)
    cfg["systematics"].append({"name": "mc_stat_b1[0]", "type": "lnN", "datasets": ["dy"],
                               "kappa": 1.1})
    msg = _refused(cfg)
    assert "systematics.3.name" in msg and "MC-statistics nuisance of channel 'b1', bin 0" in msg
    cfg["likelihood"]["mc_stat"] = False
    config_from_dict(cfg)  # no MC-statistics nuisances: nothing to collide with


def test_cli_collision_is_one_line(base, tmp_path, capsys):
    cfg = copy.deepcopy(base)
    cfg["likelihood"]["channels"]["b1:jes:up"] = {"histogram": "lead"}
    path = write_config(tmp_path / "c.yaml", cfg)
    capsys.readouterr()
    assert main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    assert "template key 'b1:jes:up'" in one_line_error(capsys.readouterr().err)


# --- kappa ------------------------------------------------------------------------------


@pytest.mark.parametrize("kappa", [1e300, 1e-300, KAPPA_MAX * 1.001])
def test_kappa_beyond_the_constraint_is_refused(base, kappa):
    with pytest.raises(lk.LikelihoodError, match=r"kappa = .*expected 0\.01 <= kappa <= 100"):
        lk.Normalisation("n", ["sig"], kappa)
    cfg = copy.deepcopy(base)
    cfg["systematics"][2]["kappa"] = kappa
    assert "systematics.2.lnN.kappa" in _refused(cfg)
    lk.Normalisation("n", ["sig"], KAPPA_MAX)  # the bound itself is allowed


# --- variations -------------------------------------------------------------------------


MODEL = lk.Model([lk.Channel("sr", "h", {"jes": ("up", "down")})], ["sig"])


def _states(sig_up=(2.2, 3.3, 1.1), bkg_up=(10.5, 8.4, 5.2)):
    return {"sig": {"h": h([2.0, 3.0, 1.0]), "up": h(sig_up), "down": h([1.8, 2.7, 0.9])},
            "bkg": {"h": h([10.0, 8.0, 5.0]), "up": h(bkg_up), "down": h([9.5, 7.6, 4.8])}}


def _check(s):
    lk.check_templates(lk.templates(s, MODEL), MODEL, lk.edges(s, MODEL))


def test_negative_variation_is_refused():
    """``up: "-1"``: every up template negative (accepted before: only the nominal was
    checked)."""
    _check(_states())
    with pytest.raises(lk.LikelihoodError) as err:
        _check(_states(bkg_up=(-10.0, -8.0, -5.0)))
    assert one_line(err) == (
        "likelihood: channel 'sr', systematic 'jes' up, dataset 'bkg', bin 0 [0, 1): up "
        "template sumw = -10 makes the total background -10 (nominal 10); expected >= 0 "
        "(set likelihood: {clip_negative: true} to clip such bins to 0)")
    with pytest.raises(lk.LikelihoodError, match="systematic 'jes' up, dataset 'sig', bin 2"):
        _check(_states(sig_up=(2.0, 3.0, -1.0)))


# --- an unconverged fit -----------------------------------------------------------------


def test_unconverged_fit_marks_z_unreliable():
    """A fit stopped after one step: results.json and the table mark Z and dZ/dp."""
    from analysis.cli.report import significance_row

    s = {"sig": {"h": h([2.0, 3.0, 1.0]), "up": h([2.2, 3.3, 1.1]), "down": h([1.8, 2.7, 0.9])},
         "bkg": {"h": h([10.0, 8.0, 5.0]), "up": h([13.0, 4.0, 9.0]),
                 "down": h([7.0, 12.0, 2.0])}}
    bad = lk.results_section(s, MODEL, lk.significance(s, MODEL, max_steps=1), {"p": 1.0})
    assert bad["significance"]["reliable"] is False and bad["fit"]["converged"] is False
    label, cells = significance_row(json.loads(json.dumps(bad)), ["p"])
    assert "UNRELIABLE" in label and all(c.endswith("(unreliable)") for c in cells)
    good = lk.results_section(s, MODEL, lk.significance(s, MODEL), {"p": 1.0})
    assert good["significance"]["reliable"] is True
    label, cells = significance_row(good, ["p"])
    assert label == "discovery Z" and not any("unreliable" in c for c in cells)
