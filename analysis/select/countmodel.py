"""Object sets, count conditions and the joint count model (:class:`CountModel`).

The static description the recursions of :mod:`analysis.select.objects` run on: sets
(with parents), counts over one or several sets, their count variables, caps
(:func:`required_cap`), per-collection patterns and their count increments. See
:mod:`analysis.select.objects` for the meaning.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from analysis.errors import ConfigError

__all__ = ["OPS", "Count", "CountModel", "ObjectSet", "required_cap"]


OPS = (">", ">=", "<", "<=", "==")


# --- the model -------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectSet:
    """A named set of objects of ``collection``; with ``parent``, a subset of it."""

    name: str
    collection: str
    parent: str | None = None


def required_cap(op: str, n: int) -> int:
    """Smallest exact cap for the condition ``K op n`` (integer ``n >= 0``): ``n`` for
    ``>=`` and ``<``, ``n + 1`` for ``>``, ``<=`` and ``==``."""
    if op not in OPS:
        raise ConfigError(f"count op {op!r}: expected one of {', '.join(OPS)}")
    return max(int(n), 0) + (0 if op in (">=", "<") else 1)


@dataclass(frozen=True)
class Count:
    """The condition ``K op n`` on ``K`` = number of members of ``sets`` (with
    multiplicity, several collections allowed); states ``0..cap`` are tracked, the top
    one meaning ``K >= cap`` (see :func:`required_cap`). ``n`` is a traced input."""

    sets: tuple[str, ...]
    op: str
    cap: int


@dataclass(frozen=True)
class CountModel:
    """Object sets and count conditions (static: hashable, usable as a jit static arg).

    Derived tables (patterns, transfer maps) are computed once per model."""

    sets: tuple[ObjectSet, ...]
    counts: tuple[Count, ...] = field(default=())

    def __post_init__(self) -> None:
        names = [s.name for s in self.sets]
        dup = [n for n, k in Counter(names).items() if k > 1]
        if dup:
            raise ConfigError(f"object set {dup[0]!r} is defined twice")
        by_name = {s.name: s for s in self.sets}
        for s in self.sets:
            seen = {s.name}
            p = s.parent
            while p is not None:
                if p not in by_name:
                    raise ConfigError(f"object set {s.name!r}: parent {p!r} is not a set")
                if by_name[p].collection != s.collection:
                    raise ConfigError(
                        f"object set {s.name!r}: parent {p!r} is a set of "
                        f"{by_name[p].collection!r}, not {s.collection!r}"
                    )
                if p in seen:
                    raise ConfigError(f"object set {s.name!r}: cycle in parents via {p!r}")
                seen.add(p)
                p = by_name[p].parent
        for c in self.counts:
            if c.op not in OPS:
                raise ConfigError(f"count over {list(c.sets)}: op {c.op!r} is not one of {OPS}")
            if not c.sets:
                raise ConfigError("count over no set")
            for name in c.sets:
                if name not in by_name:
                    raise ConfigError(f"count over {list(c.sets)}: {name!r} is not a set")
            if c.cap < 0:
                raise ConfigError(f"count over {list(c.sets)}: cap {c.cap} is negative")

    # static tables -----------------------------------------------------------------

    @cached_property
    def collections(self) -> tuple[str, ...]:
        """Collections in order of first appearance."""
        return tuple(dict.fromkeys(s.collection for s in self.sets))

    @cached_property
    def _sets_of(self) -> dict[str, tuple[ObjectSet, ...]]:
        """Sets of each collection, parents before children."""
        out: dict[str, list[ObjectSet]] = {c: [] for c in self.collections}
        by_name = {s.name: s for s in self.sets}

        def depth(s: ObjectSet) -> int:
            return 0 if s.parent is None else 1 + depth(by_name[s.parent])

        for s in sorted(self.sets, key=depth):
            out[s.collection].append(s)
        return {c: tuple(v) for c, v in out.items()}

    @cached_property
    def patterns(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, n_sets)`` bool: which sets hold an object in each pattern
        (pattern 0 = in no set)."""
        out = {}
        for c, sets in self._sets_of.items():
            idx = {s.name: i for i, s in enumerate(sets)}
            rows = []
            for bits in itertools.product((False, True), repeat=len(sets)):
                if all(
                    not b or s.parent is None or bits[idx[s.parent]] for b, s in zip(bits, sets)
                ):
                    rows.append(bits)
            out[c] = np.array(rows, dtype=bool).reshape(len(rows), len(sets))
        return out

    @cached_property
    def variables(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        """Count variables: ``(sorted sets with multiplicity, cap)``, one per distinct
        multiset of counted sets, with the largest cap of its conditions."""
        caps: dict[tuple[str, ...], int] = {}
        for c in self.counts:
            key = tuple(sorted(c.sets))
            caps[key] = max(caps.get(key, 0), c.cap)
        return tuple(caps.items())

    @cached_property
    def shape(self) -> tuple[int, ...]:
        """Shape of the joint count state: ``(cap_v + 1, ...)``."""
        return tuple(cap + 1 for _, cap in self.variables)

    @cached_property
    def n_states(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def _state_counts(self) -> np.ndarray:
        """``(S, V)``: the count of each variable in each flat state."""
        if not self.shape:
            return np.zeros((1, 0), dtype=np.int64)
        grid = np.indices(self.shape).reshape(len(self.shape), -1).T
        return grid.reshape(self.n_states, len(self.shape))

    @cached_property
    def targets(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, S)`` int: flat state after adding one object of each
        pattern to each state (absorbing at the caps)."""
        caps = np.array([cap for _, cap in self.variables], dtype=np.int64)
        out = {}
        for c in self._sets_of:
            pats = self.patterns[c]
            d = self.increments[c]
            new = np.minimum(self._state_counts[None, :, :] + d[:, None, :], caps)
            if len(self.shape):
                out[c] = np.ravel_multi_index(tuple(np.moveaxis(new, -1, 0)), self.shape)
            else:
                out[c] = np.zeros((len(pats), 1), dtype=np.int64)
        return out

    @cached_property
    def increments(self) -> dict[str, np.ndarray]:
        """Per collection, ``(P, V)`` int: how much an object of each pattern adds to
        each count variable."""
        out = {}
        for c, sets in self._sets_of.items():
            pats = self.patterns[c]
            d = np.zeros((len(pats), len(self.variables)), dtype=np.int64)
            for v, (names, _) in enumerate(self.variables):
                mult = Counter(names)
                for i, s in enumerate(sets):
                    d[:, v] += pats[:, i] * mult.get(s.name, 0)
            out[c] = d
        return out

    def set_index(self, name: str) -> tuple[str, int]:
        """``(collection, position of the set in its collection's patterns)``."""
        for c, sets in self._sets_of.items():
            for i, s in enumerate(sets):
                if s.name == name:
                    return c, i
        raise ConfigError(f"{name!r} is not an object set")
