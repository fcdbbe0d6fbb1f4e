"""The first-event check reads each dataset's first event with uproot, on the tree opened
when the files are listed (not coffea's schema of every branch, not a second open); a
name it misses is asked of coffea, whose words stay. A missing collection names the
config key that reads it, the file and the branch looked for.

References: coffea's ``NanoEventsFactory`` (the names it gives, the columns it reads) on
the real files of ``../shared/data``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import yaml

from analysis.cli.parser import main
from tests.chunked_helpers import DATA_DIR, NANOAOD_WARNINGS, analysis_config
from tests.conftest import REPO, one_line_error, write_config

pytestmark = NANOAOD_WARNINGS

V12 = DATA_DIR / "nano_tt_v12.root"


def _v12_config(tmp_path, edit=lambda text: text):
    """configs/agc_ttbar_v12.yaml on the shared v12 file (Jet, Muon, Electron)."""
    text = (REPO / "configs" / "agc_ttbar_v12.yaml").read_text()
    text = text.replace("skhep:nano_tt_v12.root", str(V12))
    cfg = yaml.safe_load(edit(text))
    cfg["output"] = {"dir": str(tmp_path / "out")}
    return write_config(tmp_path, cfg)


def _coffea_events(path):
    from coffea.nanoevents import NanoEventsFactory

    from analysis.driver.files import EventSchema

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return NanoEventsFactory.from_root({str(path): "Events"}, schemaclass=EventSchema,
                                           mode="virtual", entry_stop=1).events()


@pytest.mark.parametrize("name", sorted(p.name for p in DATA_DIR.glob("*.root")))
def test_the_top_level_names_are_coffeas(name):
    import uproot

    from analysis.data.firstevent import FirstEvent

    with uproot.open(DATA_DIR / name) as f:
        mine = FirstEvent(f["Events"], {}).fields
    assert sorted(mine) == sorted(_coffea_events(DATA_DIR / name).fields)


def test_the_columns_are_coffeas(tmp_path):
    import uproot

    from analysis.config.loader import load_config
    from analysis.data.branches import required_branches
    from analysis.data.columns import extract_columns
    from analysis.data.firstevent import FirstEvent
    from analysis.pipeline.plan import build_plan

    plan = build_plan(load_config(_v12_config(tmp_path)))
    read = {"weight_branch": "genWeight", "source": str(V12), "nonfinite": "drop"}
    ref = extract_columns(_coffea_events(V12), plan, **read)
    with uproot.open(V12) as f:
        got = extract_columns(FirstEvent(f["Events"], required_branches(plan)), plan, **read)
    assert got.n_events == ref.n_events == 1
    assert np.array_equal(got.weight, ref.weight) and np.array_equal(got.uid, ref.uid)
    assert got.collections.keys() == ref.collections.keys() == {"Jet", "Muon", "Electron"}
    for name, (counts, flat) in ref.collections.items():
        assert np.array_equal(got.collections[name][0], counts)
        assert flat.keys() == got.collections[name][1].keys()
        for field, values in flat.items():
            assert np.array_equal(got.collections[name][1][field], values), (name, field)


def test_each_file_is_opened_once_and_coffea_not_at_all(tmp_path, monkeypatch):
    """The check runs on the tree opened when the files are listed; its outcome waits
    for validate_columns (a missing field is raised there, not by the constructor)."""
    import coffea.nanoevents
    import uproot

    from analysis.config.loader import load_config
    from analysis.driver.runner import Evaluator
    from analysis.errors import InputError

    opened = []
    real_open = uproot.open

    def counted(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("coffea's schema built for the first-event check")

    monkeypatch.setattr(uproot, "open", counted)
    monkeypatch.setattr(coffea.nanoevents.NanoEventsFactory, "from_root", refused)
    ev = Evaluator(load_config(_v12_config(tmp_path)), warm_up=False)
    ev.validate_columns()
    assert opened == [str(V12)]

    monkeypatch.undo()  # a missing field is worded by coffea's names, at validation
    bad = _v12_config(tmp_path / "bad", lambda t: t.replace("btagDeepFlavB", "btagDeepFlavv"))
    ev = Evaluator(load_config(bad), warm_up=False)
    with pytest.raises(InputError, match="no field of Jet 'btagDeepFlavv'; did you mean .*"
                                         "'btagDeepFlavB'"):
        ev.validate_columns()


def test_a_field_only_coffea_makes_is_read_through_coffea(tmp_path):
    """``Jet.charge`` is no branch of the file: coffea's schema makes it; the check asks
    coffea instead of calling it missing."""
    cfg = analysis_config({"dy": {"files": [str(DATA_DIR / "nano_dy.root")],
                                  "weight": "genWeight"}})
    cfg["observables"].append({"name": "q", "x": "sum(Jet.charge)", "stats": ["mean"]})
    from analysis.config.loader import load_config
    from analysis.driver.runner import Evaluator

    Evaluator(load_config(write_config(tmp_path, cfg)), warm_up=False).validate_columns()


def test_a_missing_collection_names_the_config_key_the_file_and_the_branch(tmp_path, capsys):
    path = _v12_config(tmp_path, lambda t: t.replace("collection: Muon,", "collection: Muonn,"))
    capsys.readouterr()
    assert main(["evaluate", str(path), "--quiet"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert line == (f"diffcoffea: error: {V12}: no collection 'Muonn' (no branch 'nMuonn'); "
                    "did you mean 'Muon'?; read by objects.muons.collection for "
                    "datasets.ttbar_v12")
