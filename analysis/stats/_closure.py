"""A chunk function's data as arguments, padded to bucket shapes (for :func:`stats.derive`).

A processor writes ``fn(theta)`` as a closure over its chunk's arrays
(``stats.from_awkward(events.Jet.pt)``, numpy arrays). :func:`closure_inputs` reads
those closed-over values (also of the functions ``fn`` closes over, a few levels
deep) and splits them into a hashable *structure* (the code objects, the numbers,
strings and importable objects, the arrays' bucketed shapes) and the arrays, padded:

* a :class:`~analysis.stats.Jagged` keeps its lists (its offsets become an argument,
  and so do its elements' list indices, computed on the host: the program does not
  compute them with a prefix sum, which is slow to compile) and gets zero values
  appended up to :func:`size_bucket` of its length (steps of about 1.25x); the
  padding lies beyond ``offsets[-1]``, in no list, and every statistic,
  :func:`analysis.soft.pass_weights` and the segment sums give it weight 0.
  Its longest list, rounded up to a multiple of 4, is part of the structure (a
  static size of the count recursions);
* other arrays are arguments of their own shape (not padded: a per-event array must
  keep one value per event).

:func:`analysis.stats._compiled` compiles ``fn`` rebuilt from the structure with the
arguments in place of the closed-over arrays, once per structure: chunks whose
arrays fall in the same buckets (and later passes over the same chunks) reuse it
without tracing ``fn`` again. Anything else closed over (an object of a class of
yours, a function defined elsewhere at run time, a tracer) makes
:func:`closure_inputs` return ``None``: the caller then traces ``fn`` as it is.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from analysis._compat.jax import Tracer
from analysis.stats.jagged import Jagged
from analysis.stats.offsets import bound_longest, know_segment_ids, padded_segment_ids

__all__: list[str] = []

#: Smallest padded length of a Jagged's values.
MIN_BUCKET = 256
#: How deep closed-over functions are followed.
MAX_DEPTH = 4


class _Unsupported(Exception):
    """A closed-over value that cannot be an argument nor part of a key; ``what`` names
    it (``"'self' (a MeanJetPt object)"``)."""

    def __init__(self, what: str = "") -> None:
        super().__init__(what)
        self.what = what


def size_bucket(n: int) -> int:
    """The padded length of ``n`` values: the smallest of 256, then steps of about
    1.25x rounded up to a multiple of 64 (320, 448, 576, ...), that is ``>= n``."""
    b = MIN_BUCKET
    while b < n:
        b = -(-(b * 5) // (4 * 64)) * 64
    return b


def longest_bucket(n: int) -> int:
    """The longest list rounded up to a multiple of 4 (at least 4)."""
    return max(4, -(-n // 4) * 4)


def _importable(obj: Any) -> bool:
    """``obj`` is what its module holds under its name (kept alive by the module, so
    its identity is a safe key)."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    name = getattr(obj, "__qualname__", None)
    if module is None or not isinstance(name, str) or "<" in name:
        return False
    target: Any = module
    for part in name.split("."):
        target = getattr(target, part, None)
    return target is obj


_SIMPLE = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _padded(values: Any, offsets: Any) -> tuple[tuple[Any, ...], list]:
    """A concrete Jagged's ``(structure, [padded values, offsets, padded segment ids])``."""
    off = np.asarray(offsets)
    values = np.asarray(values)
    n = values.shape[0]
    size = size_bucket(n)
    padded = np.zeros(size, dtype=values.dtype)
    padded[:n] = values
    longest = longest_bucket(int(np.max(np.diff(off))) if off.shape[0] > 1 else 0)
    structure = ("jagged", size, off.shape[0], str(values.dtype), str(off.dtype), longest)
    return structure, [padded, off, padded_segment_ids(off, size)]


def padded_nbytes(x: Jagged) -> int:
    """The bytes that a compiled :func:`analysis.stats.derive` keeps with the concrete
    ``x`` (:meth:`Jagged.kept`): its values padded to :func:`size_bucket` and their int32
    segment ids."""
    size = size_bucket(int(x.num_elements))
    return size * (np.dtype(x.values.dtype).itemsize + 4)


