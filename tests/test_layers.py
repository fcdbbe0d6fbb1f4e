"""Layers only look down, and nothing imports in a cycle.

Layers, bottom to top: pure maths (``analysis.stats``) <- config, selections and
kernel <- ``processors`` <- the driver (``analysis.runner``) <- optimisation <-
command line and plots. A module may import its own layer or lower ones. The one
exception is documented in ``analysis.runner``: the driver imports ``processors``
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

# Every module of the packages, by layer (lower number: lower layer). A new module
# must be placed here: the test fails for a module it does not know.
LAYERS: dict[str, int] = {
    "analysis": 0,  # float64 policy only
    "analysis.errors": 0,
    "analysis.stats": 0,
    "analysis.stats._core": 0,
    "analysis.stats._inputs": 0,
    "analysis.stats._kernels": 0,
    "analysis.stats._powsum": 0,
    "analysis.stats._shadow": 0,
    "analysis.stats._structure": 0,
    "analysis.stats.api": 0,
    "analysis.stats.jagged": 0,
    "analysis.stats.merge": 0,
    "analysis.stats.registry": 0,
    "analysis.stats.derive": 0,
    "analysis.stats.histogram": 0,
    "analysis.likelihood": 1,  # binned likelihoods of histogram states (stats only)
    "analysis.likelihood.expected": 1,
    "analysis.likelihood.fit": 1,
    "analysis.likelihood.model": 1,
    "analysis.likelihood.significance": 1,
    "analysis.likelihood.summary": 1,
    "analysis.soft": 1,
    "analysis.pbinom": 0,  # pure maths (jax only): objects uses its integer_step
    "analysis.fourvec": 0,  # pure maths beside the statistics layer
    "analysis.objects": 0,
    "analysis.yamlsafe": 1,
    "analysis.schema": 1,
    "analysis.terms": 1,
    "analysis.config": 1,
    "analysis.exprs": 1,  # observable grammar of object sets (config and plan)
    "analysis.plan": 1,
    "analysis.setkernel": 1,  # per-chunk maths of the object-set form
    "analysis.faults": 1,  # chunk-fault records: used by columns, processors and the driver
    "analysis.columns": 1,
    "analysis.cache": 1,  # column cache across passes: used by processors and the driver
    "analysis.results": 1,
    "analysis.kernel": 1,
    "analysis.fastkernel": 1,  # numba kernel behind kernel.chunk_state (order <= 1)
    "analysis.testing": 1,
    "analysis.generate": 1,
    "processors": 2,
    "processors.diff_processor": 2,
    "processors.dimuon": 2,
    "processors.jet_moments": 2,
    "analysis.runner": 3,
    "analysis.checkpoint": 4,
    "analysis.objectives": 4,
    "analysis.optimizers": 4,
    "analysis.optimize": 4,
    "analysis.scan": 4,
    "analysis.outdir": 5,
    "analysis.report": 5,
    "analysis.plots": 5,
    "analysis.commands": 5,
    "analysis.cli": 5,
    "analysis.__main__": 5,
}
# Modules allowed to import ``processors`` (inside functions only).
PROCESSORS_ENTRY = {"analysis.runner"}
# Layers known to the test but owned by other branches: placed when they exist.
OPTIONAL_LAYERS = {}


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
            inner = top and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
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


def _layer(name: str) -> int:
    return LAYERS[name] if name in LAYERS else OPTIONAL_LAYERS[name]


def test_every_module_has_a_layer():
    unknown = sorted(set(MODULES) - set(LAYERS) - set(OPTIONAL_LAYERS))
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
            assert not top, (
                f"{name} imports {target} at import time; only inside the driver's passes"
            )
            continue
        assert _layer(target) <= mine, (
            f"{name} (layer {mine}) imports {target} (layer {_layer(target)}): upward"
        )


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


def test_the_check_sees_upward_and_cyclic_imports(tmp_path, monkeypatch):
    """The checks can fail: an upward import and a cycle, planted in a fake package."""
    pkg = tmp_path / "analysis"
    (pkg / "stats").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stats" / "__init__.py").write_text("")
    (pkg / "stats" / "api.py").write_text("from analysis.cli import main\n")
    (pkg / "cli.py").write_text("from analysis.stats import api\n")
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    fake = _modules()
    monkeypatch.setattr(f"{__name__}.MODULES", fake)
    with pytest.raises(AssertionError, match="upward"):
        test_imports_only_look_down("analysis.stats.api")
    with pytest.raises(pytest.fail.Exception, match="import cycle"):
        test_no_import_cycle()
