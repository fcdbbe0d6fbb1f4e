"""Each of the kernels that read chunk-sized arrays compiles once per pass
(:func:`analysis.select.lanes.policy.writes`): their host callers hand them the arrays
they only read read-only, whether those come writable (numpy's results, generated
columns) or read-only (columns of a file, ``np.asarray`` of a JAX array). numba types a
read-only array apart from a writable one: a kernel fed both kinds compiled a version
per mix (seconds of a first run each; the histogram fills' later versions without the
SLP vectorizer). A fresh process with a fresh cache runs a small pass of each kind (real
file: forward values, reverse pullback; generated columns: values and Jacobian) and
reads each kernel's compiled signatures."""

from __future__ import annotations

import pytest

from tests.conftest import numba_child

CHILD = """
import json
from analysis.pipeline.backend import chunk_state, run_once
from analysis.pipeline.backends.numba import fastreverse
from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_fill, _numba_revhist
from analysis.pipeline.request import Request
from tests.pipeline.backends.numba.test_fasthist import columns
from tests.pipeline.backends.numba.test_fasthist_softbins import soft_setup
from tests.pipeline.backends.numba.test_fastreverse_hists import hists_config, hists_payload
from tests.pipeline.backends.numba.test_fastreverse_sets import _setup
plan, theta, widths, cols = _setup(hists_config(), "nano_tt_v12.root")
run_once(cols, plan, Request(theta, widths, order=0), backend="numba")
fastreverse.chunk_pullback(cols, plan, theta, widths, hists_payload(cols, plan, theta, widths))
plan, theta, widths = soft_setup()
for order in (0, 1):
    chunk_state(columns(300, plan), plan, theta, widths, order=order, backend="numba")
kernels = {"fill": _numba_fill.fill, "accumulate": _numba_dp.accumulate,
           "centre_sums": _numba_dp.centre_sums, "soft_argument": _numba_dp.soft_argument,
           "entry_cotangents": _numba_revhist.entry_cotangents}
print(json.dumps({k: [str(s) for s in v.signatures] for k, v in kernels.items()}))
"""


@pytest.mark.slow
def test_each_kernel_compiles_one_signature(tmp_path):
    got = numba_child(CHILD, tmp_path)
    assert all(got.values()), got  # each ran
    assert {k: len(v) for k, v in got.items()} == dict.fromkeys(got, 1), got
