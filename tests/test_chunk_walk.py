"""A chunk walks from the processor down through the layers without climbing back.

``tests/test_layers.py`` checks the import statements; this checks the calls of one real
chunk through ``DiffProcessor.process`` (the YAML pipeline's processor, on the numba
kernel and on the JAX kernel): every call from one of our modules into another lands in
the same layer or a lower one (:data:`tests.test_layers.LAYERS`), so no lower layer
calls back up (the pipeline into the data layer, a kernel into the processor) and the
chunk never returns, by a call, to a layer it has left. The one way up is a callback:
a function that a higher layer handed down and the lower one calls, as ``jax.grad``
calls its argument (``analysis.data.faults.guarded`` wrapping ``process``,
``analysis.stats.taylor`` differentiating a kernel): the callee is a value the caller
holds (an argument or a closed-over name), not a name it imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from processors import DiffProcessor
from tests.chunked_helpers import analysis_config, read_events
from tests.test_layers import REPO, _layer

ROOTS = (str(REPO / "analysis") + "/", str(REPO / "processors") + "/")


def _module(filename: str) -> str | None:
    if not filename.startswith(ROOTS):
        return None
    parts = list(Path(filename).relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _held(frame, code) -> bool:
    """Whether the function running ``code`` is a value ``frame`` holds (a callback)."""
    for value in frame.f_locals.values():
        func = getattr(value, "__func__", value)
        if getattr(func, "__code__", None) is code:
            return True
    return False


def _calls(fn) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(calls, callbacks)``: ``(caller module, callee module)`` of every call between two
    of our modules that is not a callback, and of the callbacks that go up a layer."""
    seen: set[tuple[str, str]] = set()
    back: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee = _module(frame.f_code.co_filename)
        caller = _module(frame.f_back.f_code.co_filename)
        if callee and caller and callee != caller:
            up = _layer(callee) > _layer(caller)
            if up and _held(frame.f_back, frame.f_code):
                back.add((caller, callee))
            else:
                seen.add((caller, callee))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return sorted(seen), sorted(back)


@pytest.mark.parametrize("engine", ["numba", "jax"])
def test_a_chunk_only_calls_down(shared_data, engine) -> None:
    from analysis.config.loader import config_from_dict
    from analysis.pipeline.backend import Backend
    from analysis.pipeline.job import Job
    from analysis.pipeline.plan import build_plan, initial_widths
    from analysis.pipeline.request import Request

    config = config_from_dict(analysis_config())
    plan = build_plan(config)
    theta = [config.parameters[name].init for name in plan.param_names]
    events = read_events(shared_data / "nanoAOD_2015_CMS_Open_Data_ttbar.root")[:40]
    events.metadata["dataset"] = "ttbar"
    # engine "jax": the JAX kernel for every plan (the numba hosts never asked)
    proc = DiffProcessor(Job(plan, Request(theta, initial_widths(config), order=1),
                             {"ttbar": "genWeight"},
                             backend=Backend("jax" if engine == "jax" else "auto")))
    calls, callbacks = _calls(lambda: proc.process(events))
    modules = {m for pair in calls for m in pair}
    assert "processors.diff_processor" in modules and "analysis.pipeline.engine" in modules
    assert "analysis.pipeline.backend" not in modules  # chosen once, when the pass was built
    ran = {m.split(".")[3] for m in modules if m.startswith("analysis.pipeline.backends.")}
    assert ran == {engine}  # one backend computes the chunk
    up = [(a, b) for a, b in calls if _layer(b) > _layer(a)]
    assert not up, f"calls up a layer: {up}"
    # the decorator that runs the chunk under the fault policy calls the processor back
    assert ("analysis.data.faults", "processors.diff_processor") in callbacks
