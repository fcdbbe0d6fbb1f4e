"""Small package functions compiled once per process and argument shapes: :func:`program_call`.

A function of this package that runs at every step or merge (the merge of two Taylor
states, the objective with its derivatives, the optimiser's update, the report's
derivatives, the pass table of object counts) is some tens of small operations, each
its own XLA program when run eagerly. :func:`program_call` traces, lowers and compiles
it once per argument structure, shapes and options (``jax.jit(...).lower().compile()``)
and keeps the executable for the process. A new process traces and lowers it again and
loads the compilation from JAX's persistent compilation cache
(:mod:`analysis.runtime.compilecache`): the package keeps no programs of its own on disk
(measured against its former store of serialized executables: docs/changelog.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__: list[str] = []

# Programs by (name, options, argument structure and shapes), for this process.
_CALLS: dict[Any, Callable[..., Any]] = {}
# str(dtype) by dtype: numpy's str of a dtype costs ~10 us, and the merge of two
# states with systematics asks it for ~230 leaves (7 ms of a 0.3 s pass)
_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(x: Any) -> str:
    """``str(np.result_type(x))``, kept per dtype of ``x`` (the result type of one array
    or numpy scalar depends on its dtype only)."""
    # JAX arrays too: merged states stay JAX arrays until read (analysis.stats.derived)
    if not isinstance(x, np.ndarray | np.generic | jax.Array):
        return str(np.result_type(x))
    name = _DTYPE_NAMES.get(x.dtype)
    if name is None:
        name = _DTYPE_NAMES[x.dtype] = str(np.result_type(x))
    return name


def compile_flat(run: Callable[..., Any], args: tuple) -> Callable[..., Any]:
    """``run`` compiled for ``args`` (traced, lowered and compiled once, flat in and
    out), as a function of arguments of the same structure and shapes.

    Lowered and compiled directly (``jax.jit(...).lower(...).compile()``): a call runs
    the executable with no dispatch through ``jit``'s cache.
    """
    tree: list = []
    in_leaves, in_tree = jax.tree_util.tree_flatten(args)

    def flat(*leaves: Any) -> Any:
        out, out_tree = jax.tree_util.tree_flatten(run(*jax.tree_util.tree_unflatten(in_tree, leaves)))
        tree.append(out_tree)
        return out

    compiled = jax.jit(flat).lower(*in_leaves).compile()
    out_tree = tree[-1]

    def program(*call_args: Any) -> Any:
        return jax.tree_util.tree_unflatten(out_tree, compiled(*jax.tree_util.tree_leaves(call_args)))

    return program


def program_call(name: str, fun: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``fun(*args, **options)`` (``fun`` a function of this package, ``options``
    hashable), compiled once per process, ``name``, options, argument structure and shapes
    (module docstring)."""
    leaves, tree = jax.tree_util.tree_flatten(args)
    shapes = tuple((np.shape(x), _dtype_name(x)) for x in leaves)
    key = (name, tuple(sorted(options.items())), tree, shapes)
    program = _CALLS.get(key)
    if program is None:
        program = _CALLS[key] = compile_flat(lambda *a: fun(*a, **options), args)
    return program(*args)
