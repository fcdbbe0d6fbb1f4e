"""Layers only look down, and nothing imports in a cycle.

Layers are packages, bottom to top: pure maths (``analysis.stats``) <- selections
(``analysis.select``) <- the config loader (``analysis.config``) <- the pipeline (plan,
layout, kernels: ``analysis.pipeline``) <- data in (``analysis.data``) <- ``processors``
<- the driver (``analysis.driver``) <- optimisation (``analysis.optimize``) <- the
command line (``analysis.cli``). A module may import its own layer or lower ones. The one
exception is documented in ``analysis.driver.runner``: the driver imports ``processors``
inside its pass methods, never at import time, and no other ``analysis`` module
imports ``processors`` at all. Checked on the ``import`` statements (AST), so a
test that imports one module cannot hide a cycle that another import order shows.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("analysis", "processors")

# Layers by package (lower number: lower layer); a module's layer is that of the
# longest entry that names it or a package above it. A new package must be placed here:
# the test fails for a module it cannot place.
LAYERS: dict[str, int] = {
    "analysis": 0,  # float64 policy only (analysis/__init__.py)
    "analysis.errors": 0,
    "analysis.extras": 0,  # which optional packages are installed (standard library only)
    # the process: settings from the environment, configure(), JAX's persistent cache,
    # malloc and gc tuning, fork hooks, a child's environment (standard library only)
    "analysis.runtime": 0,
    "analysis.limits": 0,  # resource bounds (memory limit; standard library only)
    "analysis.jsonsafe": 0,  # strict, bounded JSON reading (standard library only)
    "analysis._compat": 0,  # the one place that uses private JAX and numba parts
    "analysis.spec": 0,  # pure-Python facts the config checks (statistic names, edges): no JAX
    "analysis.stats": 0,  # pure maths: statistics, states, merges, derivatives
    "analysis.select": 1,  # soft cuts, counts, object sets, 4-vectors, expressions
    "analysis.soft": 1,  # public face of analysis.select for own processors
    "analysis.testing": 1,  # helpers for own processors' tests (stats only)
    "analysis.likelihood": 1,  # binned likelihood, fits, Z (stats, evermore, optimistix)
    "analysis.config": 2,  # the one loader: strict YAML, schema, objective-term schemas
    "analysis.pipeline": 3,  # plan, column layout, kernels, states
    "analysis.data": 4,  # reading chunks, column cache, fault records, generator
    "processors": 5,
    "analysis.driver": 6,  # files, executors, passes
    "analysis.optimize": 7,  # objectives, optimisers, loop, checkpoints, scan
    "analysis.cli": 8,  # command line, output directory, report, plots
    "analysis.__main__": 8,
}
# Modules allowed to import ``processors`` (inside functions only).
PROCESSORS_ENTRY = {"analysis.driver.runner"}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """``(imported module, at import time?)`` for each import of our packages in ``path``.

    At import time: not inside a function (module level, classes, ``if`` blocks).
    ``from a import b`` counts as ``a.b`` when that is a module, else as ``a``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.append((full if full in MODULES else base, top))
            visit(child, inner)

    visit(tree, True)
    return [(m, top) for m, top in found if m.split(".")[0] in PACKAGES]


def _place(name: str) -> str | None:
    """The entry of :data:`LAYERS` that places ``name``: itself or its nearest package."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        key = ".".join(parts[:i])
        if key in LAYERS:
            return key
    return None


def _layer(name: str) -> int:
    place = _place(name)
    if place is None:
        raise KeyError(name)
    return LAYERS[place]


def test_every_module_has_a_layer():
    # a module directly under analysis/ must be named; one in a package is placed by it
    unknown = sorted(m for m in MODULES if m != "analysis" and _place(m) in (None, "analysis"))
    assert not unknown, f"place these modules in a layer of tests/test_layers.py: {unknown}"


@pytest.mark.parametrize("name", sorted(set(MODULES) - {"analysis.__main__"}))  # runs the CLI
def test_module_imports(name):
    importlib.import_module(name)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_only_look_down(name):
    mine = _layer(name)
    for target, top in _imports(name, MODULES[name]):
        if target.split(".")[0] == "processors" and name.startswith("analysis"):
            assert name in PROCESSORS_ENTRY, f"{name} imports {target}: only the driver may"
            assert not top, f"{name} imports {target} at import time; only inside the driver's passes"
            continue
        assert _layer(target) <= mine, (
            f"{name} (layer {mine}) imports {target} (layer {_layer(target)}): upward"
        )


def _find_cycle(graph: dict[str, set[str]]) -> None:
    """pytest.fail naming the first cycle of ``graph`` (module -> modules it imports)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = {t for t, top in _imports(name, path) if top and t != name}
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        for dep in list(deps):
            parts = dep.split(".")
            deps.update(".".join(parts[:i]) for i in range(1, len(parts)))
        # a module's own parent packages are initialised before it: not a cycle
        graph[name] = {
            d for d in deps if d in MODULES and d != name and not name.startswith(d + ".")
        }
    _find_cycle(graph)


def test_no_import_cycle_with_lazy_imports():
    # an import inside a function hides a cycle from import time, not from the reader:
    # two modules that need each other are one concept, or a third module is missing
    graph = {
        name: {d for d, _ in _imports(name, path)
               if d in MODULES and d != name and not name.startswith(d + ".")}
        for name, path in MODULES.items()
    }
    _find_cycle(graph)


