"""Each numba internal that :mod:`analysis._compat.numba` uses is there, and does what
the package relies on; when a numba release changes one, these tests name it and the
version (``CompatError``'s message)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import pytest
from numba.core import caching, codegen

from analysis._compat import CompatError, lookup
from analysis._compat import numba as cn
from analysis._compat import numbaruntime as cr

REPO = Path(__file__).resolve().parents[2]


def _resolve(name):
    return lookup(cn.PRIVATE, name, library="numba", written_for=cn.WRITTEN_FOR)


@pytest.mark.parametrize("name", sorted(cn.PRIVATE))
def test_each_private_name_is_there(name):
    try:
        _resolve(name)
    except CompatError as err:
        pytest.fail(str(err))


def test_a_missing_name_is_said_with_the_attribute_and_the_version(monkeypatch):
    monkeypatch.setitem(cn.PRIVATE, "rtsys", ("numba.core.runtime", "no_rtsys", "runtime"))
    with pytest.raises(CompatError) as err:
        _resolve("rtsys")
    assert "numba.core.runtime.no_rtsys" in str(err.value)
    assert f"numba {numba.__version__}" in str(err.value)


def test_the_subclasses_override_what_numba_calls():
    """FastLoadCache and the checked cache files replace methods that numba calls by
    name: a numba that stops calling them would skip ours silently (slower loads, or
    unchecked files)."""
    calls = {caching.Cache: ("_load_overload", "_index_key"),
             caching.IndexDataCacheFile: ("_load_index", "_save_index", "_load_data",
                                          "_save_data", "_open_for_write", "_dump")}
    for cls, names in calls.items():
        source = inspect.getsource(cls)
        for name in names:
            assert f"self.{name}(" in source, (
                f"numba {numba.__version__}: {cls.__name__} no longer calls self.{name}(...)")
    assert issubclass(cn.CheckedCacheFile, caching.IndexDataCacheFile)
    assert issubclass(cn.FastLoadCache, caching.FunctionCache)


def test_the_cache_files_attributes_that_the_checked_files_read(tmp_path):
    """CheckedCacheFile reads three attributes numba sets on its instances (not class
    attributes: PRIVATE cannot look them up)."""
    files = caching.IndexDataCacheFile(str(tmp_path), "k", ("stamp",))
    for name in ("_source_stamp", "_version", "_index_path"):
        assert hasattr(files, name), (
            f"numba {numba.__version__}: IndexDataCacheFile has no {name}")
    assert files._source_stamp == ("stamp",)
    assert files._index_path.startswith(str(tmp_path))


def test_guard_cache_switches_a_plain_function_cache_only():
    def f(x):
        return x + 1

    kernel = numba.njit(cache=True)(f)
    cache = kernel._cache
    assert type(cache) is caching.FunctionCache, (
        f"numba {numba.__version__}: a cache=True dispatcher's _cache is {type(cache)}")
    assert type(cache._cache_file) is caching.IndexDataCacheFile
    assert cn.guard_cache(cache, (__file__,)) and type(cache) is cn.FastLoadCache
    assert type(cache._cache_file) is cn.CheckedCacheFile
    assert cache._cache_file.depends == (__file__,)
    assert cn.guard_cache(cache) and cache._cache_file.depends == ()  # again: re-keyed
    assert not cn.guard_cache(None)


def test_cached_cfunc_is_numbas_cfunc_with_the_light_cache():
    @cn.cached_cfunc("float64(float64)")
    def plus_one(x):
        return x + 1.0

    assert type(plus_one._cache) is cn.FastLoadCache, (
        f"numba {numba.__version__}: a CFunc's enable_caching no longer gives a "
        "FunctionCache")
    assert plus_one.ctypes(2.0) == 3.0 and plus_one.address


def test_the_package_kernels_load_fast_with_checked_files():
    from analysis.pipeline.backends.numba.kernels import _numba_sums

    assert type(_numba_sums.block_sums._cache) is cn.FastLoadCache
    assert type(_numba_sums.block_sums._cache._cache_file) is cn.CheckedCacheFile
    # what the notice of a miss reads (cache_home, the record's kernel name)
    assert os.path.isabs(_numba_sums.block_sums._cache._cache_path)
    assert "block_sums" in _numba_sums.block_sums._cache._name


def test_entry_points_flag_and_runtime():
    flag = cr.entry_points_flag()
    assert flag is not None, (
        f"numba {numba.__version__} has no numba.core.entrypoints._already_initialized")
    cr.run_entry_points()  # numba's own: idempotent
    assert cr.entry_points_flag() is True
    cr.claim_entry_points()
    assert cr.entry_points_flag() is True
    cr.initialise_runtime()


def test_compiler_lock_is_numbas_reentrant_lock():
    lock = cr.compiler_lock()
    assert lock is _resolve("global_compiler_lock")
    with lock:
        with lock:  # re-entrant: numba's compilations nest (warm-up holds it around them)
            pass


def test_numba_reads_slp_vectorize_when_it_compiles():
    """kernels/_jit.py switches ``numba.config.SLP_VECTORIZE`` (numba's public
    configuration, ``NUMBA_SLP_VECTORIZE``) around one compilation: that works while
    numba's code generator reads it at each compilation, not once at import."""
    assert hasattr(numba.config, "SLP_VECTORIZE"), (
        f"numba {numba.__version__} has no numba.config.SLP_VECTORIZE")
    source = inspect.getsource(codegen)
    assert "config.SLP_VECTORIZE" in source, (
        f"numba {numba.__version__}'s code generator no longer reads config.SLP_VECTORIZE")


