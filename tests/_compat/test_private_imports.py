"""No module outside ``analysis/_compat`` reaches JAX's or numba's private parts.

Checked on the source (AST) of every module of ``analysis`` and ``processors``, at any
depth (an import inside a function counts): no import of ``jax._src``,
``jax.interpreters``, ``jax.core`` or ``numba.core`` (``import``, ``from ... import``,
``from jax import core``), and no attribute chain that reaches them (``jax.core.Tracer``).
Their uses live in :mod:`analysis._compat.jax` and :mod:`analysis._compat.numba`, each a
named function with a test that names the attribute and the library's version when a
release changes it (``tests/_compat/test_jax.py``, ``tests/_compat/test_numba.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRIVATE = ("jax._src", "jax.interpreters", "jax.core", "numba.core")
COMPAT = REPO / "analysis" / "_compat"
#: Modules that still use them, each with the work that removes it (none left: the
#: own-processor kernels' primitives, select/_fastsingle*, went with issue 49); an entry
#: whose file is gone is ignored.
PENDING: set[str] = set()
MODULES = sorted(p for package in ("analysis", "processors") for p in (REPO / package).rglob("*.py")
                 if COMPAT not in p.parents)


def _private(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PRIVATE)


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a plain name, else ``None``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_uses(source: str) -> list[str]:
    """``line: name`` for each import of, or attribute chain into, a private module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [d for d in [_dotted(node)] if d is not None]
        found.extend(f"{node.lineno}: {n}" for n in names if _private(n))
    return sorted(set(found), key=lambda s: int(s.split(":")[0]))


def test_the_check_sees_every_form():
    source = """
import jax._src.core
import numba.core.caching as c
from jax.interpreters import ad
from jax import core
from numba.core import entrypoints
def f(x):
    return isinstance(x, jax.core.Tracer)
import jax.numpy, jax.extend.core, numba.extending
from jax import lax
y = jax.extend.core.Primitive
"""
    # every private form is seen (lines 2-6 and 8), the public ones are not (9-11)
    assert sorted({int(u.split(":")[0]) for u in private_uses(source)}) == [2, 3, 4, 5, 6, 8]


def test_the_modules_are_found():
    names = {p.relative_to(REPO).as_posix() for p in MODULES}
    assert {"analysis/stats/_powsum.py", "analysis/driver/warmup.py"} <= names
    assert not any(n.startswith("analysis/_compat/") for n in names)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_private_jax_or_numba_outside_compat(path):
    rel = path.relative_to(REPO).as_posix()
    if rel in PENDING:
        pytest.skip("pending: " + rel)
    uses = private_uses(path.read_text(encoding="utf-8"))
    assert not uses, (f"{rel} uses JAX's or numba's private parts {uses}: use or add a named "
                      "function in analysis/_compat/jax.py or analysis/_compat/numba.py")
