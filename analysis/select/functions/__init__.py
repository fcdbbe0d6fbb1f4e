"""Expression kinds: functions of indexed objects in observables (pure JAX).

An observable ``fn(arg, ...)`` of the object-set grammar (:mod:`analysis.select.exprs`)
whose ``fn`` is registered here is a function of the objects its arguments name, one
value per candidate (tuple of objects, weighted by the probability that they are the
indexed selected objects: :func:`analysis.select.objects.leading`). An argument is an
indexed object ``S[i]``, a per-event object ``X`` whose fields are branches (``MET``:
``MET.pt``, ``MET.phi``), or, for functions with ``sums``, a sum ``S[i] + T[j] ...`` of
4-vectors (:func:`analysis.select.fourvec.total`). A function is one class in one file
of this package with

- ``name``: the name in expressions; ``arity``: the number of arguments;
- ``fields``: the fields it reads of every argument (``("pt", "phi")``), read from the
  objects' collections or as the branches ``X.f``;
- ``sums``: whether an argument may be a sum of objects (then ``fields`` must be the
  four of :class:`analysis.select.fourvec.P4`);
- ``value(*args)``: the values, elementwise: each argument has the ``fields`` as
  attributes (float64 arrays of one shape; a :class:`~analysis.select.fourvec.P4` when
  ``fields`` are its four); undefined points NaN or a documented value with finite
  gradient, as :mod:`analysis.select.fourvec`.

Values depend on data only, never on parameters: the selection enters through the
candidates' weights. Adding a function is one file and one entry in :data:`FUNCTIONS`
(README "Extending"); the parser, the plan (which columns to read), the config checks
and the kernel know functions only through this registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

from analysis.select.functions.fourvector import Eta, Mass, Phi, Pt
from analysis.select.functions.mt import TransverseMass
from analysis.select.functions.pairs import DeltaPhi, DeltaR
from analysis.select.p4 import P4

__all__ = ["FUNCTIONS", "Function", "apply"]


class Function(Protocol):
    """The protocol of an expression kind (module docstring)."""

    name: str
    arity: int
    fields: tuple[str, ...]
    sums: bool

    def value(self, *args: Any) -> Any: ...


# The one registration of expression kinds (name -> kind).
FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        Mass(),
        Pt(),
        Eta(),
        Phi(),
        DeltaR(),
        DeltaPhi(),
        TransverseMass(),
    )
}


def apply(name: str, args: Sequence[Sequence[str]], read: Callable[[str, int | None, str], Any]):
    """Values of the registered function ``name`` with arguments ``args`` (per argument
    its terms, as :class:`analysis.select.exprs.Node` ``args``). ``read(term, slot,
    field)``: the values of ``field`` of a term, ``slot`` its position among the call's
    indexed objects (``None`` for a per-event object); all broadcast to one shape. An
    argument of several terms is their 4-vector sum."""
    # Here, not at import: the registry is read by the config checks, which load no JAX.
    from analysis.select.fourvec import total

    kind = FUNCTIONS[name]
    slot = 0
    operands = []
    for terms in args:
        records = []
        for term in terms:
            k = None
            if "[" in term:
                k, slot = slot, slot + 1
            records.append({f: read(term, k, f) for f in kind.fields})
        if tuple(kind.fields) == P4._fields:
            operands.append(total(*(P4(**r) for r in records)))
        else:
            operands.append(SimpleNamespace(**records[0]))
    return kind.value(*operands)
