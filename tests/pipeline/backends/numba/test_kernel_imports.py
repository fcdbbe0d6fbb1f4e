"""The numba kernels import only numpy, numba, math, each other and the walk's shared blocks
(analysis.select.lanes, which imports only numpy, numba and itself, and its policy the
package's numba cache, analysis._compat.numba); they decorate with the one njit policy
(analysis.select.lanes.policy), never numba.njit itself.

Checked on the source (AST), every module of kernels/, at any depth of the file (an import
inside a function counts as much as one at the top).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from analysis.pipeline.backends.numba import kernels

KERNELS = Path(kernels.__file__).resolve().parent
PACKAGE = "analysis.pipeline.backends.numba.kernels"
SHARED = "analysis.select.lanes"
CACHE = "analysis._compat.numba"
ALLOWED = {"__future__", "math", "numba", "numpy"}
MODULES = sorted(KERNELS.glob("*.py"))
SHARED_MODULES = sorted((KERNELS.parents[3] / "select" / "lanes").glob("*.py"))


def _imports(tree: ast.AST) -> list[str]:
    """Every module a file imports (``from a import b``: ``a``; relative: resolved)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to this package (kernels/ has no sub-packages)
                base = ".".join([*PACKAGE.split(".")[: len(PACKAGE.split(".")) + 1 - node.level],
                                 *([base] if base else [])])
            out.append(base)
    return out


def _outside(names: list[str], packages: tuple[str, ...] = (PACKAGE, SHARED)) -> list[str]:
    return [n for n in names if n.split(".")[0] not in ALLOWED
            and not any(n == p or n.startswith(p + ".") for p in packages)]


def _njit_calls(tree: ast.AST) -> list[int]:
    """Lines that call ``numba.njit`` / ``numba.jit`` (the policy's own module aside)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("njit", "jit")
            and isinstance(node.value, ast.Name) and node.value.id == "numba"]


def test_the_kernels_folder_is_found():
    names = {p.name for p in MODULES}
    assert {"_numba_dp.py", "_numba_esum.py"} <= names
    assert {"policy.py", "arith.py", "steps.py"} <= {p.name for p in SHARED_MODULES}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_a_kernel_imports_only_numpy_numba_math_and_kernels(path):
    assert _outside(_imports(ast.parse(path.read_text(encoding="utf-8")))) == []


@pytest.mark.parametrize("path", SHARED_MODULES, ids=lambda p: p.name)
def test_the_shared_blocks_import_only_numpy_numba_and_themselves(path):
    # and the policy the package's numba cache, which every kernel's decorator keys by
    # this folder's files (os: their paths)
    allowed = (SHARED, CACHE, "os") if path.name == "policy.py" else (SHARED,)
    assert _outside(_imports(ast.parse(path.read_text(encoding="utf-8"))), allowed) == []


@pytest.mark.parametrize("path", [*MODULES, *(p for p in SHARED_MODULES if p.name != "policy.py")],
                         ids=lambda p: p.name)
def test_a_kernel_compiles_with_the_one_policy(path):
    assert _njit_calls(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_checks_see_what_they_refuse():
    # the two checks on a module that breaks each rule (a host import, a relative import
    # out of the folder, numba.njit by hand), and on one that keeps them
    bad = ast.parse("import numpy as np\nfrom analysis.pipeline.split import X\n"
                    "from .. import fastkernel\nimport contextlib\n"
                    "@numba.njit(cache=True)\ndef f(x):\n    return x\n")
    assert _outside(_imports(bad)) == ["analysis.pipeline.split",
                                       "analysis.pipeline.backends.numba", "contextlib"]
    assert _njit_calls(bad) == [5]
    good = ast.parse("import math\nimport numba\nfrom . import _numba_dp\n"
                     f"from {PACKAGE}._numba_dp import LANES\nfrom {SHARED}.policy import njit\n")
    assert _outside(_imports(good)) == [] and _njit_calls(good) == []
    assert _outside(_imports(good), (SHARED,)) == [PACKAGE, f"{PACKAGE}._numba_dp"]
