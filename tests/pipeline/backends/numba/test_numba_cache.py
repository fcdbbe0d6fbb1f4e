"""Every kernel's numba cache is keyed by the sources its machine code inlines, not only by
its own file (numba's key): :func:`analysis._compat.numba.guard_cache` through the njit
policy (:func:`analysis.select.lanes.policy.depends`). Without it a change to a module a
kernel inlines (another module of ``kernels/``, the policy, the lane arithmetic) left the
old machine code in use, silently (measured before: a broken soft-cut product went unseen
by the cached histogram loop).

The reference is numba itself: a kernels' folder in a temporary package, compiled in new
processes that share one ``NUMBA_CACHE_DIR``; after an edit of a module it inlines, the
kernel compiles again and returns what the new code computes."""

from __future__ import annotations

from pathlib import Path

from analysis._compat import numba as cn
from analysis.select.lanes import policy
from tests.conftest import numba_child

INIT = "from analysis.select.lanes import policy\n\npolicy.inlines_folder(__file__)\n"
MORE = "from analysis.select.lanes.policy import inline\n\n@inline\ndef g(x):\n    return x + 1.0\n"
LOOPS = ("from analysis.select.lanes.policy import njit\nfrom pkg._more import g\n\n"
         "@njit\ndef f(x):\n    return 2.0 * g(x)\n")
CHILD = ("import json\nimport pkg._loops as m\nv = m.f(1.0)\n"
         "print(json.dumps({'value': v, 'hits': sum(m.f.stats.cache_hits.values())}))\n")


def _package(tmp_path: Path) -> Path:
    """A kernels' folder (``pkg``: ``_loops.f`` inlines ``_more.g``) and, outside it, a
    host module."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "_more.py").write_text(MORE)
    (pkg / "_loops.py").write_text(LOOPS)
    (tmp_path / "host.py").write_text("x = 1\n")  # the host: not a kernel module
    return pkg


def _run(tmp_path: Path) -> dict:
    return numba_child(CHILD, tmp_path / "cache", path=[tmp_path], cwd=tmp_path)


def test_a_change_to_an_inlined_module_compiles_the_kernel_again(tmp_path):
    # the case numba misses: _loops.f's own file unchanged, a module it inlines edited
    pkg = _package(tmp_path)
    assert _run(tmp_path) == {"value": 4.0, "hits": 0}
    assert _run(tmp_path) == {"value": 4.0, "hits": 1}  # unchanged sources: loaded
    (tmp_path / "host.py").write_text("x = 2\n")  # outside the folder: still loaded
    assert _run(tmp_path) == {"value": 4.0, "hits": 1}
    (pkg / "_more.py").write_text(MORE.replace("x + 1.0", "x + 2.0"))  # the same size
    assert _run(tmp_path) == {"value": 6.0, "hits": 0}
    assert _run(tmp_path) == {"value": 6.0, "hits": 1}  # its files rewritten: loaded again


def test_a_change_to_a_dependency_is_another_key(tmp_path, monkeypatch):
    """The key in a kernel's index holds the digest of its dependencies' contents (one
    of analysis.select.lanes, say): after a change the index is not used."""
    dep = tmp_path / "dep.py"
    dep.write_text("a = 1\n")

    def files() -> cn.CheckedCacheFile:
        monkeypatch.setattr(cn, "_DIGESTS", {})  # a new process: the sources read again
        out = cn.CheckedCacheFile(str(tmp_path), "k", "stamp")
        out.depends = (str(dep),)
        return out

    files().save(("sig",), b"data")
    assert files().load(("sig",)) == b"data"
    dep.write_text("a = 2\n")
    assert files().load(("sig",)) is None
    dep.write_text("a = 1\n")  # the contents are the key, not the file's time
    assert files().load(("sig",)) == b"data"


def test_an_unreadable_dependency_matches_no_key(tmp_path, monkeypatch):
    monkeypatch.setattr(cn, "_DIGESTS", {})
    gone = (str(tmp_path / "gone.py"),)
    assert cn.sources_digest(gone) != cn.sources_digest((str(tmp_path / "other.py"),))
    assert cn.sources_digest(gone) == cn.sources_digest(gone)  # once per process


def _kernels(module) -> list:
    """The cached numba functions a module defines (dispatchers and C callbacks)."""
    out = []
    for v in vars(module).values():
        fn = getattr(v, "py_func", None) or getattr(v, "_pyfunc", None)
        if hasattr(v, "_cache") and fn is not None and fn.__module__ == module.__name__:
            out.append(v)
    return out


def test_every_kernel_is_keyed_by_what_it_inlines():
    import importlib

    import analysis.pipeline.backends.numba.kernels as kernels
    from analysis.select import chainwalk, ffiframe, lanes

    folder = Path(kernels.__file__).resolve().parent
    shared = sorted(str(p) for p in Path(lanes.__file__).resolve().parent.glob("*.py"))
    assert list(policy.SHARED) == shared and {"policy.py", "arith.py", "steps.py"} <= {
        Path(p).name for p in shared}
    own = sorted(str(p) for p in folder.glob("*.py"))
    seen = 0
    for path in sorted(folder.glob("*.py"))[1:]:  # __init__.py first: no kernels
        module = importlib.import_module(f"{kernels.__name__}.{path.stem}")
        for kernel in _kernels(module):
            files = kernel._cache._cache_file
            assert type(kernel._cache) is cn.FastLoadCache, kernel
            assert type(files) is cn.CheckedCacheFile, kernel
            assert list(files.depends) == [*own, *shared], kernel
            seen += 1
    assert seen >= 20
    for module, depends in ((chainwalk, shared), (ffiframe, [])):
        found = _kernels(module)
        assert found, module
        for kernel in found:
            assert type(kernel._cache._cache_file) is cn.CheckedCacheFile, kernel
            assert list(kernel._cache._cache_file.depends) == depends, kernel


def test_the_shared_blocks_are_keyed_too():
    import importlib

    seen = 0
    for path in policy.SHARED[1:]:  # __init__.py first: no kernels
        module = importlib.import_module(f"analysis.select.lanes.{Path(path).stem}")
        for kernel in _kernels(module):
            assert list(kernel._cache._cache_file.depends) == list(policy.SHARED), kernel
            seen += 1
    assert seen >= 5
