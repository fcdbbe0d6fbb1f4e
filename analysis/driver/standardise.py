"""The learned scores' input standardisation from a first pass over the data.

A score without ``standardise:`` and without a weights file (``init: {seed: N}``) gets
``z = (x - mean) / std`` with, per input, the mean and standard deviation over every
object of its set's collection (object-level) or every event (event-level) of all
datasets, weighted by the event weight, before any cut: one pass of an auxiliary
config with the same datasets and object sets, no cuts, and the inputs as observables
(``mean``/``std`` of :mod:`analysis.stats`). The values are written into the config
(``scores[i].standardise``), so the run's parameters, checkpoint and ``score_NAME.npz``
carry them. A constant or empty input gets std 1 (:class:`analysis.stats.mlp.Standardisation`).
"""

from __future__ import annotations

from analysis.config.loader import Config, config_from_dict
from analysis.config.score import ScoreStandardConfig
from analysis.driver.runner import Evaluator
from analysis.stats.mlp import Standardisation

__all__ = ["standardise_scores"]


def standardise_scores(config: Config, **evaluator_options) -> Config:
    """``config`` with the missing standardisations filled in (module docstring); the
    same object (changed in place) when there are scores to standardise."""
    todo = [s for s in config.scores if s.standardise is None and s.init.file is None]
    if not todo:
        return config
    data = config.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.update(parameters={}, scores=[], selection=[], output={})
    data.pop("objective", None)
    data["objects"] = {name: {**s, "cuts": []} for name, s in data["objects"].items()}
    data["observables"] = [
        {"name": f"in_{s.score}_{k}", "x": text, "stats": ["mean", "std"]}
        for s in todo for k, text in enumerate(s.mlp.inputs)
    ]
    aux = config_from_dict(data, source=config.source, base_dir=config.base_dir)
    with Evaluator(aux, **evaluator_options) as ev:
        states = ev.run(order=0)
    total = None
    for st in states.values():
        total = st if total is None else total + st
    for s in todo:
        moments = [total.observables[f"in_{s.score}_{k}"]["moments"]
                   for k in range(len(s.mlp.inputs))]
        st = Standardisation.from_moments(moments)
        s.standardise = ScoreStandardConfig(mean=[float(v) for v in st.mean],
                                            std=[float(v) for v in st.std])
    config._score_params = None  # recomputed with the standardisation
    return config
