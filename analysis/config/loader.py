"""YAML configuration: the one loader and its pydantic v2 schema.

Every problem with a config file is reported as a single-line :class:`ConfigError`
of the form ``"{path}: {dotted.location}: {message}"``.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from analysis.config import likelihood as _lk
from analysis.config.cutkeys import CutKeys
from analysis.config.schema import _ERR, _fail, _Model, _suggest
from analysis.config.score import SCORE_PREFIX, ScoreConfig, check_scores, score_parameters
from analysis.config.terms import TERM_TYPES, ObjectiveTerm
from analysis.config.yamlsafe import MAX_CONFIG_BYTES, parse_yaml
from analysis.config.yamlsafe import show_value as _show
from analysis.errors import ConfigError
from analysis.select import cuts, exprs
from analysis.stats import registry

__all__ = [
    "AnnealConfig", "Config", "ConfigError", "CutConfig", "DatasetConfig", "EventCutConfig",
    "ExecutorConfig", "GenerateConfig", "HistConfig", "ObjectiveConfig", "ObjectiveTermConfig", "ObjectSelectionConfig",
    "ObjectSetConfig", "ObservableConfig", "OptimizerConfig", "SelectionEntryConfig", "OutputConfig", "ParameterConfig", "ScheduleConfig",
    "SelectionConfig", "config_from_dict", "load_config", "parse_yaml",
]

Op = Literal[cuts.OPS]  # type: ignore[valid-type]  # every registered cut kind's ops
_EXPR = re.compile(r"^(?:(sum|count|abs)\()?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?\)?$")
_CUT_VAR = re.compile(r"^(score\.)?[A-Za-z_][A-Za-z0-9_]*$")  # score.NAME: analysis.config.score
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # skhep:, root://, https://, ...
def _one_of(obj: BaseModel, a: str, b: str) -> None:
    """Require exactly one of the fields ``a`` and ``b`` to be set."""
    given = [getattr(obj, a) is not None, getattr(obj, b) is not None]
    if all(given):
        raise _fail(b, f"give either '{a}' or '{b}', not both")
    if not any(given):
        raise _fail("", f"needs one of '{a}' or '{b}'")


def _finite_kwargs(cls: type, v: dict[str, Any]) -> dict[str, Any]:
    """Shared field validator: numbers passed on to optax must be finite (kwargs are untyped)."""
    for key, value in v.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise _fail(str(key), f"expected a finite number, got {value}")
    return v


def _check_width(cls: type, v: float) -> float:
    """Shared field validator: a cut width must be >= 0 (0 means a hard cut)."""
    if not v >= 0:
        raise ValueError(f"width must be >= 0, got {v}")
    return v


class GenerateConfig(_Model):
    """Demo files made on first use by :mod:`analysis.data.generate` (deterministic, seeded)."""

    process: Literal["ttbar", "dy"]
    events: int = Field(ge=1)
    files: int = Field(default=1, ge=1)
    seed: int = 0
    dir: str


class DatasetConfig(_Model):
    """One dataset: its files, tree, per-event weight branch and normalisation.

    With ``generate``, ``files`` may be left out: they are the generated ones.
    """

    files: list[str] | None = None
    generate: GenerateConfig | None = None
    treename: str = "Events"
    weight: str | None = None
    role: Literal["signal", "background", "data"] | None = None
    xsec: float | None = Field(default=None, gt=0)
    scale: float | None = Field(default=None, ge=0)

    @field_validator("files", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("files")
    @classmethod
    def _nonempty(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("empty file list")
        return v

    @model_validator(mode="after")
    def _check(self) -> DatasetConfig:
        if self.files is None and self.generate is None:
            raise _fail("files", "missing required key")
        if self.xsec is not None and self.scale is not None:
            raise _fail("scale", "give either 'xsec' or 'scale', not both")
        return self


class ExecutorConfig(_Model):
    """How chunks are processed (coffea executor)."""

    type: Literal["iterative", "futures", "dask"] = "iterative"
    workers: int = Field(default=1, ge=1)
    chunksize: int = Field(default=100_000, ge=1)
    address: str | None = None
    retries: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ExecutorConfig:
        if self.address is not None and self.type != "dask":
            raise _fail("address", f"only allowed with type: dask, got type '{self.type}'")
        return self


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
                raise _fail("init", f"init {self.init} is outside bounds [{lo}, {hi}]")
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
    width: float = 0.0

    @field_validator("var")
    @classmethod
    def _var(cls, v: str) -> str:
        if not _CUT_VAR.match(v):
            raise ValueError(f"invalid variable '{v}'; expected a field name like pt or abs_eta")
        return v

    _width = field_validator("width")(_check_width)


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
    width: float | None = None
    op: Literal[cuts.OPS + ("==",)]  # type: ignore[valid-type]

    @field_validator("width")
    @classmethod
    def _width(cls, v: float | None) -> float | None:
        return v if v is None else _check_width(cls, v)

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

    def effective_width(self) -> float:
        """The width in force: as given, else 1.0 for count cuts (the smoothed integer
        step of :func:`analysis.select.pbinom.integer_step`) and 0.0 (hard) for var cuts."""
        if self.width is not None:
            return self.width
        return 1.0 if getattr(self, "count", None) is not None else 0.0


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

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=False)

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




class HistConfig(_Model):
    """Binning of an observable's histogram in the optimisation plots."""

    bins: int = Field(default=40, ge=1)
    range: tuple[float, float]

    @model_validator(mode="after")
    def _check(self) -> HistConfig:
        if not self.range[0] < self.range[1]:
            raise _fail("range", f"expected [low, high] with low < high, got {list(self.range)}")
        return self


