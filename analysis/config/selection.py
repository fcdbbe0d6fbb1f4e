"""Config schema of the selection: parameters, soft cuts, object sets, event conditions.

Pydantic v2 models of :class:`analysis.config.loader.Config`'s ``parameters``,
``objects`` and ``selection`` (both forms: ``{objects, events}`` and the list of event
conditions); the cut thresholds' keys come from the registered cut kinds
(:mod:`analysis.config.cutkeys`). Split out of :mod:`analysis.config.loader`, which
re-exports every name.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from analysis.config import likelihood as _lk
from analysis.config.cutkeys import CutKeys
from analysis.config.schema import _fail, _Model, _suggest
from analysis.select import cuts

__all__ = [
    "COUNT_OPS",
    "CutConfig",
    "EventCutConfig",
    "ObjectSelectionConfig",
    "ObjectSetConfig",
    "ParameterConfig",
    "SelectionConfig",
    "SelectionEntryConfig",
]



def _registered(op: str, extra: tuple[str, ...] = ()) -> str:
    """``op`` if a registered cut kind takes it (or it is one of ``extra``). The registry
    is read now, not at import: a kind registered later (a plugin, a test) is accepted."""
    ops = tuple(cuts.OPS) + extra
    if op not in ops:
        raise ValueError(f"expected one of {', '.join(map(repr, ops))}, got {op!r}")
    return op


#: every registered cut kind's ops (:data:`analysis.select.cuts.OPS`)
Op = Annotated[str, AfterValidator(_registered)]
#: a selection entry's op: a cut kind's, or a count's ``==``
EntryOp = Annotated[str, AfterValidator(lambda op: _registered(op, ("==",)))]
_CUT_VAR = re.compile(r"^(score\.)?[A-Za-z_][A-Za-z0-9_]*$")  # score.NAME: analysis.config.score


def _one_of(obj: BaseModel, a: str, b: str) -> None:
    """Require exactly one of the fields ``a`` and ``b`` to be set."""
    given = [getattr(obj, a) is not None, getattr(obj, b) is not None]
    if all(given):
        raise _fail(b, f"give either '{a}' or '{b}', not both")
    if not any(given):
        raise _fail("", f"needs one of '{a}' or '{b}'")


def _check_width(cls: type, v: float | str | None) -> float | str | None:
    """Shared field validator: a cut width is a number >= 0 (0 means a hard cut),
    ``auto`` (from the data: :mod:`analysis.driver.autowidth`) or left out."""
    if v is None or v == "auto":
        return v
    if isinstance(v, float) and not math.isfinite(v):  # one line here, not one per member
        raise ValueError(f"expected a finite number, got {v!r}")
    if isinstance(v, str) or not v >= 0:
        raise ValueError(f"must be a number >= 0 or 'auto', got {v!r}")
    return v


#: a cut's width as written: a number, ``auto`` or None (left out)
Width = float | Literal["auto"] | None


def _cut_width(width: Width, trainable: bool) -> float:
    """The width in force before the data is read: a number as given; ``auto`` or left
    out on a trainable threshold: 0 until ``optimize`` fills it in from the data
    (:func:`analysis.driver.autowidth.auto_widths`), and 0 (hard) elsewhere."""
    return 0.0 if width is None or width == "auto" else float(width)


class ParameterConfig(_Model):
    """A (possibly trainable) analysis parameter such as a cut threshold."""

    init: float
    bounds: tuple[float, float] | None = None
    trainable: bool = True
    integer: bool = False
    #: unit for plots and tables (default: from the cut's field, e.g. GeV for pt)
    unit: str | None = None

    @field_validator("bounds", mode="before")
    @classmethod
    def _pair(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)) and len(v) != 2:
            raise ValueError(f"expected [lower, upper], got {list(v)}")
        return v

    @model_validator(mode="after")
    def _check(self) -> ParameterConfig:
        if self.bounds is not None:
            lo, hi = self.bounds
            if not lo < hi:
                raise _fail("bounds", f"lower bound {lo} must be below upper bound {hi}")
            if not lo <= self.init <= hi:
                raise _fail("init", f"{self.init} is outside bounds [{lo}, {hi}]")
        elif self.trainable:
            raise _fail("", "trainable parameter needs bounds: [lower, upper]")
        if self.integer and not float(self.init).is_integer():
            raise _fail("init", f"integer parameter needs an integer init, got {self.init}")
        return self


class CutConfig(CutKeys):
    """One soft cut on a field of the selected object collection; its thresholds'
    keys come from the kind its ``op`` names (:mod:`analysis.config.cutkeys`)."""

    var: str
    op: Op
    # None (left out) on a trainable threshold: from the data, as 'auto'
    width: Width = None

    @field_validator("var")
    @classmethod
    def _var(cls, v: str) -> str:
        if not _CUT_VAR.match(v):
            raise ValueError(f"invalid variable '{v}'; expected a field name like pt or abs_eta")
        return v

    _width = field_validator("width", mode="before")(_check_width)

    def effective_width(self) -> float:
        """The width in force (:func:`_cut_width`)."""
        return _cut_width(self.width, self.param is not None)

    @property
    def wants_auto_width(self) -> bool:
        """Whether ``optimize`` sets this cut's width from the data: ``auto``, or left
        out on a threshold that is a parameter."""
        return self.width == "auto" or (self.width is None and any(
            p is not None for p, _ in self.thresholds()))


class ObjectSelectionConfig(_Model):
    """Soft per-object cuts on one collection (e.g. Jet)."""

    collection: str
    cuts: list[CutConfig] = []


COUNT_OPS = (">", ">=", "<", "<=", "==")


class _EventCondition(CutKeys):
    """An event condition, the same in both forms: a count ``{count, op, value|param[,
    width]}`` (an integer condition on the number of selected objects; a ``param``
    threshold ``n`` is smoothed between ``floor(n)`` and ``floor(n) + 1`` by
    :func:`analysis.select.pbinom.integer_step` of ``width``, default 1.0, annealed like
    the other widths, so it is trainable; a fixed integer ``value`` is exact and takes no
    width) or a branch cut ``{var, op, value|param, width}`` (a soft cut on a per-event
    branch; ``width`` default 0: hard; any registered cut kind, e.g. ``window``). Counts
    take ``>``, ``>=``, ``<``, ``<=``, ``==``; ``==`` is for counts only."""

    var: str | None = None
    width: Width = None
    op: EntryOp

    _width = field_validator("width", mode="before")(_check_width)

    @model_validator(mode="after")
    def _check(self) -> _EventCondition:
        _one_of(self, "count", "var")
        if self.count is not None:
            if self.op not in COUNT_OPS:
                raise _fail("op", f"a count condition needs one of {', '.join(COUNT_OPS)}; "
                            f"got {self.op!r}")
            if self.width is not None and self.param is None:
                raise _fail("width", "a count condition is a hard integer condition; a width "
                            "only smooths a trainable 'param' threshold")
            if self.value is not None and not (self.value.is_integer() and self.value >= 0):
                raise _fail("value", f"a count needs an integer >= 0, got {self.value}")
            if isinstance(self.count, list) and not self.count:
                raise _fail("count", "empty list of sets")
        elif self.op == "==":
            raise _fail("op", "'==' is only for counts; a var cut needs >, >=, < or <=")
        return self

    @property
    def has_width(self) -> bool:
        """Whether the condition takes a cut width (a branch cut, or a count with a
        trainable ``param``; a fixed integer count is exact without one)."""
        return getattr(self, "count", None) is None or self.param is not None

    def effective_width(self) -> float:
        """The width in force: as given, else 1.0 for count cuts (the smoothed integer
        step of :func:`analysis.select.pbinom.integer_step`; ``auto`` too) and for var
        cuts :func:`_cut_width` (0 until ``optimize`` reads it from the data)."""
        if getattr(self, "count", None) is not None:
            return 1.0 if self.width is None or self.width == "auto" else float(self.width)
        return _cut_width(self.width, self.param is not None)

    @property
    def wants_auto_width(self) -> bool:
        """Whether ``optimize`` sets this condition's width from the data (a var cut
        with ``width: auto``, or without a width on a parameter threshold)."""
        if getattr(self, "count", None) is not None:
            return False
        return self.width == "auto" or (self.width is None and any(
            p is not None for p, _ in self.thresholds()))


class EventCutConfig(_EventCondition):
    """An event condition of the single-collection form (``selection: {objects,
    events}``): ``count`` names the selected collection. The loader rewrites the form
    into an object set named after the collection and a selection list
    (:meth:`Config._rewrite_single`)."""

    count: str | None = None


class ObjectSetConfig(_Model):
    """A named object set (``objects:`` mapping): on a ``collection`` or derived
    ``from`` another set, with its own soft ``cuts``, ranked by ``rank_by`` for ``S[i]``.

    ``max_objects`` (on a set with ``collection`` only): the most objects of that
    collection an event may hold; an event with more stops the run with a one-line
    error naming the file, collection and entry (never a silent truncation). It also
    lifts the default bound of 4096 candidates of an indexed observable (``S[i]``:
    ``C(M, i + 1)`` per event) to what ``max_objects`` allows."""

    collection: str | None = None
    from_: str | None = Field(default=None, alias="from")
    cuts: list[CutConfig] = []
    rank_by: str = "pt"
    max_objects: int | None = Field(default=None, ge=1)

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=False,
                              defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            keys = ["collection", "from", "cuts", "rank_by", "max_objects"]
            for key in data:
                if key not in keys:
                    raise _fail(str(key), "unknown key" + _suggest(str(key), keys))
        return data

    @field_validator("rank_by")
    @classmethod
    def _rank(cls, v: str) -> str:
        if not _CUT_VAR.match(v):
            raise ValueError(f"invalid field '{v}'; expected a field name like pt")
        return v

    @model_validator(mode="after")
    def _check(self) -> ObjectSetConfig:
        if self.collection is not None and self.from_ is not None:
            raise _fail("from", "give either 'collection' or 'from', not both")
        if self.collection is None and self.from_ is None:
            raise _fail("", "needs one of 'collection' or 'from'")
        if self.from_ is not None and self.max_objects is not None:
            raise _fail("max_objects", f"caps a collection: set it on the root set of "
                        f"'{self.from_}' (the one with 'collection')")
        return self


class SelectionEntryConfig(_EventCondition):
    """One event condition of the list form of ``selection`` (with ``objects:``):
    ``count`` names a set or a list of sets (their joint count); see
    :class:`_EventCondition`."""

    count: str | list[str] | None = None

    @property
    def sets(self) -> tuple[str, ...]:
        """The counted sets (``()`` for a var cut)."""
        if self.count is None:
            return ()
        return (self.count,) if isinstance(self.count, str) else tuple(self.count)


# analysis.config.likelihood's channels hold selection-list entries
_lk.ChannelConfig.model_rebuild(_types_namespace={"SelectionEntryConfig": SelectionEntryConfig})
_lk.LikelihoodConfig.model_rebuild()


class SelectionConfig(_Model):
    """Object cuts followed by event cuts; or, with top-level ``objects:``, a list of
    event conditions (``entries``; written as a YAML list under ``selection``)."""

    objects: ObjectSelectionConfig | None = None
    events: list[EventCutConfig] = []
    entries: list[SelectionEntryConfig] | None = None

    @model_validator(mode="before")
    @classmethod
    def _listed(cls, data: Any) -> Any:
        return {"entries": data} if isinstance(data, list) else data
