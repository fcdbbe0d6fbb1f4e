"""Shared pytest configuration, fixtures and helpers (the one place for test plumbing).

- Data: real NanoAOD files live outside the repository, in ``shared/data`` beside the
  project root (:data:`SHARED_DATA`, fixture ``shared_data``); small generated
  ttbar/DY datasets for the optimisation tests are written once per session (fixture
  ``small_data``, see ``tests/opt_helpers.py``).
- Offline cache: this machine has no internet, so ``skhep_testdata.data_path(name)``
  only works once the file is in ``~/.local/skhepdata``; the cache is primed from
  ``shared/data`` when the session starts, by the same helper as ``.ci/run``
  (``.ci/prime_skhep_cache.py``).
- Backends: fixture ``backend`` runs a test once per registered backend (numba, jax).
- Helpers, imported as ``from tests.conftest import ...``: :func:`write_config` (the
  one YAML config writer), :func:`edited` (a config with one value replaced),
  :func:`central_difference` (the one finite-difference helper),
  :func:`one_line_error` (the one check of a command-line error),
  :func:`modules_loaded` (what a fresh process imported),
  :func:`numba_child` (what a fresh process with its own numba cache printed) and
  :func:`load_script` (a benchmark or CI script as a module).
"""

from __future__ import annotations

import copy
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import yaml

from analysis import runtime
from analysis.select.objects import ObjectSet

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
ERROR_PREFIX = "diffcoffea: error: "


