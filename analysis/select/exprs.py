"""Observable expressions over object sets (``objects:`` configs): syntax only.

Grammar (spaces ignored), ``S`` an object set, ``f`` a field, ``i`` an integer:

- ``S.f``: one entry per object of ``S``; ``abs(S.f)`` the same with ``|f|``;
- ``S[i].f``: the ``i``-th selected object of ``S`` (ranked by the set's ``rank_by``);
- ``sum(S.f)``: per event, the sum over selected objects; ``count(S)``: their number;
- ``fn(a, b, ...)`` with ``fn`` a registered function (:mod:`analysis.select.functions`:
  ``mass|pt|eta|phi(S[i] + T[j] ...)`` of a 4-vector sum, ``deltaR(S[i], T[j])``,
  ``deltaPhi(S[i], T[j])``, ``mt(S[i], MET)``): each argument an indexed object, a
  per-event object ``X`` (its fields the branches ``X.f``) or, where the function
  allows sums, a sum of indexed objects;
- anything else of the form ``X.f`` or ``X`` whose ``X`` is not a set: a per-event
  branch (``MET.pt``).

:func:`parse` checks syntax and function names only (a ``ValueError`` with the
message); which names are sets is decided by :func:`resolve`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analysis.select import functions

__all__ = ["BUILTINS", "FUNCTIONS", "Node", "parse", "resolve"]

BUILTINS = ("sum", "count", "abs")  # the grammar's own: event sums and |field|
FUNCTIONS = tuple(functions.FUNCTIONS) + BUILTINS
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_FIELD = re.compile(rf"^({_NAME})(?:\.({_NAME}))?$")
_INDEXED = re.compile(rf"^({_NAME})\[(\d+)\]$")
_INDEXED_FIELD = re.compile(rf"^({_NAME})\[(\d+)\]\.({_NAME})$")
_CALL = re.compile(rf"^({_NAME})\((.*)\)$")


@dataclass(frozen=True)
class Node:
    """A parsed expression.

    ``kind``: ``"field"`` (``S.f`` or a branch before :func:`resolve`), ``"branch"``,
    ``"index"`` (``S[i].f``), ``"sum"``, ``"count"`` or ``"call"`` (the registered
    function ``fn`` of :mod:`analysis.select.functions`). ``head``: the set (or branch
    group); ``slots``: ``((set, i), ...)`` indexed objects, in order of appearance;
    ``args`` (calls): per argument its terms, ``"S[i]"`` (the next slot) or ``"X"`` (a
    per-event object).
    """

    text: str
    kind: str
    head: str | None = None
    field: str | None = None
    slots: tuple[tuple[str, int], ...] = ()
    fn: str | None = None
    absolute: bool = False
    args: tuple[tuple[str, ...], ...] = ()

    @property
    def groups(self) -> tuple[str, ...]:
        """Per-event objects a call reads (``MET`` of ``mt(muons[0], MET)``)."""
        return tuple(dict.fromkeys(t for a in self.args for t in a if "[" not in t))

    @property
    def sets(self) -> tuple[str, ...]:
        """Object sets the expression refers to (empty for a branch)."""
        if self.kind == "branch":
            return ()
        names = [self.head] if self.head is not None else []
        return tuple(dict.fromkeys(names + [s for s, _ in self.slots]))

    @property
    def level(self) -> str:
        """``"object"`` (entries per object of a set), ``"candidate"`` (entries per
        candidate of indexed objects) or ``"event"``."""
        if self.kind == "field":
            return "object"
        if self.kind in ("index", "call"):
            return "candidate"
        return "event"


def _slot(arg: str, text: str) -> tuple[str, int]:
    m = _INDEXED.match(arg)
    if m is None:
        raise ValueError(f"in {text!r}: expected an indexed object like jets[0], got {arg!r}")
    return m.group(1), _index(m.group(2), text)


#: Largest index of an indexed object (``jets[i]``): an event has far fewer objects, and
#: the kernels size arrays by it.
MAX_INDEX = 4095


def _index(digits: str, text: str) -> int:
    i = int(digits) if len(digits) < 10 else MAX_INDEX + 1  # no 4300-digit int()
    if i > MAX_INDEX:
        raise ValueError(f"in {text!r}: index {digits} is too large; expected at most {MAX_INDEX}")
    return i


def _call(fn: str, arg: str, text: str) -> Node:
    """A registered function's node: arguments split on ``,``, sums on ``+``."""
    kind = functions.FUNCTIONS[fn]
    args = tuple(tuple(a.split("+")) for a in arg.split(",")) if arg else ()
    example = ", ".join(f"jets[{i}]" for i in range(kind.arity))
    if len(args) != kind.arity:
        raise ValueError(f"{fn} takes {kind.arity} argument{'s' * (kind.arity != 1)}, "
                         f"e.g. {fn}({example}), got {text!r}")
    slots = []
    for terms in args:
        if len(terms) > 1 and not kind.sums:
            raise ValueError(f"{fn} takes single objects, not sums, e.g. {fn}({example})")
        for t in terms:
            if "[" in t:
                slots.append(_slot(t, text))
            elif _FIELD.match(t) is None or "." in t:
                raise ValueError(f"in {text!r}: expected an indexed object like jets[0] "
                                 f"or a per-event object like MET, got {t!r}")
    if not slots:
        raise ValueError(f"{fn} needs an indexed object among its arguments, e.g. "
                         f"{fn}({example}), got {text!r}")
    return Node(text, "call", slots=tuple(slots), fn=fn, args=args)


