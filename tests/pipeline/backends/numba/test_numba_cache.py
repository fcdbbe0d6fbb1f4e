"""analysis.pipeline.backends.numba._numba_cache: numba's cache of the kernels is dropped when any kernel
source changes (numba itself checks only the function's own file)."""

from __future__ import annotations

from pathlib import Path

from analysis import runtime
from analysis.pipeline.backends.numba import _numba_cache

KERNEL = "import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x\n"
# the kernels decorate with the policy module's names: no "@numba.njit" in their text
POLICY = "import numba\n\njit = numba.njit(cache=True)\n"
LOOPS = "from pkg._jit import jit\n\n@jit\ndef f(x):\n    return x\n"


def _package(tmp_path: Path) -> tuple[Path, Path]:
    """A kernels' folder (the stamp's argument) and, outside it, a host module."""
    pkg = tmp_path / "pkg"
    cache = pkg / "__pycache__"
    cache.mkdir(parents=True)
    (pkg / "_jit.py").write_text(POLICY)
    (pkg / "_loops.py").write_text(LOOPS)
    (pkg / "_more.py").write_text(KERNEL.replace("f(x)", "g(x)"))
    (tmp_path / "host.py").write_text("x = 1\n")  # the host: not a kernel module
    return pkg, cache


def _cache_files(cache: Path) -> list[str]:
    names = ["_loops.f-3.py311.nbi", "_loops.f-3.py311.1.nbc", "_more.g-3.py311.nbi",
             "host.x-1.py311.nbi", "_loops.cpython-311.pyc"]
    for n in names:
        (cache / n).write_text("old")
    return names


def test_first_import_drops_the_kernels_cache_and_stores_the_hash(tmp_path):
    pkg, cache = _package(tmp_path)
    _cache_files(cache)
    removed = {p.name for p in _numba_cache.drop_stale(pkg, [cache])}
    assert removed == {"_loops.f-3.py311.nbi", "_loops.f-3.py311.1.nbc", "_more.g-3.py311.nbi"}
    left = {p.name for p in cache.iterdir()}
    assert {"host.x-1.py311.nbi", "_loops.cpython-311.pyc", _numba_cache.STAMP} == left
    assert (cache / _numba_cache.STAMP).read_text() == _numba_cache.sources_hash(
        _numba_cache.kernel_modules(pkg))


def test_unchanged_sources_keep_the_cache(tmp_path):
    pkg, cache = _package(tmp_path)
    _numba_cache.drop_stale(pkg, [cache])
    _cache_files(cache)  # what numba compiled and saved since
    assert _numba_cache.drop_stale(pkg, [cache]) == []
    assert (cache / "_loops.f-3.py311.nbi").exists()


def test_a_change_in_another_kernel_module_drops_every_kernels_cache(tmp_path):
    # the case numba misses: _loops.f's own file unchanged, a module it calls edited
    pkg, cache = _package(tmp_path)
    _numba_cache.drop_stale(pkg, [cache])
    _cache_files(cache)
    (pkg / "_more.py").write_text(KERNEL.replace("return x", "return x + 1"))
    removed = {p.name for p in _numba_cache.drop_stale(pkg, [cache])}
    assert "_loops.f-3.py311.nbi" in removed and "_more.g-3.py311.nbi" in removed
    assert _numba_cache.drop_stale(pkg, [cache]) == []  # stored: once only


def test_a_change_to_the_njit_policy_drops_every_kernels_cache(tmp_path):
    # the policy module has no compiled function of its own (and no "@numba.njit" in any
    # kernel's text): its change is a change of every kernel
    pkg, cache = _package(tmp_path)
    _numba_cache.drop_stale(pkg, [cache])
    _cache_files(cache)
    (pkg / "_jit.py").write_text(POLICY.replace("cache=True", "cache=True, fastmath=True"))
    removed = {p.name for p in _numba_cache.drop_stale(pkg, [cache])}
    assert {"_loops.f-3.py311.nbi", "_more.g-3.py311.nbi"} <= removed