def modules_loaded(code: str, names: Sequence[str]) -> list[str]:
    """Which of the modules ``names`` a fresh Python process has imported after running
    ``code`` (from the repository root)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300,
    ).stdout.split()
    return [m for m in names if m in out]


def numba_child(code: str, cache: Path, *, path: Sequence[Path] = (),
                cwd: Path = REPO) -> dict:
    """The JSON a fresh Python process prints last, running ``code`` in ``cwd`` with its
    numba cache in ``cache`` (``NUMBA_CACHE_DIR``) and ``path``, then the repository, on
    its ``PYTHONPATH``; the process must succeed (else its stderr's end is shown)."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([*map(str, path), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600, cwd=cwd)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_script(path: Path) -> Any:
    """The module of a script outside the package (``.ci/``, ``benchmarks/``), by path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prime_skhep_cache() -> None:
    load_script(REPO / ".ci" / "prime_skhep_cache.py").prime(SHARED_DATA)


_CONFIG: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _CONFIG
    _CONFIG = config
    _prime_skhep_cache()


# --- order: the longest files first ---------------------------------------------------
# The test command runs two test processes (pytest-xdist, ``--dist loadfile
# --no-loadscope-reorder`` in pyproject.toml): whole files are handed out in collection
# order, each to whichever process runs low, and the suite ends when the last file does.
# So the files that take longest from a cold compilation cache (``--durations`` of a cold
# run; README.md, "Tests") start first, longest first, and the many short files fill in
# around them. A file not listed keeps its place after
# them. The order changes no result: every test is independent of the others.
LONGEST_FIRST = (
    "likelihood/test_yaml_pipeline.py",  # both backends' soft passes (JAX: ~2 min cold)
    "pipeline/test_object_sets_hardcut.py",
    "pipeline/backends/numba/test_fastkernel.py",
    "optimize/test_optimize.py",
    "pipeline/test_object_sets_enumeration.py",
    "driver/test_chunked_invariance.py",
    "optimize/test_score_reverse.py",
    "likelihood/test_grad.py",
    "pipeline/test_chunk_gradients.py",
    "likelihood/test_executors.py",
    "pipeline/test_function_mt.py",
    "data/test_cache_dask.py",
    "driver/test_parsl.py",
    "driver/test_final_passes.py",
    # heavy files that collection order hands out late (session 20: CI's --durations of
    # the 676 s run, and CPU seconds of cold -n 0 runs of tests/stats, tests/select and the
    # root files): test_soft_fast_kernels.py (~50 s in CI) and test_soft_pass_weights.py
    # (~19 s CPU) were the last two files, tests/stats the last folder
    "test_soft_fast_kernels.py",
    "pipeline/backends/numba/test_fastreverse_hists_sums.py",
    "pipeline/backends/numba/test_fasthist_multislot.py",
    "pipeline/backends/numba/test_fasthist.py",
    "select/test_chainwalk.py",
    "stats/test_derive_compiled.py",
    "stats/test_reverse_mode.py",
    "pipeline/backends/numba/test_fastreverse_hists_lead.py",
    "stats/test_powsum.py",
    "stats/test_grad.py",
    "test_soft_pass_weights.py",
)
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before ``-m 'not slow'`` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # ``@pytest.mark.slow_on("jax")``: the test's variant on those backends (fixture
    # ``backend``) is slow; every oracle still runs on every backend by default
    # through another test of its family
    for item in items:
        marker = item.get_closest_marker("slow_on")
        callspec = getattr(item, "callspec", None)
        if marker and callspec and callspec.params.get("backend") in marker.args:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        try:
            name = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:  # a test outside tests/ (named on the command line)
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=place)  # stable: the others keep their order


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Directory of the shared real NanoAOD files (see ``shared/data/README.md``)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data directory not found: {SHARED_DATA}")
    return SHARED_DATA


def _registered_backends() -> list[str]:
    from analysis.pipeline.backend import ENGINES

    return list(ENGINES)


@pytest.fixture(scope="module", params=_registered_backends())
def backend(request: pytest.FixtureRequest):
    """Each registered backend in turn (ids ``numba``, ``jax``: every entry of
    :data:`analysis.pipeline.backend.ENGINES`), as the
    :class:`~analysis.pipeline.backend.Backend` that runs it alone (``numba``: strict,
    a pass it does not serve is an error, never a silent fallback to JAX). Oracle tests
    (enumeration, awkward + vector at width 0, pyhf, finite differences) take it, so
    that each oracle checks every backend; pass it as ``backend=`` (an option, never a
    monkeypatch)."""
    from analysis.pipeline.backend import Backend

    return Backend(request.param)


@pytest.fixture(scope="session")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Generated ``ttbar/`` and ``dy/`` datasets of the optimisation tests (written once)."""
    from tests.opt_helpers import small_data as make

    return make(tmp_path_factory)


# --- helpers -------------------------------------------------------------------------


def write_config(path: Path, cfg: Mapping[str, Any]) -> Path:
    """Write ``cfg`` as YAML to ``path`` (``path/config.yaml`` if ``path`` is a directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(cfg), sort_keys=False))
    return path


# Central differences: ((offset in steps, integer weight), ...), denominator (times the step).
_STENCILS = {3: (((1, 1), (-1, -1)), 2.0), 5: (((-2, 1), (-1, -8), (1, 8), (2, -1)), 12.0)}


def edited(cfg: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``cfg`` with the entry at ``path`` (``"a/0/b"``: keys and list
    indices) set to ``value``."""
    out = copy.deepcopy(dict(cfg))
    *head, last = path.split("/")
    node: Any = out
    for key in head:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


def central_difference(
    f: Callable[[np.ndarray], Any],
    x: Sequence[float] | np.ndarray,
    step: float | Sequence[float] | np.ndarray,
    *,
    indices: Sequence[int] | None = None,
    points: int = 3,
) -> Any:
    """Central finite differences of ``f`` at ``x`` along each component in ``indices``.

    ``f`` maps a float64 vector to a number, an array or a pytree of arrays; ``step`` is
    one step for all components or one per component of ``x``. ``points=3`` is
    ``(f(x + h e_i) - f(x - h e_i)) / (2 h)``; ``points=5`` is
    ``(-f(x + 2h) + 8 f(x + h) - 8 f(x - h) + f(x - 2h)) / (12 h)``. The result has
    the shape of ``f``'s output with a trailing axis over ``indices`` (default: all).
    """
    x = np.asarray(x, dtype=np.float64)
    steps = np.broadcast_to(np.asarray(step, dtype=np.float64), x.shape)
    weights, denominator = _STENCILS[points]
    columns = []
    for i in range(len(x)) if indices is None else indices:
        h = float(steps[i])
        terms = []
        for k, c in weights:
            shifted = x.copy()
            shifted[i] += k * h
            terms.append(jax.tree_util.tree_map(lambda v, c=c: c * np.asarray(v), f(shifted)))
        columns.append(
            jax.tree_util.tree_map(lambda *t, h=h: sum(t[1:], t[0]) / (denominator * h), *terms)
        )
    return jax.tree_util.tree_map(lambda *c: np.stack(c, axis=-1), *columns)


def one_line_error(stderr: str) -> str:
    """The single ``diffcoffea: error: ...`` line of a command's ``stderr`` (asserted to be
    exactly one line, ending in a newline); returned without the newline."""
    assert stderr.startswith(ERROR_PREFIX), stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, f"not one line: {stderr!r}"
    return stderr.strip()


# The AGC-style object sets of the object-engine tests (tests/select/test_objects_*.py).
AGC_SETS = (
    ObjectSet("jets", "Jet"),
    ObjectSet("bjets", "Jet", parent="jets"),
    ObjectSet("muons", "Muon"),
    ObjectSet("electrons", "Electron"),
)


# --- memory log ----------------------------------------------------------------------
# DIFFCOFFEA_RSS_LOG=<file>: after each test, append "<resident MB>\t<peak MB>\t<test id>\t
# <process>", to find which tests make a test process grow (``sort -n`` the file). Under
# pytest-xdist each worker (gw0, gw1: the processes that run the tests) logs its own
# lines; the controlling process, which runs no test, none.


def numba_refusal(plan: Any, order: int = 1, theta: Any = None, *, backend: Any = None,
                  **request: Any) -> str | None:
    """The numba backend's reason not to serve ``plan`` (``None``: it serves it) for a
    :class:`~analysis.pipeline.request.Request` at ``order`` and ``theta`` (default:
    zeros) with ``request``'s other fields; ``backend``: a
    :class:`~analysis.pipeline.backend.Backend` whose options count (default ``Backend()``)."""
    import numpy as np

    from analysis.pipeline.backend import Backend
    from analysis.pipeline.request import Request

    theta = np.zeros(len(plan.param_names)) if theta is None else theta
    req = Request(theta, np.zeros(plan.n_widths), order=order, **request)
    return (backend or Backend("numba")).chooser.refusal(plan, req)


def _rss_mb() -> tuple[float, float]:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    try:
        with open("/proc/self/statm") as f:
            resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        resident = float("nan")
    return resident, peak


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    log = os.environ.get("DIFFCOFFEA_RSS_LOG")
    if not log or (_CONFIG is not None and _CONFIG.pluginmanager.has_plugin("dsession")):
        return  # off, or xdist's controller (it relays the workers' hooks)
    resident, peak = _rss_mb()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{resident:.0f}\t{peak:.0f}\t{nodeid}\t{worker}\n")


# The test process is configured as the command line configures its own (JAX's persistent
# cache, fork hooks, malloc: analysis.runtime); importing analysis does none of it.
runtime.configure()


@pytest.fixture(autouse=True)
def _settings_read_per_test():
    """Each test reads the environment afresh (a test that sets a variable with
    monkeypatch sees it; the next test does not keep what it read)."""
    runtime.reset()
    yield
    runtime.reset()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_kernels():
    """After each test module, drop JAX's in-memory compiled executables.

    Every plan, bucket shape and derivative order compiles its own XLA executables, and
    JAX keeps each one for the life of the process: over the whole suite they added up
    to ~6 GB of resident memory (``DIFFCOFFEA_RSS_LOG``). Later modules that need one
    again load it from the persistent compilation cache on disk instead.
    """
    yield
    import gc

    jax.clear_caches()
    gc.collect()
