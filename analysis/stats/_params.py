"""Parameters as any pytree of real arrays: flat names, one float64 vector, and back.

``theta`` may be a dict of floats (``{"pt_min": 25.0}``), a dict of arrays, nested
containers, or an equinox module's parameters (any JAX pytree whose leaves are real
numbers or arrays; ``None`` subtrees are empty). :func:`param_spec` records its
structure: the flat parameter vector is the concatenation of the raveled leaves in
JAX's flattening order (dict keys sorted), so a dict of floats keeps its sorted-name
order. Each entry has a name: the leaf's path (``pt_min``, ``net.layers.0.weight``)
and, for an array leaf, its index (``net.layers.0.weight[3,1]``).
"""

from __future__ import annotations

import math
import numbers
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from analysis._compat.jax import Tracer
from analysis.stats._hostlinear import pack

__all__ = ["ParamSpec", "numpy_vector", "param_spec"]


def _key_name(key: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _path_name(path: tuple) -> str:
    return ".".join(_key_name(k) for k in path) or "theta"


def _is_real(leaf: Any) -> bool:
    if isinstance(leaf, bool):
        return False
    if isinstance(leaf, numbers.Real):
        return True
    if isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
        return np.dtype(leaf.dtype).kind in "iuf"
    return False


class ParamSpec:
    """Structure of a parameter pytree: ``treedef``, leaf ``shapes``, entry ``names``.

    ``size`` is the number of scalar parameters P. :meth:`vector` flattens a pytree of
    that structure to a ``(P,)`` float64 vector (JAX arrays and tracers included);
    :meth:`unflatten` goes back, with JAX leaves (``as_numpy=False``, for the functions
    being differentiated) or numpy float64 leaves (0-d ones as ``np.float64``, a float).
    """

    def __init__(self, treedef: Any, paths: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]):
        self.treedef = treedef
        self.paths = paths
        self.shapes = shapes
        self.sizes = tuple(math.prod(s) for s in shapes)
        self.size = sum(self.sizes)
        self.key = (treedef, shapes)

    @cached_property
    def names(self) -> tuple[str, ...]:
        out: list[str] = []
        for path, shape in zip(self.paths, self.shapes, strict=True):
            if shape == ():
                out.append(path)
            else:
                out.extend(f"{path}[{','.join(map(str, i))}]" for i in np.ndindex(*shape))
        return tuple(out)

    def vector(self, theta: Any) -> Any:
        leaves = jax.tree_util.tree_leaves(theta)
        if not leaves:
            return jnp.zeros(0, dtype=jnp.float64)
        # no compiled program when eager, also under jax.grad (analysis.stats._hostlinear)
        return pack(leaves)

    def unflatten(self, vec: Any, *, as_numpy: bool = False) -> Any:
        leaves = []
        start = 0
        for shape, size in zip(self.shapes, self.sizes, strict=True):
            part = vec[start : start + size]
            start += size
            if as_numpy:
                a = np.asarray(part, dtype=np.float64).reshape(shape)
                leaves.append(np.float64(a) if shape == () else a)
            else:
                leaves.append(jnp.reshape(part, shape))
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def check_finite(self, vec: Any, func: str) -> None:
        vec = np.asarray(vec, dtype=np.float64).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(vec))
        if bad.size:
            raise ValueError(
                f"{func}: theta[{self.names[bad[0]]!r}] = {vec[bad[0]]}: expected a finite number"
            )


def param_spec(theta: Any, func: str, *, check: bool = True) -> ParamSpec:
    """The :class:`ParamSpec` of ``theta``; with ``check``, every leaf must be a real
    number or array (``TypeError`` naming it otherwise). JAX tracers are accepted
    (their shapes are known)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(theta)
    paths, shapes = [], []
    for path, leaf in flat:
        name = _path_name(path)
        if check and not isinstance(leaf, Tracer) and not _is_real(leaf):
            raise TypeError(
                f"{func}: theta[{name!r}]: expected a number or a real array, "
                f"found {type(leaf).__name__}"
            )
        paths.append(name)
        shapes.append(tuple(int(n) for n in np.shape(leaf)))
    if not paths:
        raise ValueError(f"{func}: theta: expected at least one parameter, found none")
    return ParamSpec(treedef, tuple(paths), tuple(shapes))


def numpy_vector(spec: ParamSpec, theta: Any) -> np.ndarray:
    """``theta`` (concrete leaves) as a ``(P,)`` numpy float64 vector."""
    leaves = jax.tree_util.tree_leaves(theta)
    return np.concatenate([np.asarray(v, dtype=np.float64).reshape(-1) for v in leaves])