def _convert(obj: Any, leaves: list, depth: int) -> tuple[Any, Callable[[Iterator], Any]]:
    """``(structure, build)``: ``build(iter(arguments))`` rebuilds ``obj`` from the
    arguments appended to ``leaves``."""
    if isinstance(obj, Tracer):
        raise _Unsupported("a JAX tracer")
    if isinstance(obj, Jagged):
        if isinstance(obj.offsets, Tracer) or isinstance(obj.values, Tracer):
            raise _Unsupported("a Jagged of JAX tracers")
        # kept with the Jagged: a later pass over kept columns does not pad again
        structure, arguments = obj.kept(_padded)
        leaves += arguments
        longest = structure[-1]

        def build_jagged(it: Iterator) -> Jagged:
            v, o, ids = next(it), next(it), next(it)
            bound_longest(o, longest)
            know_segment_ids(o, ids)
            return Jagged.tree_unflatten(None, (v, o))

        return structure, build_jagged
    if isinstance(obj, (np.ndarray, jax.Array)):
        leaves.append(obj)
        return ("array", tuple(obj.shape), str(obj.dtype)), lambda it: next(it)
    if isinstance(obj, _SIMPLE):
        return ("const", type(obj), repr(obj)), lambda it: obj
    if isinstance(obj, (tuple, list)) and type(obj) in (tuple, list):
        parts = [_convert(x, leaves, depth) for x in obj]
        kind = type(obj)
        return (kind.__name__, tuple(p[0] for p in parts)), \
            lambda it: kind(b(it) for _, b in parts)
    if type(obj) is dict and all(isinstance(k, str) for k in obj):
        keys = tuple(obj)
        parts = [_convert(obj[k], leaves, depth) for k in keys]
        return ("dict", keys, tuple(p[0] for p in parts)), \
            lambda it: {k: b(it) for k, (_, b) in zip(keys, parts)}
    if isinstance(obj, types.FunctionType) and not _importable(obj):
        return _convert_function(obj, leaves, depth + 1)
    if isinstance(obj, (types.ModuleType, type)) or _importable(obj):
        return ("object", obj), lambda it: obj
    raise _Unsupported(f"a {type(obj).__name__} object")


def _convert_function(fn: types.FunctionType, leaves: list,
                      depth: int) -> tuple[Any, Callable[[Iterator], Any]]:
    if depth > MAX_DEPTH:
        raise _Unsupported(f"functions nested more than {MAX_DEPTH} deep")
    if fn.__kwdefaults__:
        raise _Unsupported(f"keyword-only defaults of {fn.__name__}")
    cells = []
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            cells.append(_convert(cell.cell_contents, leaves, depth))
        except ValueError:  # an empty cell (a name assigned later)
            raise _Unsupported(f"{name!r} (not yet assigned)") from None
        except _Unsupported as err:
            raise _Unsupported(err.what if err.what.startswith("'") else f"{name!r} ({err.what})") from None
    defaults = _convert(tuple(fn.__defaults__ or ()), leaves, depth)
    code, globs, name = fn.__code__, fn.__globals__, fn.__name__
    # The module-level names the code reads, by value: a processor that coffea sends
    # to its workers (cloudpickle) arrives with a fresh globals dict for every chunk.
    used: list[tuple[Any, ...]] = []
    for global_name in sorted(_global_names(code)):
        if global_name in globs:
            value = globs[global_name]
            if isinstance(value, _SIMPLE):
                used.append((global_name, type(value), repr(value)))
            elif isinstance(value, types.ModuleType) or _importable(value):
                used.append((global_name, value))
            else:
                raise _Unsupported(f"the global {global_name!r} (a {type(value).__name__} object)")

    def build_function(it: Iterator) -> types.FunctionType:
        closure = tuple(types.CellType(b(it)) for _, b in cells)
        return types.FunctionType(code, globs, name, defaults[1](it) or None, closure or None)

    return ("function", code, tuple(used), tuple(c[0] for c in cells), defaults[0]), \
        build_function


def _global_names(code: types.CodeType) -> set[str]:
    """Names ``code`` (and the functions defined in it) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def closure_refusal(fn: Any) -> str | None:
    """What keeps :func:`closure_inputs` from converting ``fn`` (``"'self' (a MeanJetPt
    object)"``), or None where it converts (or ``fn`` is no Python function)."""
    if not isinstance(fn, types.FunctionType):
        return None
    try:
        _convert_function(fn, [], 0)
    except _Unsupported as err:
        return err.what or "an unsupported value"
    return None


def closure_inputs(fn: Any) -> tuple[Any, list, Callable[[list], Any]] | None:
    """``(structure, arguments, rebuild)`` of a chunk function, or ``None`` where
    something it closes over cannot be an argument nor a key (module docstring).
    ``rebuild(arguments)`` is ``fn`` with the arguments (traced, in a compiled
    program) in place of its closed-over arrays."""
    if not isinstance(fn, types.FunctionType):
        return None
    leaves: list = []
    try:
        structure, build = _convert_function(fn, leaves, 0)
        hash(structure)
    except (_Unsupported, TypeError):
        return None
    return structure, leaves, lambda args: build(iter(args))
