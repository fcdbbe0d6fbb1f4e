"""stats.derive's compiled programs are kept on disk and found without tracing the function.

References: the eager evaluation (as in test_derive_compiled) to 1e-12 for the loaded
program; the program store's counters (a program found on disk is loaded, not built:
the chunk function is not traced, which a tracing counter in the function checks); a
damaged file is ignored (built again, same values); another function gets another file.
"""

from __future__ import annotations

import os

import jax
import pytest

from analysis import stats
from analysis.soft import soft_cut
from analysis.stats import _compiled, _stored
from analysis.stats._closure import closure_inputs
from analysis.stats._params import param_spec
from tests.stats.test_derive_compiled import THETA, _chunk, _close, _eager


@pytest.fixture
def store(tmp_path):  # noqa: ANN001, ANN201
    """A fresh cache directory for this test, JAX's own restored afterwards; the
    programs of this process (chunk programs and stored calls) forgotten before and
    after."""
    from jax.experimental.compilation_cache import compilation_cache

    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    # JAX opens its cache once per process: reopened here, else an earlier test's
    # directory answers this test's compilations (a program of the same bucketed shapes)
    compilation_cache.reset_cache()
    _compiled._PROGRAMS.clear()
    _stored._CALLS.clear()
    try:
        yield tmp_path / _stored.SUBDIR
    finally:
        _compiled._PROGRAMS.clear()
        _stored._CALLS.clear()
        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()


TRACES: list = []


def _fn(pt, abs_eta):  # noqa: ANN001, ANN202
    """A small chunk function (quick to compile from an empty cache)."""

    def fn(theta):  # noqa: ANN001, ANN202
        p = soft_cut(pt, ">", theta["pt_min"], 5.0) * soft_cut(abs_eta, "<", theta["eta_max"], 0.2)
        return {"jet_pt": stats.moments(pt, weight=p)}

    return fn


def _traced() -> None:
    """Called by the chunk function while it runs in Python (that is, traced)."""
    TRACES.append(1)


def _counted(pt, eta):  # noqa: ANN001, ANN202
    inner = _fn(pt, eta)

    def fn(theta):  # noqa: ANN001, ANN202
        _traced()
        return inner(theta)

    return fn


def test_a_new_process_loads_the_program_without_tracing(store) -> None:  # noqa: ANN001
    pt, eta = _chunk(5)
    TRACES.clear()
    first = stats.derive(_counted(pt, eta), THETA)
    assert len(TRACES) == 1 and len(os.listdir(store)) == 1
    _compiled._PROGRAMS.clear()  # what a new process starts with
    built, loaded = _compiled.BUILT["programs"], _compiled.BUILT["loaded"]
    again = stats.derive(_counted(pt, eta), THETA)
    assert (_compiled.BUILT["programs"], _compiled.BUILT["loaded"]) == (built, loaded + 1)
    assert len(TRACES) == 1  # not traced again
    value, jac, _ = _eager(_fn(pt, eta), 1)
    _close(again.value, value)
    _close(again.jac, jac)
    _close(again.value, first.value, rtol=0.0)


def test_a_damaged_file_is_ignored_and_other_code_gets_another_file(store) -> None:  # noqa: ANN001
    pt, eta = _chunk(6)
    key = param_spec(THETA, "test").key
    path = _stored.path_for(("forward1", closure_inputs(_fn(pt, eta))[0], key))
    os.makedirs(store)
    with open(path, "wb") as fh:
        fh.write(b"not a program")
    built = _compiled.BUILT["programs"]
    d = stats.derive(_fn(pt, eta), THETA)
    assert _compiled.BUILT["programs"] == built + 1
    _close(d.value, _eager(_fn(pt, eta), 1)[0])

    def other(theta):  # noqa: ANN001, ANN202
        return {"s": stats.moments(pt, weight=pt * theta["pt_min"])}

    assert os.listdir(store) == [os.path.basename(path)]  # the same file, rewritten
    assert _stored.path_for(("forward1", closure_inputs(other)[0], key)) != path


def _portable_form_loads(path, pt, eta, first) -> None:  # noqa: ANN001
    """Build the program again: ``path`` holds the jax.export form, which a new process
    loads (not traced) to the same values as ``first``."""
    stats.derive(_fn(pt, eta), THETA)
    assert _stored.kind(path) == "exported"
    _compiled._PROGRAMS.clear()
    loaded = _compiled.BUILT["loaded"]
    again = stats.derive(_fn(pt, eta), THETA)
    assert _compiled.BUILT["loaded"] == loaded + 1
    _close(again.value, first.value, rtol=1e-15)
    _close(again.jac, first.jac, rtol=1e-15)


def test_an_executable_is_stored_and_the_portable_form_where_it_cannot_be(
        store, monkeypatch) -> None:  # noqa: ANN001
    """The file holds the compiled executable (loaded without lowering again); where
    serializing it fails, the jax.export form, which a new process loads as well (same
    values, not traced again)."""
    pt, eta = _chunk(7)
    first = stats.derive(_fn(pt, eta), THETA)
    (name,) = os.listdir(store)
    assert _stored.kind(str(store / name)) == _stored.EXECUTABLE
    os.remove(store / name)
    _compiled._PROGRAMS.clear()

    def refuse(compiled):  # noqa: ANN001, ANN202
        raise ValueError("Compilation does not support serialization")

    monkeypatch.setattr(_stored.serialize_executable, "serialize", refuse)
    _portable_form_loads(store / name, pt, eta, first)


def test_an_executable_from_jax_s_own_cache_is_stored_in_the_portable_form(store) -> None:  # noqa: ANN001
    """A program whose file is gone but whose compilation JAX's persistent cache still
    holds (another version of this package, the same program) is compiled by a cache
    hit, and an executable read from that cache serializes without its kernels (a new
    process that loads it fails: "Function ... not found"): its file is then the
    jax.export form, which loads (same values)."""
    pt, eta = _chunk(8)
    first = stats.derive(_fn(pt, eta), THETA)
    (name,) = os.listdir(store)
    os.remove(store / name)
    _compiled._PROGRAMS.clear()
    jax.clear_caches()  # what a new process starts with; JAX's files stay
    _portable_form_loads(store / name, pt, eta, first)


def test_a_stored_call_key_names_each_dtype_as_numpy_does():
    """stored_call keys an argument's dtype by ``str(np.result_type(x))`` (the name the
    files on disk were stored under), kept per dtype: the same string for arrays of
    every dtype and byte order, numpy scalars and Python numbers."""
    import numpy as np

    xs = [np.zeros(3), np.zeros((2, 2), np.float32), np.zeros(2, ">f8"), np.zeros(2, "<f8"),
          np.array(1.0), np.array([1], np.int8), np.zeros(0, np.bool_), np.float64(1.0),
          np.int64(2), 1.0, 3, True]
    for _ in range(2):  # the second time from the kept names
        for x in xs:
            assert _stored._dtype_name(x) == str(np.result_type(x)), x