class ObservableConfig(_Model):
    """Statistics of one expression ``x`` (and optionally a second ``y``)."""

    name: str
    x: str
    y: str | None = None
    stats: list[str] = Field(min_length=1)
    hist: HistConfig | None = None
    #: unit of ``x`` for plots (default: from the name or field, e.g. GeV for pt, ht)
    unit: str | None = None

    @field_validator("stats")
    @classmethod
    def _stats(cls, v: list[str]) -> list[str]:
        # Names from the one registry (analysis.stats.registry), read now: never a copy.
        known = [repr(n) for n in registry.names()]
        for i, name in enumerate(v):
            if name not in registry.STATISTICS:
                expected = ", ".join(known[:-1]) + f" or {known[-1]}"
                raise _fail(str(i), f"expected one of {expected}, got {_show(name)}")
        return v

    @field_validator("x", "y")
    @classmethod
    def _expr(cls, v: str | None) -> str | None:
        if v is not None and not (_EXPR.match(v) and v.count("(") == v.count(")")):
            try:
                exprs.parse(v)  # the object-set grammar (checked against sets by Config)
                return v
            except ValueError as err:
                if any(c in v for c in "[+,") or str(err).startswith("unknown function"):
                    raise ValueError(str(err)) from None
            raise ValueError(
                f"invalid expression '{v}'; expected e.g. Jet.pt, abs(Jet.eta), "
                "sum(Jet.pt), count(Jet), MET.pt"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> ObservableConfig:
        pair = [s for s in self.stats if registry.STATISTICS[s].arity == 2]
        if pair and self.y is None:
            raise _fail("stats", f"{', '.join(pair)} need a second expression 'y'")
        return self


class OutputConfig(_Model):
    """Where results are written."""

    dir: str = "results"
    # optimize: the soft objective's Hessian at the final parameters in results.json
    # (a second-order pass, ~10x a step; always there with method: newton)
    hessian: bool = False


class ScheduleConfig(_Model):
    """An optax learning-rate schedule: ``optax.<name>(**kwargs)``."""

    name: str
    kwargs: dict[str, Any] = {}

    _kwargs = field_validator("kwargs")(_finite_kwargs)


class AnnealConfig(_Model):
    """Annealing of cut widths from their configured value to value * final_width_factor."""

    final_width_factor: float = Field(default=0.1, gt=0, le=1)
    schedule: Literal["exponential", "linear", "none"] = "exponential"


class OptimizerConfig(_Model):
    """Optimiser settings for parameter training."""

    name: str = "adam"
    learning_rate: float = Field(default=0.05, gt=0)
    # the learned scores' weights (analysis.optimize.scoreopt); default: learning_rate
    score_learning_rate: float | None = Field(default=None, gt=0)
    steps: int = Field(default=60, ge=0)
    schedule: ScheduleConfig | None = None
    kwargs: dict[str, Any] = {}
    anneal: AnnealConfig = AnnealConfig()

    _kwargs = field_validator("kwargs")(_finite_kwargs)
    tolerance: float = Field(default=1e-4, ge=0)
    window: int = Field(default=5, ge=1)
    stochastic: bool = False
    chunks_per_step: int | None = Field(default=None, ge=1)
    seed: int = 0
    method: Literal["first_order", "newton"] = "first_order"


# One class per objective term (validation and value), told apart by ``type``.
ObjectiveTermConfig = ObjectiveTerm


class ObjectiveConfig(_Model):
    """The objective: a weighted sum of terms."""

    terms: list[ObjectiveTerm] = Field(min_length=1)


class Config(_Model):
    """Top-level configuration. ``base_dir`` and ``source`` are set by the loader."""

    datasets: dict[str, DatasetConfig] = Field(min_length=1)
    executor: ExecutorConfig = ExecutorConfig()
    # Data faults (analysis.data.faults): skip unreadable files/chunks (recorded in results.json)
    # instead of stopping; NaN/inf in a branch read: one-line error, or drop and count them.
    skip_bad_files: bool = False
    nonfinite: Literal["error", "drop"] = "error"
    # Column cache (analysis.data.cache): the first pass's columns serve every later pass;
    # above cache_memory_mb they spill to .npz files in a temporary directory.
    cache: bool = True
    cache_memory_mb: float = Field(default=1024, ge=0)
    parameters: dict[str, ParameterConfig] = {}
    objects: dict[str, ObjectSetConfig] = {}
    selection: SelectionConfig = SelectionConfig()
    observables: list[ObservableConfig] = []
    output: OutputConfig = OutputConfig()
    lumi: float = Field(default=1.0, gt=0)
    objective: ObjectiveConfig | None = None
    optimizer: OptimizerConfig = OptimizerConfig()
    scores: list[ScoreConfig] = []  # learned scores (analysis.config.score)
    # soft histograms, systematic variations, the binned model (analysis.config.likelihood)
    histograms: list[_lk.HistogramConfig] = []
    systematics: list[_lk.SystematicConfig] = []
    likelihood: _lk.LikelihoodConfig | None = None

    _score_params: list | None = PrivateAttr(default=None)
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: str = PrivateAttr(default="<config>")

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths in the config are resolved against."""
        return self._base_dir

    @property
    def source(self) -> str:
        """Where the config came from (file path or "<config>"), for messages."""
        return self._source

    @model_validator(mode="after")
    def _cross_check(self) -> Config:
        if self.objects or self.selection.entries is not None:
            sel = self.selection
            if sel.objects is not None or sel.events:
                raise _fail("selection", "with 'objects:', selection is a list of conditions")
            if not self.objects:
                raise _fail("objects", "a selection list needs object sets under 'objects:'")
            return self._check_sets()
        self._check_single()
        return self._rewrite_single()._check_sets(
            set_key=lambda name: "selection.objects", entry_key="selection.events.{}".format
        )

    def _check_single(self) -> None:
        """What only the single-collection form can get wrong: a count of another
        collection than the selected one."""
        objects = self.selection.objects
        for i, ev in enumerate(self.selection.events):
            if ev.count is not None and (objects is None or ev.count != objects.collection):
                want = f"'{objects.collection}'" if objects else "(no selection.objects given)"
                raise _fail(
                    f"selection.events.{i}.count",
                    f"unknown collection '{ev.count}'; must be the selected collection {want}",
                )

    def _rewrite_single(self) -> Config:
        """The single-collection form as YAML sugar: ``selection: {objects: {collection:
        C, cuts}, events}`` becomes the object set ``C`` (named after its collection, so
        that ``C.pt``, ``sum(C.pt)``, ``count(C)`` read the same in both grammars) and the
        selection list ``events`` (``{count: C, ...}`` counts the set). Nothing after the
        loader knows which form was written."""
        sel = self.selection
        if sel.objects is not None:
            cuts = [c.model_dump() for c in sel.objects.cuts]
            self.objects = {sel.objects.collection: ObjectSetConfig.model_validate(
                {"collection": sel.objects.collection, "cuts": cuts})}
        entries = [SelectionEntryConfig.model_validate(ev.model_dump(exclude_none=True))
                   for ev in sel.events]
        self.selection = SelectionConfig(entries=entries)
        return self

    def _param(self, where: str, name: str | None) -> None:
        if name is not None and name not in self.parameters:
            hint = _suggest(name, list(self.parameters), "defined parameters")
            raise _fail(where, f"unknown parameter '{name}'{hint}")

    def _params(self, where: str, cut: CutKeys) -> None:
        """Every parameter a cut's thresholds name exists."""
        for (_, key), (name, _) in zip(cut.threshold_keys(), cut.thresholds()):
            self._param(f"{where}.{key}", name)

    def _check_sets(
        self, *, set_key=lambda name: f"objects.{name}", entry_key="selection.{}".format
    ) -> Config:
        """Cross-checks of object sets, selection list and observables. ``set_key`` and
        ``entry_key`` give the config location of a set and of an entry (the single form
        is checked after its rewrite, with its own locations)."""
        sel = self.selection
        sets = self.objects
        for name, s in sets.items():
            seen = {name}
            parent = s.from_
            while parent is not None:
                if parent not in sets:
                    hint = _suggest(parent, list(sets), "sets")
                    raise _fail(f"{set_key(name)}.from", f"unknown set '{parent}'{hint}")
                if parent in seen:
                    raise _fail(f"{set_key(name)}.from", f"cycle in 'from' via '{parent}'")
                seen.add(parent)
                parent = sets[parent].from_
            for i, cut in enumerate(s.cuts):
                self._params(f"{set_key(name)}.cuts.{i}", cut)
        self._check_entries(sel.entries or [], entry_key)
        for name, ch in (self.likelihood.channels.items() if self.likelihood else ()):
            self._check_entries(ch.selection, f"likelihood.channels.{name}.selection.{{}}".format)
        _lk.check_likelihood(self, sets)
        self._check_observables(sets)
        for where, msg in check_scores(self):
            raise _fail(where, msg)
        return self

    def _check_entries(self, entries: list, entry_key) -> None:
        """Parameters, sets and branches of selection-list entries exist."""
        sets = self.objects
        for i, entry in enumerate(entries):
            self._params(entry_key(i), entry)
            for name in entry.sets:
                if name not in sets:
                    hint = _suggest(name, list(sets), "sets")
                    raise _fail(f"{entry_key(i)}.count", f"unknown set '{name}'{hint}")
            if entry.count is not None and entry.param is not None:
                init = self.parameters[entry.param].init
                if not float(init).is_integer():
                    raise _fail(f"parameters.{entry.param}.init",
                                f"used by a count, needs an integer init, got {init}")
            if entry.var is not None:
                try:
                    node = exprs.resolve(exprs.parse(entry.var), sets)
                except ValueError as err:
                    raise _fail(f"{entry_key(i)}.var", str(err)) from None
                if node.kind != "branch":
                    raise _fail(f"{entry_key(i)}.var", f"expected a per-event branch (e.g. "
                                f"MET.pt), got '{entry.var}'")

    def _check_observables(self, sets: dict) -> None:
        seen_obs: set[str] = set()
        for i, obs in enumerate(self.observables):
            if obs.name in seen_obs:
                raise _fail(f"observables.{i}.name", f"duplicate observable name '{obs.name}'")
            seen_obs.add(obs.name)
            nodes = {}
            for key in ("x", "y"):
                text = getattr(obs, key)
                if text is None:
                    continue
                try:
                    nodes[key] = exprs.resolve(exprs.parse(text), sets)
                except ValueError as err:
                    raise _fail(f"observables.{i}.{key}", str(err)) from None
            x, y = nodes["x"], nodes.get("y")
            if y is not None and (y.level != x.level or y.sets != x.sets
                                  or y.slots != x.slots or x.kind in ("sum", "count")):
                raise _fail(
                    f"observables.{i}.y",
                    f"'{obs.y}' does not pair with x '{obs.x}' entry by entry (both must be "
                    "fields of one set, of the same indexed objects, or per-event branches)",
                )

    def score_parameters(self) -> list[tuple[str, float, bool]]:
        """``[(name, init, trainable)]`` of the scores' parameters (cached; the weights
        file, if any, is read once): :func:`analysis.config.score.score_parameters`."""
        if self._score_params is None:
            self._score_params = score_parameters(self)
        return self._score_params

    def trainable_names(self) -> list[str]:
        """Names of trainable parameters, in declaration order."""
        return [name for name, p in self.parameters.items() if p.trainable] + [
            n for n, _, t in self.score_parameters() if t]

    def initial_params(self) -> dict[str, float]:
        """Initial values of all parameters (trainable or not), in declaration order."""
        out = {name: float(p.init) for name, p in self.parameters.items()}
        out.update((n, v) for n, v, _ in self.score_parameters())
        return out

    def bounds_of(self, name: str) -> tuple[float, float] | None:
        """Bounds of parameter ``name`` (None if unbounded); KeyError if unknown."""
        if name.startswith(SCORE_PREFIX) and name not in self.parameters:
            return None
        return self.parameters[name].bounds

    def resolve_path(self, path: str) -> str:
        """Resolve a relative file path against ``base_dir``; URLs like ``skhep:x`` are kept."""
        if _URL.match(path) or os.path.isabs(path):
            return path
        return str(self.base_dir / path)


# ---------------------------------------------------------------- error formatting

_TYPE_NAMES = {
    "int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
    "list": "a list", "tuple": "a list", "dict": "a mapping", "model": "a mapping",
    "finite": "a finite number",
}
_LIMITS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _format_error(err: Any) -> str:
    """Turn one pydantic error dict into ``"dotted.location: message"``."""
    typ, ctx = err["type"], err.get("ctx") or {}
    loc = [str(part) for part in err["loc"]]
    # pydantic names the member of a discriminated union in the location
    # (objective.terms.0.target.stat): the config has no such key, drop it.
    loc = [p for i, p in enumerate(loc) if not (i >= 2 and loc[i - 2] == "terms" and p in TERM_TYPES)]
    if len(loc) >= 2 and loc[:2] == ["selection", "entries"]:  # the list form
        del loc[1]
    if loc and loc[-1] == "[key]":  # a non-string mapping key, e.g. a parameter named 1
        loc.pop()
    name = next((p for p in reversed(loc) if not p.isdigit()), "value")
    got = _show(err.get("input"))
    if typ == _ERR:
        loc += [p for p in ctx["where"].split(".") if p]
        msg = ctx["msg"]
    elif typ in ("value_error", "assertion_error"):
        msg = str(ctx.get("error", err["msg"]))
    elif typ == "missing":
        msg = "missing required key"
    elif typ in ("union_tag_invalid", "union_tag_not_found"):
        loc.append(str(ctx.get("discriminator", "type")).strip("'"))
        if typ == "union_tag_not_found":
            msg = "missing required key"
        else:
            msg = f"expected one of {ctx['expected_tags']}, got {_show(ctx['tag'])}"
    elif typ == "literal_error":
        msg = f"expected one of {ctx['expected']}, got {got}"
    elif typ in _LIMITS:
        key, op = _LIMITS[typ]
        msg = f"{name} must be {op} {ctx[key]}, got {got}"
    elif typ == "too_short":
        msg = f"{name} must not be empty"
    else:
        kind = next((v for k, v in _TYPE_NAMES.items() if typ.startswith(k + "_")), None)
        msg = f"expected {kind}, got {got}" if kind else err["msg"]
    where = ".".join(loc) or "(top level)"
    return f"{where}: {msg}".replace("\n", " ")


#: config errors listed by one run (one line each); more are counted
MAX_ERRORS = 20


def config_from_dict(
    data: dict, *, source: str = "<config>", base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed config mapping; raise a one-line ConfigError on problems."""
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else type(data).__name__
        raise ConfigError(f"{source}: top level must be a mapping of keys, got {kind}")
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        # every error of the file, one line each (up to MAX_ERRORS), so that one run
        # shows them all
        lines = list(dict.fromkeys(_format_error(e) for e in exc.errors(include_url=False)))
        shown = [f"{source}: {line}" for line in lines[:MAX_ERRORS]]
        if len(lines) > MAX_ERRORS:
            shown.append(f"{source}: (and {len(lines) - MAX_ERRORS} more errors)")
        raise ConfigError("\n".join(shown)) from None
    cfg._base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
    cfg._source = source
    return cfg


def load_config(path: str | os.PathLike) -> Config:
    """Read, parse and validate a YAML config file."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:  # bounded: `diffcoffea evaluate /dev/zero` must not hang
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes; not a config")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"{source}: cannot read: {reason}") from None
    data = parse_yaml(text, source)
    return config_from_dict(data, source=source, base_dir=Path(source).resolve().parent)
