"""The ``scores:`` section: learned scores (small equinox MLPs) cut softly like any variable.

YAML (object-set form only)::

    scores:
      - score: tag                       # cut as {var: score.tag, ...}
        mlp: {inputs: [jets.pt, abs(jets.eta), jets.btagDeepFlavB],
              hidden: [16, 16], activation: tanh}
        init: {seed: 1}                  # or {file: weights.npz} (numpy npz, no pickle)
        standardise: {mean: [...], std: [...]}   # optional, else from the weights file,
                                                 # else from a first pass (see README)
        trainable: true

An **object-level** score has inputs that are fields of one object set ``S``
(``S.f``, ``abs(S.f)``): one value per object of ``S``'s collection, cut in that
set's (or a set derived from it) ``cuts`` as ``{var: score.tag, ...}``. An
**event-level** score has per-event branches as inputs (``MET.pt``), cut in the
``selection`` list as ``{var: score.NAME, ...}``.

The network's weights are parameters of the plan, named
``score.NAME.layers.I.weight[o,i]`` / ``score.NAME.layers.I.bias[o]``
(:mod:`analysis.stats._params` names, after the ``parameters:`` entries, unbounded);
the standardisation is ``score.NAME.mean[k]`` / ``score.NAME.std[k]``, never
trainable. :func:`score_parameters` gives their names, initial values and
trainability (a missing file, a misshapen or non-finite weight: one-line
:class:`~analysis.errors.InputError`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from analysis.config.schema import ConfigModel, _fail
from analysis.limits import MAX_LAYERS, MAX_SCORE_PARAMETERS, MAX_SEED
from analysis.select import exprs
from analysis.spec.activations import ACTIVATION_NAMES

if TYPE_CHECKING:
    from analysis.stats.mlp import MLP, Standardisation

__all__ = [
    "SCORE_PREFIX",
    "MLPConfig",
    "ScoreConfig",
    "ScoreInitConfig",
    "ScoreStandardConfig",
    "check_scores",
    "score_inputs",
    "score_parameters",
    "template",
]

SCORE_PREFIX = "score."
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MLPConfig(ConfigModel):
    """``inputs`` (expressions), ``hidden`` widths, ``activation``."""

    inputs: list[str] = Field(min_length=1)
    hidden: list[int] = [16, 16]
    activation: Literal[ACTIVATION_NAMES] = "tanh"  # type: ignore[valid-type]

    @field_validator("hidden")
    @classmethod
    def _hidden(cls, v: list[int]) -> list[int]:
        if any(h < 1 for h in v):
            raise ValueError(f"expected widths >= 1, got {v}")
        if len(v) > MAX_LAYERS:
            raise ValueError(f"{len(v)} hidden layers; at most {MAX_LAYERS} (the bound of "
                             "docs/guide/limits.md)")
        return v

    @model_validator(mode="after")
    def _size(self) -> MLPConfig:
        n = n_weights(len(self.inputs), self.hidden)
        if n > MAX_SCORE_PARAMETERS:  # checked before any weight is allocated
            raise _fail("hidden", f"{self.hidden} with {len(self.inputs)} inputs has {n} "
                        f"weights; at most {MAX_SCORE_PARAMETERS} (docs/guide/limits.md)")
        return self


def n_weights(n_inputs: int, hidden: list[int]) -> int:
    """Weights and biases of an MLP ``n_inputs -> hidden... -> 1``."""
    widths = [n_inputs, *hidden, 1]
    return sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))


class ScoreInitConfig(ConfigModel):
    """``{seed: N}`` (equinox's initialisation) or ``{file: weights.npz}``."""

    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    file: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ScoreInitConfig:
        if (self.seed is None) == (self.file is None):
            raise ValueError("give exactly one of 'seed' or 'file'")
        return self


class ScoreStandardConfig(ConfigModel):
    """Per-input ``mean`` and ``std`` of the standardisation ``z = (x - mean) / std``."""

    mean: list[float]
    std: list[float]


class ScoreConfig(ConfigModel):
    """One learned score (module docstring)."""

    score: str
    mlp: MLPConfig
    init: ScoreInitConfig = ScoreInitConfig(seed=0)
    standardise: ScoreStandardConfig | None = None
    trainable: bool = True

    @field_validator("score")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"invalid score name '{v}'; expected a name like tag or nn_1")
        return v

    @model_validator(mode="after")
    def _lengths(self) -> ScoreConfig:
        n = len(self.mlp.inputs)
        if self.standardise is not None:
            for key in ("mean", "std"):
                if len(getattr(self.standardise, key)) != n:
                    raise ValueError(f"standardise.{key}: expected {n} values (one per input), "
                                     f"got {len(getattr(self.standardise, key))}")
            if any(s <= 0 for s in self.standardise.std):
                raise ValueError("standardise.std: expected values > 0")
        return self


def score_inputs(cfg: ScoreConfig, sets: dict) -> tuple[str | None, tuple[exprs.Node, ...]]:
    """``(set or None, resolved input nodes)``: the set of an object-level score, ``None``
    for an event-level one; ``ValueError`` with the reason otherwise."""
    nodes = tuple(exprs.resolve(exprs.parse(t), sets) for t in cfg.mlp.inputs)
    kinds = {n.kind for n in nodes}
    if kinds == {"branch"}:
        return None, nodes
    if kinds == {"field"} and len({n.head for n in nodes}) == 1:
        return nodes[0].head, nodes
    raise ValueError(
        "expected inputs that are all fields of one object set (jets.pt, abs(jets.eta)) "
        f"or all per-event branches (MET.pt), got {', '.join(cfg.mlp.inputs)}"
    )


