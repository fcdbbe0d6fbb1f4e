"""The one state flattener: nested dicts and named-tuple states to ``path -> leaf``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["flatten"]


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(path/to/leaf, leaf)`` for every leaf of nested mappings and named tuples
    (``Moments``: ``.../moments/m2``), depth first in key/field order; anything else
    is a leaf (an array, a number, ``None``)."""
    if isinstance(tree, Mapping):
        items = list(tree.items())
    elif isinstance(tree, tuple) and hasattr(tree, "_fields"):
        items = list(zip(tree._fields, tree))
    else:
        yield prefix, tree
        return
    for key, value in items:
        yield from flatten(value, f"{prefix}/{key}" if prefix else str(key))