def test_the_check_sees_upward_and_cyclic_imports(tmp_path, monkeypatch):
    """The checks can fail: an upward import and a cycle, planted in a fake package."""
    pkg = tmp_path / "analysis"
    (pkg / "stats").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stats" / "__init__.py").write_text("")
    (pkg / "stats" / "api.py").write_text("from analysis.cli.parser import main\n")
    (pkg / "cli.py").write_text("from analysis.stats import api\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    fake = _modules()
    monkeypatch.setattr(f"{__name__}.MODULES", fake)
    with pytest.raises(AssertionError, match="upward"):
        test_imports_only_look_down("analysis.stats.api")
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_import_cycle()
    (pkg / "stats" / "api.py").write_text("def f():\n    from analysis.cli import g\n")
    monkeypatch.setattr(f"{__name__}.MODULES", _modules())
    test_no_import_cycle()  # a lazy import is not an import-time cycle
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_import_cycle_with_lazy_imports()


# --- below package level: the backends (issue 32) --------------------------------------

BACKENDS_PKG = "analysis.pipeline.backends"
# What a backend may import from analysis.pipeline outside its own folder: the plan,
# the request and the protocol, the columns' layout, the one state, learned scores'
# columns. Never another backend, never the chooser.
BACKEND_MAY_IMPORT = {
    "analysis.pipeline.plan", "analysis.pipeline.histplan", "analysis.pipeline.request",
    "analysis.pipeline.engine", "analysis.pipeline.layout", "analysis.pipeline.results",
    "analysis.pipeline.scorecols", "analysis.pipeline.score",
    "analysis.pipeline.split",  # the validation split's per-event numbers (of the columns)
    "analysis.pipeline.replicas",  # the bootstrap's addable sums, as the one state
    "analysis.pipeline.hardcut",  # the objects a width-0 cut leaves (of the columns)
}
# Below the pipeline a backend imports maths, selections and errors only.
# (analysis.limits: bounded reads of files, standard library only; analysis._compat:
# numba's internals, the numba backend's cache; analysis.runtime: the settings, e.g.
# numba's cache directory and the kernel threads)
BACKEND_MAY_IMPORT_BELOW = ("analysis.stats", "analysis.select", "analysis.errors",
                            "analysis.limits", "analysis._compat", "analysis.runtime")
# The one module that chooses among the backends (imports them).
CHOOSER = "analysis.pipeline.backend"


def _backend_of(name: str) -> str | None:
    """``numba``/``jax`` for a module of a backend's folder, else None."""
    parts = name.split(".")
    if name.startswith(BACKENDS_PKG + ".") and len(parts) > 3:
        return parts[3]
    return None


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _backend_of(m)))
def test_a_backend_imports_the_plan_state_and_columns_never_another_backend(name):
    mine = _backend_of(name)
    for target, _ in _imports(name, MODULES[name]):
        other = _backend_of(target)
        if other is not None or target == BACKENDS_PKG:
            assert other == mine, f"{name} imports {target}: backends never import each other"
            continue
        assert target != CHOOSER, f"{name} imports the chooser {CHOOSER}: only it chooses"
        if target.startswith("analysis.pipeline"):
            assert target in BACKEND_MAY_IMPORT, (
                f"{name} imports {target}: a backend imports the plan, request, layout, "
                f"state and score columns only ({', '.join(sorted(BACKEND_MAY_IMPORT))})")
        elif target.startswith("analysis.") and target != "analysis":
            assert target.startswith(BACKEND_MAY_IMPORT_BELOW), (
                f"{name} imports {target}: below the pipeline, a backend imports "
                f"{', '.join(BACKEND_MAY_IMPORT_BELOW)} only")


@pytest.mark.parametrize("name", sorted(m for m in MODULES if not _backend_of(m)
                                        and m != BACKENDS_PKG))
def test_only_the_chooser_imports_a_backend(name):
    for target, _ in _imports(name, MODULES[name]):
        if _backend_of(target) is None:
            continue
        assert name == CHOOSER, (
            f"{name} imports {target}: only {CHOOSER} chooses a backend (use its chooser)")


def test_the_backend_checks_see_what_they_forbid(tmp_path, monkeypatch):
    """Each check fails once: a numba module importing the JAX backend, one importing the
    chooser, a driver module importing a backend."""
    pkg = tmp_path / "analysis"
    for sub in ("pipeline/backends/numba", "pipeline/backends/jax", "driver"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
    for init in ("", "pipeline", "pipeline/backends", "pipeline/backends/numba",
                 "pipeline/backends/jax", "driver"):
        (pkg / init / "__init__.py").write_text("")
    (pkg / "pipeline" / "backend.py").write_text("")
    (pkg / "pipeline" / "backends" / "jax" / "passes.py").write_text("")
    (pkg / "pipeline" / "backends" / "numba" / "host.py").write_text(
        "from analysis.pipeline.backends.jax import passes\n")
    (pkg / "pipeline" / "backends" / "numba" / "picky.py").write_text(
        "from analysis.pipeline import backend\n")
    (pkg / "driver" / "run.py").write_text(
        "from analysis.pipeline.backends.jax import passes\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    monkeypatch.setattr(f"{__name__}.MODULES", _modules())
    with pytest.raises(AssertionError, match="backends never import each other"):
        test_a_backend_imports_the_plan_state_and_columns_never_another_backend(
            "analysis.pipeline.backends.numba.host")
    with pytest.raises(AssertionError, match="only it chooses"):
        test_a_backend_imports_the_plan_state_and_columns_never_another_backend(
            "analysis.pipeline.backends.numba.picky")
    with pytest.raises(AssertionError, match="only analysis.pipeline.backend chooses"):
        test_only_the_chooser_imports_a_backend("analysis.driver.run")