KERNEL = """
import numba

from analysis._compat.numba import guard_cache


@numba.njit(cache=True)
def lanes(a, b, out):
    # straight-line lane arithmetic (no loop for LLVM's loop vectorizer): vector
    # operations only where the SLP vectorizer packs it
    a0, a1, a2, a3 = a[0], a[1], a[2], a[3]
    b0, b1, b2, b3 = b[0], b[1], b[2], b[3]
    out[0], out[1], out[2], out[3] = a0 * b0 + b1, a1 * b1 + b2, a2 * b2 + b3, a3 * b3 + b0


guard_cache(lanes._cache)
"""

CHILD = """
import json, re, sys

import numpy as np

sys.path.insert(0, sys.argv[2])
import slp_kernel as k
from analysis.select.lanes import policy

args = (np.arange(4.0), np.ones(4), np.zeros(4))
if sys.argv[1] == "direct":
    k.lanes(*args)  # compiled as numba does: the SLP vectorizer off
else:
    policy.vectorised(k.lanes, args)  # the kernels' way: on
hits = sum(k.lanes.stats.cache_hits.values())
ir = None if hits else k.lanes.inspect_llvm(k.lanes.signatures[0])
print(json.dumps({"hits": hits, "vector": None if ir is None else
                  bool(re.search(r"<[0-9]+ x double>", ir))}))
"""


def test_the_slp_setting_is_part_of_the_cache_key(tmp_path):
    """A kernel first compiled without the SLP vectorizer (a test calling it directly)
    and then the kernels' way, with it, in new processes sharing one numba cache: the
    second does not load the first's scalar machine code (numba's key alone gave it),
    it compiles its own vectorised version; each way then loads its own entry."""
    (tmp_path / "slp_kernel.py").write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}

    def run(way):  # noqa: ANN001, ANN202
        out = subprocess.run([sys.executable, "-c", CHILD, way, str(tmp_path)], env=env,
                             capture_output=True, text=True, timeout=300, cwd=REPO)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run("direct") == {"hits": 0, "vector": False}
    assert run("slp") == {"hits": 0, "vector": True}, (
        f"numba {numba.__version__}: the SLP setting is not in the cache's key")
    assert run("slp") == {"hits": 1, "vector": None}
    assert run("direct") == {"hits": 1, "vector": None}