def parse(text: str) -> Node:
    """Parse ``text`` (module docstring); ``ValueError`` naming the problem otherwise."""
    s = text.replace(" ", "")
    m = _CALL.match(s)
    if m is not None:
        fn, arg = m.group(1), m.group(2)
        if fn not in FUNCTIONS:
            raise ValueError(
                f"unknown function {fn!r} in {text!r}; expected one of {', '.join(FUNCTIONS)}"
            )
        if fn in functions.FUNCTIONS:
            return _call(fn, arg, text)
        if fn == "count":
            if _FIELD.match(arg) is None or "." in arg:
                raise ValueError(f"count() takes an object set, e.g. count(jets), got {text!r}")
            return Node(text, "count", head=arg)
        inner = _FIELD.match(arg)
        if fn == "sum":
            if inner is None or inner.group(2) is None:
                raise ValueError(f"sum() takes a field of a set, e.g. sum(jets.pt), got {text!r}")
            return Node(text, "sum", head=inner.group(1), field=inner.group(2))
        node = parse(arg)  # abs
        if node.kind not in ("field", "index"):
            raise ValueError(f"abs() takes a field, e.g. abs(jets.eta), got {text!r}")
        return Node(text, node.kind, node.head, node.field, node.slots, absolute=True)
    m = _INDEXED_FIELD.match(s)
    if m is not None:
        return Node(text, "index", field=m.group(3), slots=((m.group(1), _index(m.group(2), text)),))
    m = _FIELD.match(s)
    if m is not None:
        return Node(text, "field", head=m.group(1), field=m.group(2))
    raise ValueError(
        f"cannot parse expression {text!r}; expected e.g. jets.pt, sum(jets.pt), jets[0].pt, "
        "mass(jets[0] + jets[1]), deltaR(jets[0], jets[1]) or MET.pt"
    )


def resolve(node: Node, sets: set[str] | dict) -> Node:
    """``node`` with ``S.f``/``X`` on a non-set turned into a branch; ``ValueError``
    naming an unknown set where a set is required (sums, counts, indexed objects)."""
    if node.kind == "field" and (node.head not in sets or node.field is None):
        if node.head in sets:
            raise ValueError(f"{node.text!r} names the set {node.head!r}; give a field, "
                             f"e.g. {node.head}.pt")
        key = node.head if node.field is None else f"{node.head}.{node.field}"
        return Node(node.text, "branch", head=key, absolute=node.absolute)
    for name in node.groups:
        if name in sets:
            raise ValueError(f"in {node.text!r}: expected an indexed object like {name}[0], "
                             f"got the set {name!r}")
    for name in node.sets:
        if name not in sets:
            known = ", ".join(sorted(sets)) or "(none)"
            raise ValueError(f"unknown object set {name!r} in {node.text!r}; sets: {known}")
    return node
