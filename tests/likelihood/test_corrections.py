"""Per-object scale factors from correctionlib (issue 17): a weight variation whose
up/down weigh each event by ``prod_{j in set} sf_j``.

Width 0: the variation templates equal ``hist`` fills of the awkward hard-cut
selection weighted by the product of correctionlib's values over the selected b-jets
(evaluated by correctionlib itself on the awkward arrays). The soft case is exact by
the linearity of the count recursions (tests/select/test_subsets_and_factors.py checks
the pattern factor against enumeration). A missing correction file or key is one line.
"""

from __future__ import annotations

import copy

import awkward as ak
import correctionlib
import correctionlib.schemav2 as cs
import hist
import numpy as np
import pytest
import uproot

from tests.likelihood.test_yaml_pipeline import (
    EDGES_B,
    LUMI,
    PARAMS,
    _evaluate_error,
    lk_config,
    section,
)


def write_sf(path) -> None:
    """A b-tag-like scale factor: binned in pT and |eta|, categories up/down."""
    def binned(scale):
        return cs.MultiBinning(nodetype="multibinning", inputs=["pt", "abseta"],
                               edges=[[0, 50, 100, 1000], [0, 1.2, 2.5, 10]],
                               content=[scale * v for v in (1.10, 1.05, 1.0, 1.08, 1.02, 0.97,
                                                             1.03, 1.0, 0.95)],
                               flow="clamp")
    corr = cs.Correction(
        name="btag_sf", version=1,
        inputs=[cs.Variable(name="syst", type="string"), cs.Variable(name="pt", type="real"),
                cs.Variable(name="abseta", type="real")],
        output=cs.Variable(name="sf", type="real"),
        data=cs.Category(nodetype="category", input="syst", content=[
            cs.CategoryItem(key="up", value=binned(1.0)),
            cs.CategoryItem(key="down", value=binned(0.9))]),
    )
    cset = cs.CorrectionSet(schema_version=2, corrections=[corr])
    path.write_text(cset.model_dump_json(exclude_unset=True))


def sf_config(data, path, widths=(5.0, 0.05)) -> dict:
    cfg = lk_config(data, widths=widths)
    cfg["systematics"].append({"name": "btag", "type": "weight", "up": "up", "down": "down",
                               "correction": {"file": str(path), "key": "btag_sf",
                                              "set": "bjets", "inputs": ["pt", "abs_eta"]}})
    return cfg


@pytest.mark.slow  # one values-only pass, ~20 s
def test_scale_factor_templates_equal_weighted_hist_fills(small_data, tmp_path) -> None:
    path = tmp_path / "sf.json"
    write_sf(path)
    sec = section(sf_config(small_data, path, widths=(0.0, 0.0)), widths=np.zeros(2), order=0)
    corr = correctionlib.CorrectionSet.from_file(str(path))["btag_sf"]
    for ds, xsec in (("ttbar", 831.76), ("dy", 6077.0)):
        files = sorted((small_data / ds).glob("*.root"))
        a = ak.concatenate([uproot.open(f)["Events"].arrays(library="ak") for f in files])
        pt = ak.values_astype(a.Jet_pt, np.float64)
        eta = ak.values_astype(a.Jet_eta, np.float64)
        w = ak.values_astype(a.genWeight, np.float64)
        norm = xsec * LUMI / float(ak.sum(w))
        jet = pt > PARAMS["jet_pt_min"]
        b = jet & (ak.values_astype(a.Jet_btagDeepFlavB, np.float64) > PARAMS["btag_min"])
        sel = (ak.sum(jet, 1) >= 3) & (ak.sum(b, 1) >= 2)  # channel b2
        for side in ("up", "down"):
            sf = ak.unflatten(corr.evaluate(side, ak.to_numpy(ak.flatten(pt)),
                                            np.abs(ak.to_numpy(ak.flatten(eta)))), ak.num(pt))
            ew = norm * w * ak.prod(ak.where(b, sf, 1.0), axis=1)
            bpt = pt[b][sel]
            h = hist.Hist(hist.axis.Variable(EDGES_B), storage=hist.storage.Weight())
            h.fill(ak.to_numpy(ak.flatten(bpt)),
                   weight=ak.to_numpy(ak.flatten(ak.broadcast_arrays(ew[sel], bpt)[0])))
            got = sec["channels"]["b2"]["samples"][ds]["variations"]["btag"][side]
            np.testing.assert_allclose(got, h.values(), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{ds} {side}")
            if ds == "ttbar":
                nominal = sec["channels"]["b2"]["samples"][ds]["nominal"]["sumw"]
                assert not np.allclose(got, nominal)


@pytest.mark.parametrize("what", ["file", "key"])
def test_missing_correction_file_or_key_is_one_line(small_data, tmp_path, what) -> None:
    path = tmp_path / "sf.json"
    write_sf(path)
    cfg = copy.deepcopy(sf_config(small_data, path))
    corr = cfg["systematics"][-1]["correction"]
    if what == "file":
        corr["file"] = str(tmp_path / "nope.json")
        words = ["systematics.3.correction.file", "nope.json", "no such"]
    else:
        corr["key"] = "btag_sff"
        words = ["systematics.3.correction.key", "btag_sff", "btag_sf"]
    line = _evaluate_error(cfg, tmp_path)
    assert all(w in line for w in words), line

