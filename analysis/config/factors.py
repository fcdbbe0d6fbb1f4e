"""Weight-factor expressions of the likelihood's ``weight`` systematics: ``PS_up``,
``PSWeight[0]``, ``0.5 * (LHEScaleWeight[0] + LHEScaleWeight[8])``, parsed (Python's
``ast``, never evaluated) into a hashable tree of branches, numbers and ``+ - * /``.
Checked by :mod:`analysis.config.likelihood`, computed by :mod:`analysis.pipeline.histplan`.
"""

from __future__ import annotations

import ast

__all__ = ["MAX_FACTOR_CHARS", "factor_branches", "parse_factor"]

#: Longest weight-factor expression: a few hundred terms (5,000 terms made Python's
#: parser recurse beyond its limit).
MAX_FACTOR_CHARS = 2000

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def _branch_key(node: ast.AST, text: str) -> str | None:
    """``B``, ``B.f`` or ``B[i]`` as a column key (None if ``node`` is not one)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int
            and node.slice.value >= 0):
        return f"{node.value.id}[{node.slice.value}]"
    return None


def parse_factor(text: str) -> tuple:
    """A weight factor as a hashable tree: ``("num", v)``, ``("branch", key)``,
    ``("neg", a)``, ``(op, a, b)`` with ``op`` in ``+ - * /``. ``ValueError`` (one line)
    for anything else."""
    if len(text) > MAX_FACTOR_CHARS:  # the parser and the tree walk recurse per term
        raise ValueError(f"expression of {len(text)} characters; at most {MAX_FACTOR_CHARS}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, RecursionError, MemoryError):
        raise ValueError(f"invalid expression {text!r}; expected e.g. PS_up, "
                         "PSWeight[0], 0.5 * (LHEScaleWeight[0] + LHEScaleWeight[8])") from None

    def walk(n: ast.AST) -> tuple:
        key = _branch_key(n, text)
        if key is not None:
            return ("branch", key)
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return ("num", float(n.value))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return ("neg", walk(n.operand))
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return (_OPS[type(n.op)], walk(n.left), walk(n.right))
        raise ValueError(f"in {text!r}: {ast.unparse(n)!r} is not a branch, B[i], a number "
                         "or + - * / of them")

    try:
        return walk(tree)
    except RecursionError:
        raise ValueError(f"expression nested too deeply ({len(text)} characters)") from None


def factor_branches(tree: tuple) -> list[str]:
    """The branch keys a factor tree reads, in order of appearance."""
    if tree[0] == "branch":
        return [tree[1]]
    if tree[0] == "num":
        return []
    return [k for sub in tree[1:] for k in factor_branches(sub)]
