"""Missing or inconsistent NanoAOD branches are named by branch (issue 21.6), when each
file is opened, instead of coffea's or vector's words (``JetArray: missing temporal
coordinate``, ``KeyError: 'content'``)."""

from __future__ import annotations

import awkward as ak
import numpy as np
import pytest
import uproot

from tests.chunked_helpers import NANOAOD_WARNINGS
from tests.faults_helpers import evaluate, one_line_error

pytestmark = NANOAOD_WARNINGS

N = 20


def _jets(path, fields) -> str:
    counts = np.full(N, 2)
    tree = {"Jet": ak.zip({f: ak.unflatten(np.linspace(20, 80, 2 * N), counts) for f in fields}),
            "genWeight": np.ones(N)}
    with uproot.recreate(path) as f:
        f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype)
                            for k, v in tree.items()})
        f["Events"].extend(tree)
    return str(path)


def _flat(path) -> str:
    tree = {"nJet": np.full(N, 2, dtype=np.int32), "Jet_pt": np.ones(N), "Jet_eta": np.ones(N),
            "Jet_phi": np.ones(N), "Jet_mass": np.ones(N), "genWeight": np.ones(N)}
    with uproot.recreate(path) as f:  # a TTree (assigning a dict would write an RNTuple)
        f.mktree("Events", {k: v.dtype for k, v in tree.items()})
        f["Events"].extend(tree)
    return str(path)


@pytest.mark.parametrize("make,message", [
    (lambda p: _jets(p, ["pt", "eta", "phi"]),
     "no branch 'Jet_mass': NanoAOD's Jet objects need Jet_pt, Jet_eta, Jet_phi, Jet_mass"),
    (lambda p: _jets(p, ["pt", "eta"]), "no branch 'Jet_phi': NanoAOD's Jet objects need"),
    (_flat, "branch 'Jet_pt' is a flat branch (one value per event), not one value per Jet "
            "object (counted by 'nJet')"),
])
def test_the_branch_is_named(make, message, tmp_path, capsys) -> None:
    path = make(tmp_path / "d.root")
    rc, _ = evaluate(tmp_path, {"d": {"files": [path], "weight": "genWeight"}})
    assert rc == 2
    line = one_line_error(capsys)
    assert line.startswith(f"diffcoffea: error: {path}: {message}"), line
    assert line.endswith(" for datasets.d")
