"""NanoAOD branches a plan needs, checked by name when each file is opened.

coffea's NanoAOD schema builds a collection ``C`` from the counter ``nC`` and the
branches ``C_<field>``, and its 4-vector behaviour needs ``C_pt``, ``C_eta``, ``C_phi``
and ``C_mass``; without one of them, or with a ``C_<field>`` that is not one value per
object (a flat branch), the words that reach the user
are coffea's or vector's (``JetArray: missing temporal coordinate``, ``KeyError:
'content'``). :func:`branch_problem` names the branch instead, from the tree's branch
list alone (nothing is read).
"""

from __future__ import annotations

import difflib
from typing import Any

__all__ = ["VECTOR_FIELDS", "branch_problem", "required_branches"]

#: Fields of every NanoAOD collection the schema gives a 4-vector behaviour.
VECTOR_FIELDS = ("pt", "eta", "phi", "mass")


def required_branches(plan: Any) -> dict[str, tuple[str, ...]]:
    """Collection -> the fields the plan reads from it."""
    return {c: tuple(f) for c, f in plan.sets.fields}


#: RNTuple field types of one value per object (uproot's ``RField.typename``).
_VECTOR_TYPES = ("std::vector<", "ROOT::RVec<", "ROOT::VecOps::RVec<")


def _flat_field(ntuple: Any, required: dict[str, tuple[str, ...]]) -> str | None:
    """An RNTuple's ``C_<field>`` that is one value per event (``double``, not
    ``std::vector<double>``): coffea's words for it are ``KeyError: missing key
    'content'``. Other problems of an RNTuple are left to coffea."""
    keys = set(ntuple.keys())
    for coll, fields in required.items():
        for f in dict.fromkeys((*fields, *VECTOR_FIELDS)):
            name = f"{coll}_{f}"
            if name not in keys:
                continue
            typename = str(getattr(ntuple[name], "typename", ""))
            if typename and not typename.startswith(_VECTOR_TYPES):
                return (f"field {name!r} is a flat field ({typename}: one value per event), "
                        f"not one value per {coll} object (std::vector)")
    return None


def branch_problem(tree: Any, required: dict[str, tuple[str, ...]]) -> str | None:
    """One line naming the first missing or inconsistent branch of ``tree`` (an uproot
    TTree) for ``required`` (:func:`required_branches`), or ``None``."""
    if required and getattr(tree, "classname", None) == "ROOT::RNTuple":
        return _flat_field(tree, required)
    if not required or getattr(tree, "classname", None) != "TTree":
        return None
    keys = set(tree.keys())
    for coll, fields in required.items():
        counter = f"n{coll}"
        if counter not in keys:
            collections = sorted(k[1:] for k in keys if k.startswith("n") and len(k) > 1)
            close = difflib.get_close_matches(coll, collections, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return f"no collection {coll!r} (no branch {counter!r}){hint}"
        for f in dict.fromkeys((*fields, *VECTOR_FIELDS)):
            name = f"{coll}_{f}"
            if name not in keys:
                if f in fields:
                    continue  # the reading names it, with a suggestion
                return (
                    f"no branch {name!r}: NanoAOD's {coll} objects need "
                    f"{', '.join(f'{coll}_{v}' for v in VECTOR_FIELDS)}"
                )
            branch = tree[name]
            jagged = getattr(branch, "count_branch", None) is not None or "Jagged" in type(
                getattr(branch, "interpretation", None)
            ).__name__
            if not jagged:  # (files may count each field by its own copy of nC)
                return (
                    f"branch {name!r} is a flat branch (one value per event), not one value "
                    f"per {coll} object (counted by {counter!r})"
                )
    return None