def test_a_change_to_the_shared_lanes_drops_every_kernels_cache(tmp_path, monkeypatch):
    # the kernels inline the lane arithmetic, the walk's steps and the njit policy from
    # analysis.select.lanes (outside their folder): a change there is a change of every kernel
    shared = tmp_path / "lanes"
    shared.mkdir()
    (shared / "policy.py").write_text(POLICY)
    monkeypatch.setattr(_numba_cache, "SHARED", shared)
    pkg, cache = _package(tmp_path)
    _numba_cache.drop_stale(pkg, [cache])
    _cache_files(cache)
    assert _numba_cache.drop_stale(pkg, [cache]) == []
    (shared / "policy.py").write_text(POLICY.replace("cache=True", "cache=True, fastmath=True"))
    removed = {p.name for p in _numba_cache.drop_stale(pkg, [cache])}
    assert {"_loops.f-3.py311.nbi", "_more.g-3.py311.nbi"} <= removed


def test_a_change_outside_the_kernels_folder_keeps_the_cache(tmp_path):
    pkg, cache = _package(tmp_path)
    _numba_cache.drop_stale(pkg, [cache])
    _cache_files(cache)
    (tmp_path / "host.py").write_text("x = 2\n")
    assert _numba_cache.drop_stale(pkg, [cache]) == []


def test_a_missing_cache_directory_is_made_and_stamped(tmp_path):
    # a fresh checkout: what numba compiles into it next is kept on the next import
    pkg, cache = _package(tmp_path)
    cache.rmdir()
    assert _numba_cache.drop_stale(pkg, [cache]) == []
    assert (cache / _numba_cache.STAMP).is_file()
    _cache_files(cache)
    assert _numba_cache.drop_stale(pkg, [cache]) == []


def test_the_numba_backend_runs_it_on_import():
    import analysis.pipeline.backends.numba.kernels as kernels

    pkg = Path(kernels.__file__).resolve().parent
    names = [p.name for p in _numba_cache.kernel_modules(pkg)]
    assert {"_numba_sens.py", "_numba_dp.py", "lane_layouts.py"} <= set(names)
    shared = {p.name for p in _numba_cache.kernel_modules(_numba_cache.SHARED)}
    assert {"policy.py", "arith.py", "buffers.py", "steps.py", "cuts.py"} <= shared
    assert names == sorted(p.name for p in pkg.glob("*.py"))  # every module of kernels/
    assert "_numba_cache.py" not in names and "fastkernel.py" not in names
    stamp = pkg / "__pycache__" / _numba_cache.STAMP
    if stamp.exists():  # written unless the checkout is read-only
        assert stamp.read_text() == _numba_cache.sources_hash(
            _numba_cache.kernel_modules(pkg))


def test_numba_cache_dir_is_where_numba_writes(tmp_path, monkeypatch):
    # the reference is numba itself: a cached function compiled in a fresh process under
    # NUMBA_CACHE_DIR lands in the directory cache_dirs names, and is dropped from there
    import os
    import subprocess
    import sys

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_loops.py").write_text(KERNEL)
    (pkg / "_more.py").write_text(KERNEL.replace("f(x)", "g(x)"))
    cache = tmp_path / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", "import pkg._loops as m; m.f(1.0)"], cwd=tmp_path,
                   env={**env, "PYTHONPATH": str(tmp_path)}, check=True)
    written = {p.parent for p in cache.rglob("_loops.f-*.nbi")}
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    runtime.reset()  # the settings read the environment again
    dirs = _numba_cache.cache_dirs(pkg)
    assert len(written) == 1 and written <= set(dirs)
    (pkg / "_more.py").write_text(KERNEL.replace("return x", "return x + 1"))
    removed = _numba_cache.drop_stale(pkg)
    assert any(p.name.startswith("_loops.f-") for p in removed)
    assert not list(cache.rglob("_loops.f-*.nbi"))
