"""YAML configuration: the one loader and its pydantic v2 schema.

Every problem with a config file is reported as a single-line :class:`ConfigError`
of the form ``"{path}: {dotted.location}: {message}"``.

Where the schema lives (every name is re-exported here): :mod:`analysis.config.inputs`
(datasets, generated files, executor), :mod:`analysis.config.selection` (parameters,
cuts, object sets, event conditions), :mod:`analysis.config.observables`,
:mod:`analysis.config.optimizer` (optimiser, objective, output) and
:mod:`analysis.config.errorformat` (one pydantic error as one line). This module: the
top-level :class:`Config`, :func:`config_from_dict` and :func:`load_config`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from analysis.config import likelihood as _lk
from analysis.config.cutkeys import CutKeys
from analysis.config.errorformat import (  # noqa: F401
    _LIMITS,
    _TYPE_NAMES,
    _format_error,
    format_errors,
)
from analysis.config.inputs import DatasetConfig, EngineConfig, ExecutorConfig, GenerateConfig
from analysis.config.names import check_names
from analysis.config.observables import _EXPR, HistConfig, ObservableConfig  # noqa: F401
from analysis.config.optimizer import (  # noqa: F401  (re-exported)
    AnnealConfig,
    ObjectiveConfig,
    ObjectiveTermConfig,
    OptimizerConfig,
    OutputConfig,
    ScheduleConfig,
    _finite_kwargs,
)
from analysis.config.schema import _ERR, _fail, _Model, _suggest  # noqa: F401
from analysis.config.score import SCORE_PREFIX, ScoreConfig, check_scores, score_parameters
from analysis.config.selection import (  # noqa: F401  (re-exported)
    _CUT_VAR,
    COUNT_OPS,
    CutConfig,
    EventCutConfig,
    ObjectSelectionConfig,
    ObjectSetConfig,
    Op,
    ParameterConfig,
    SelectionConfig,
    SelectionEntryConfig,
    _check_width,
    _EventCondition,
    _one_of,
)
from analysis.config.yamlsafe import MAX_CONFIG_BYTES, parse_yaml
from analysis.config.yamlsafe import show_value as _show  # noqa: F401
from analysis.errors import ConfigError
from analysis.limits import regular_file
from analysis.select import exprs

__all__ = [
    "AnnealConfig", "Config", "ConfigError", "CutConfig", "DatasetConfig", "EventCutConfig",
    "EngineConfig", "ExecutorConfig", "GenerateConfig", "HistConfig", "ObjectiveConfig", "ObjectiveTermConfig", "ObjectSelectionConfig",
    "ObjectSetConfig", "ObservableConfig", "OptimizerConfig", "SelectionEntryConfig", "OutputConfig", "ParameterConfig", "ScheduleConfig",
    "SelectionConfig", "config_from_dict", "load_config", "parse_yaml",
]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # skhep:, root://, https://, ...


class Config(_Model):
    """Top-level configuration. ``base_dir`` and ``source`` are set by the loader."""

    datasets: dict[str, DatasetConfig] = Field(min_length=1)
    executor: ExecutorConfig = ExecutorConfig()
    engine: EngineConfig = EngineConfig()  # backend and device (analysis.pipeline.backend)
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
        check_names(self)  # names that become paths, ROOT keys, datacard tokens
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

    def learned_parameters(self) -> list[tuple[str, float, bool]]:
        """``[(name, init, trainable)]`` after the declared parameters: the scores'
        (:meth:`score_parameters`), then the histograms' trainable interior edges
        ``NAME.edges[i]`` (:func:`analysis.config.likelihood.edge_parameters`)."""
        return self.score_parameters() + _lk.edge_parameters(self)

    def trainable_names(self) -> list[str]:
        """Names of trainable parameters, in declaration order."""
        return [name for name, p in self.parameters.items() if p.trainable] + [
            n for n, _, t in self.learned_parameters() if t]

    def initial_params(self) -> dict[str, float]:
        """Initial values of all parameters (trainable or not), in declaration order."""
        out = {name: float(p.init) for name, p in self.parameters.items()}
        out.update((n, v) for n, v, _ in self.learned_parameters())
        return out

    def bounds_of(self, name: str) -> tuple[float, float] | None:
        """Bounds of parameter ``name`` (None if unbounded: a score's weights; trainable
        edges, kept in order by the optimiser's parametrisation); KeyError if unknown."""
        if name.startswith(SCORE_PREFIX) and name not in self.parameters:
            return None
        if name not in self.parameters and _lk.is_edge_parameter(self, name):
            return None
        return self.parameters[name].bounds

    def resolve_path(self, path: str) -> str:
        """Resolve a relative file path against ``base_dir``; URLs like ``skhep:x`` are kept."""
        if _URL.match(path) or os.path.isabs(path):
            return path
        return str(self.base_dir / path)




#: config errors listed by one run (one line each); more are counted
MAX_ERRORS = 20


def config_from_dict(
    data: dict, *, source: str = "<config>", base_dir: Path | None = None
) -> Config:
    """Validate an already-parsed config mapping; raise a one-line ConfigError on problems."""
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else type(data).__name__
        raise ConfigError(f"{source}: top level must be a mapping of keys, got {kind}")
    if "datasets" in data:  # a coffea fileset (JSON path or inline): the config's layout
        from analysis.config.fileset import expand_datasets

        data = {**data, "datasets": expand_datasets(data["datasets"], source=source,
                                                    base_dir=base_dir)}
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        # every error of the file, one line each (up to MAX_ERRORS), so that one run
        # shows them all
        lines = format_errors(exc.errors(include_url=False))
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
    if os.path.lexists(source):  # a FIFO, a device, a directory, a loop: one line, at once
        regular_file(source, "config file", max_bytes=sys.maxsize)
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
