"""Own processors' kernels (the XLA FFI handlers of :mod:`analysis.select.singlekernels`)
keep their numba cache the package's way (:func:`analysis._compat.numba.guard_cache`):
keyed by the sources they inline or link (the walk, :mod:`analysis.select.lanes`, the call
frame's readers :mod:`analysis.select.ffiframe`: a change to any compiles them again, not
only a change to their own file, numba's key) and checked before numba reads it (a spoilt
file compiles again: before, a cut data file failed every later run).

New processes share one ``NUMBA_CACHE_DIR``; each runs the values handler on a small
chunk; the reference is the first process's results (compiled from source)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis._compat import numba as cn
from analysis.select import chainwalk, ffiframe
from analysis.select import singlekernels as sk
from analysis.select.lanes import policy

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
logging.getLogger("analysis._compat.numba").setLevel(logging.DEBUG)
import jax.numpy as jnp, numpy as np
from analysis.select import singlekernels as k
from analysis.select.singlecall import available, fast_weights
from analysis.stats.offsets import padded_segment_ids
assert available()
off = np.array([0, 3, 3, 7, 9], dtype=np.int32)
w, p = fast_weights(jnp.asarray(np.linspace(0.1, 0.9, 9)), jnp.asarray(off),
                    jnp.asarray(padded_segment_ids(off, 9)), jnp.asarray([0.2, 0.7, 1.0]),
                    max_objects=4)
print(json.dumps({"w": np.asarray(w).tolist(), "p": np.asarray(p).tolist(),
                  "handlers": sorted(k.HANDLERS),
                  "hits": sum(h.cache_hits for h in k.HANDLERS.values())}))
"""
HANDLER = "singlekernels._primal_handler.locals.handler-*"


def _child(root: Path, cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600, cwd=root)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["handlers"] == ["diffcoffea_single_primal_s3"]
    return got, out.stderr


def test_the_handlers_are_keyed_by_the_walk_the_lanes_and_the_call_frame():
    handler = sk.HANDLERS[sk.target("primal", 3)]
    files = handler._cache._cache_file
    assert type(handler._cache) is cn.FastLoadCache
    assert type(files) is cn.CheckedCacheFile
    assert files.depends == sk.DEPENDS == (chainwalk.__file__, *policy.SHARED,
                                           ffiframe.__file__)
    assert type(ffiframe.word._cache._cache_file) is cn.CheckedCacheFile


@pytest.mark.slow  # two compilations of a handler (~15 s each)
def test_a_spoilt_cache_file_of_an_own_kernel_compiles_again(tmp_path):
    first, _ = _child(ROOT, tmp_path)
    assert first["hits"] == 0
    data = next(tmp_path.rglob(f"{HANDLER}.1.nbc"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # a copy cut short
    again, err = _child(ROOT, tmp_path)  # compiles again: the same results
    assert again == first
    assert err.count("not used") == 1 and data.name in err, err
    hit, err = _child(ROOT, tmp_path)  # its files rewritten: loaded
    assert hit == {**first, "hits": 1} and "not used" not in err


@pytest.mark.slow  # three compilations of a handler, in a copy of the package
def test_a_change_to_the_lanes_or_the_call_frame_compiles_an_own_kernel_again(tmp_path):
    root = tmp_path / "src"
    shutil.copytree(ROOT / "analysis", root / "analysis",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    first, _ = _child(root, cache)
    assert first["hits"] == 0 and _child(root, cache)[0]["hits"] == 1
    for name in ("select/lanes/arith.py", "select/ffiframe.py"):
        path = root / "analysis" / name
        path.write_text(path.read_text() + "# edited\n")
        assert _child(root, cache)[0] == first  # compiled again (hits 0), same results