def check_scores(config: Any) -> list[tuple[str, str]]:
    """Cross-checks of ``config.scores``: ``[(where, message)]`` of the first problem
    (empty when fine). Names unique, inputs resolvable, every ``score.NAME`` cut names a
    score of the right level (an object cut: a score of that set or an ancestor)."""
    sets = config.objects
    level: dict[str, str | None] = {}
    for i, s in enumerate(config.scores):
        if s.score in level:
            return [(f"scores.{i}.score", f"duplicate score name '{s.score}'")]
        try:
            level[s.score] = score_inputs(s, sets)[0]
        except ValueError as err:
            return [(f"scores.{i}.mlp.inputs", str(err))]

    def unknown(name: str) -> str:
        known = ", ".join(level) or "(none)"
        return f"unknown score '{name}'; scores: {known}"

    for name, s in sets.items():
        chain, p = [], name
        while p is not None:
            chain.append(p)
            p = sets[p].from_
        for i, cut in enumerate(s.cuts):
            if not cut.var.startswith(SCORE_PREFIX):
                continue
            sname = cut.var[len(SCORE_PREFIX):]
            if sname not in level:
                return [(f"objects.{name}.cuts.{i}.var", unknown(sname))]
            if level[sname] is None or level[sname] not in chain:
                return [(f"objects.{name}.cuts.{i}.var",
                         f"score '{sname}' is not a score of the objects of set '{name}' "
                         f"(its inputs are {'per event' if level[sname] is None else 'of set ' + repr(level[sname])})")]
    for i, entry in enumerate(config.selection.entries or []):
        if entry.var is not None and entry.var.startswith(SCORE_PREFIX):
            sname = entry.var[len(SCORE_PREFIX):]
            if sname not in level:
                return [(f"selection.{i}.var", unknown(sname))]
            if level[sname] is not None:
                return [(f"selection.{i}.var", f"score '{sname}' is per object of set "
                         f"'{level[sname]}'; cut it in objects.{level[sname]}.cuts")]
    for i, obs in enumerate(config.observables):
        for key in ("x", "y"):
            text = (getattr(obs, key) or "").replace(" ", "")
            if text.startswith(SCORE_PREFIX):
                sname = text[len(SCORE_PREFIX):]
                if sname not in level:
                    return [(f"observables.{i}.{key}", unknown(sname))]
                if level[sname] is not None:
                    return [(f"observables.{i}.{key}", f"score '{sname}' is per object; "
                             "only an event-level score is an observable (score.NAME)")]
    return []


@lru_cache(maxsize=64)
def template(n_inputs: int, hidden: tuple[int, ...], activation: str) -> MLP:
    """A network of this architecture (its weights are placeholders: the shapes and the
    pytree structure are what the kernel reuses)."""
    from analysis.stats.mlp import mlp  # here: the schema is checked without JAX

    return mlp(n_inputs, hidden=hidden, activation=activation, seed=0)


def _initial(cfg: ScoreConfig, resolve_path) -> tuple[MLP, Standardisation]:
    import numpy as np

    from analysis.stats.mlp import Standardisation, mlp

    n = len(cfg.mlp.inputs)
    like = template(n, tuple(cfg.mlp.hidden), cfg.mlp.activation)
    standard = None
    if cfg.init.file is not None:
        from analysis.select.weights import load_weights

        net, standard = load_weights(resolve_path(cfg.init.file), like)
    else:
        net = mlp(n, hidden=tuple(cfg.mlp.hidden), activation=cfg.mlp.activation,
                  seed=cfg.init.seed)
    if cfg.standardise is not None:
        standard = Standardisation(np.asarray(cfg.standardise.mean, dtype=np.float64),
                                   np.asarray(cfg.standardise.std, dtype=np.float64))
    return net, standard if standard is not None else Standardisation.identity(n)


def score_parameters(config: Any) -> list[tuple[str, float, bool]]:
    """``[(name, initial value, trainable)]`` of every score's parameters, in plan order:
    per score its weights (:func:`analysis.stats.mlp.to_arrays` order, raveled) then its
    standardisation ``mean[k]``, ``std[k]`` (never trainable)."""
    import numpy as np

    from analysis.stats.mlp import to_arrays

    out: list[tuple[str, float, bool]] = []
    for cfg in config.scores:
        net, standard = _initial(cfg, config.resolve_path)
        prefix = f"{SCORE_PREFIX}{cfg.score}."
        for key, a in to_arrays(net).items():
            for idx in np.ndindex(*a.shape):
                out.append((f"{prefix}{key}[{','.join(map(str, idx))}]", float(a[idx]),
                            cfg.trainable))
        for key, a in (("mean", standard.mean), ("std", standard.std)):
            for k, v in enumerate(np.asarray(a, dtype=np.float64)):
                out.append((f"{prefix}{key}[{k}]", float(v), False))
    return out
