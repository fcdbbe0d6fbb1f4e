"""Backends (analysis.pipeline.backend): the choice is a contract (YAML ``engine: {backend,
device}``, ``--backend``, ``backend=``/``device=`` keywords), the JAX backend computes what
the numba backend computes (1e-12, states and Jacobians), and which kernel ran is seen,
not assumed (the JAX kernel's entry point is counted)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict, load_config
from analysis.driver.runner import Evaluator
from analysis.errors import ConfigError, InputError
from analysis.pipeline.backend import Backend, devices
from analysis.pipeline.backends.jax import passes as kernel
from tests.conftest import one_line_error
from tests.reference.states import flatten

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
HAS_GPU = bool(devices("gpu"))


def _counting(monkeypatch) -> list[int]:
    """Count the JAX kernel's chunk evaluations (kernel.evaluate_chunk)."""
    calls = [0]
    real = kernel.evaluate_chunk

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "evaluate_chunk", counted)
    return calls


def _leaves(tree) -> dict:
    """``flatten`` with a soft histogram's arrays as leaves of their own."""
    from analysis.stats import Histogram

    out = {}
    for key, leaf in flatten(tree):
        if isinstance(leaf, Histogram):
            for field in ("sumw_flow", "sumw2_flow"):
                out[f"{key}/{field}"] = getattr(leaf, field)
        else:
            out[key] = leaf
    return out


def _assert_states_equal(a: dict, b: dict, rtol: float = 1e-12) -> int:
    """Every value and Jacobian leaf of two ``{dataset: DatasetState}`` equal to ``rtol``."""
    assert a.keys() == b.keys()
    n = 0
    for name in a:
        for part in ("value", "jac"):
            fa = _leaves(getattr(a[name].derived, part))
            fb = _leaves(getattr(b[name].derived, part))
            assert fa.keys() == fb.keys(), (name, part)
            for key in fa:
                if fa[key] is None:
                    assert fb[key] is None
                    continue
                x, y = np.asarray(fa[key], float), np.asarray(fb[key], float)
                scale = max(float(np.max(np.abs(x), initial=0.0)), 1e-300)
                # a mean is center + dmean: dmean's digits are relative to the mean
                center = fa.get(key.replace("dmean", "center"))
                if "dmean" in key and center is not None:
                    scale = max(scale, float(np.max(np.abs(np.asarray(center, float)),
                                                    initial=0.0)))
                np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale,
                                           err_msg=f"{name} {part} {key}", equal_nan=True)
                n += 1
    return n


def test_backend_values_are_checked():
    assert Backend().engine == "auto" and Backend("numba").engine == "numba"
    assert Backend("auto", "gpu").engine == "jax"  # the numba kernels run on the CPU only
    with pytest.raises(ValueError, match="backend must be one of auto, numba, jax, got 'cuda'"):
        Backend("cuda")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device must be one of cpu, gpu, got 'tpu'"):
        Backend("jax", "tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend 'numba' runs on the CPU only"):
        Backend("numba", "gpu")


@pytest.mark.parametrize(("engine", "message"), [
    ({"backend": "cuda"}, r"^c\.yaml: engine\.backend: .*'auto', 'numba' or 'jax'"),
    ({"device": "tpu"}, r"^c\.yaml: engine\.device: .*'cpu' or 'gpu'"),
    ({"backend": "numba", "device": "gpu"}, r"^c\.yaml: engine\.device: backend 'numba' runs on "
                                            r"the CPU only"),
    ({"backnd": "jax"}, r"^c\.yaml: engine\.backnd: unknown key; did you mean 'backend'\?"),
])
def test_engine_config_errors_are_one_line(engine, message):
    data = yaml.safe_load((CONFIGS / "ttbar.yaml").read_text())
    with pytest.raises(ConfigError, match=message) as info:
        config_from_dict({**data, "engine": engine}, source="c.yaml")
    assert "\n" not in str(info.value)


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_a_device_jax_does_not_see_is_one_line_before_any_pass(tmp_path, capsys):
    data = yaml.safe_load((CONFIGS / "ttbar.yaml").read_text())
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump({**data, "engine": {"backend": "jax", "device": "gpu"}}))
    with pytest.raises(InputError, match=r"engine: device 'gpu' asked for, but JAX sees none"):
        Evaluator(load_config(path))
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "out")]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "gpu.yaml: engine: device 'gpu' asked for" in line


def test_jax_backend_equals_numba_and_runs_the_jax_kernel(monkeypatch):
    """configs/ttbar.yaml on the real CMS file, 4 chunks: the same states and Jacobians
    from both backends; the JAX kernel runs for every chunk with ``backend="jax"`` and
    for none with ``backend="numba"`` (ignoring the choice fails this test)."""
    config = load_config(CONFIGS / "ttbar.yaml")
    calls = _counting(monkeypatch)
    with Evaluator(config, chunksize=50, backend="numba") as ev:
        numba = ev.run(order=1)
    assert calls[0] == 0
    with Evaluator(config, chunksize=50, backend="jax") as ev:
        assert ev.backend == Backend("jax", "cpu")
        jaxed = ev.run(order=1)
    assert calls[0] == 4  # one per chunk (200 events, chunks of 50)
    assert _assert_states_equal(numba, jaxed) > 20


def test_cli_backend_overrides_the_config(tmp_path, monkeypatch):
    data = yaml.safe_load((CONFIGS / "ttbar.yaml").read_text())
    path = tmp_path / "numba.yaml"
    path.write_text(yaml.safe_dump({**data, "engine": {"backend": "numba"}}))
    calls = _counting(monkeypatch)
    assert main(["evaluate", str(path), "--quiet", "-o", str(tmp_path / "a")]) == 0
    assert calls[0] == 0
    assert main(["evaluate", str(path), "--quiet", "--backend", "jax",
                 "-o", str(tmp_path / "b")]) == 0
    assert calls[0] > 0
    a = json.loads((tmp_path / "a" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "results.json").read_text())
    sa, sb = a["datasets"]["ttbar"], b["datasets"]["ttbar"]
    assert sa["selected_sumw"] == pytest.approx(sb["selected_sumw"], rel=1e-12)
    mean_a, mean_b = sa["observables"]["jet_pt"]["mean"], sb["observables"]["jet_pt"]["mean"]
    assert mean_a["value"] == pytest.approx(mean_b["value"], rel=1e-12)
    for name, g in mean_a["grad"].items():
        assert g == pytest.approx(mean_b["grad"][name], rel=1e-11)


def _shrunk(name: str, tmp_path: Path, shared_data: Path) -> Path:
    """configs/NAME with generated datasets of 3,000 events under tmp_path and paths into
    ../shared absolute (the config is written elsewhere)."""
    data = yaml.safe_load((CONFIGS / name).read_text())
    for ds_name, ds in data["datasets"].items():
        gen = ds.get("generate")
        if gen:
            gen.update(events=3000, files=1, dir=str(tmp_path / "gen" / ds_name))
        if ds.get("files"):
            ds["files"] = [str(shared_data / Path(f).name) if "shared/data" in f else f
                           for f in ds["files"]]
        for key in ("weights",):
            if key in ds:
                ds[key] = str((CONFIGS / ds[key]).resolve())
    for score in data.get("scores", []):
        if "weights" in score:
            score["weights"] = str((CONFIGS / score["weights"]).resolve())
    out = tmp_path / name
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_gives_the_same_states_on_both_backends(name, tmp_path,
                                                                     shared_data):
    config = load_config(_shrunk(name, tmp_path, shared_data))
    if config.scores:  # values only: ~1,000 score parameters (their Jacobian: reverse mode)
        from analysis.driver.standardise import standardise_scores

        standardise_scores(config)
    order = 0 if config.scores else 1
    with Evaluator(config, backend="auto") as ev:
        auto = ev.run(order=order)
    with Evaluator(config, backend="jax") as ev:
        jaxed = ev.run(order=order)
    assert _assert_states_equal(auto, jaxed) > 0


@pytest.mark.skipif(not HAS_GPU, reason="no GPU: the JAX backend on a GPU is checked where one is")
def test_jax_backend_on_a_gpu_equals_the_cpu():
    config = load_config(CONFIGS / "ttbar.yaml")
    with Evaluator(config, chunksize=50, backend="jax", device="cpu") as ev:
        cpu = ev.run(order=1)
    with Evaluator(config, chunksize=50, backend="jax", device="gpu") as ev:
        gpu = ev.run(order=1)
    assert _assert_states_equal(cpu, gpu, rtol=1e-10) > 20


def test_loop_options_are_keyword_only_and_reach_the_kernels(monkeypatch):
    """``Backend(fused=False, value_loop=False)`` (options, not module globals): the
    general walk runs instead of the fused loop, seen by counting the kernels compiled
    for the selection, and every state is the same (1e-12)."""
    from analysis.pipeline.backends.numba.kernels import _numba_dp, _numba_hist
    from analysis.select import chainwalk

    with pytest.raises(TypeError):
        Backend("auto", "cpu", False)  # type: ignore[misc]
    assert Backend() == Backend(fused=True, value_loop=True, scores_on_numba=True,
                                numba_reverse=True)
    assert "options" not in Backend().describe()
    assert Backend(numba_reverse=False).describe().endswith("; options numba_reverse=False")
    ran: list = []  # the kernels compiled; the walk in its lanes as "lanes"
    real = _numba_dp.compiled
    monkeypatch.setattr(_numba_dp, "compiled", lambda k, a: ran.append(
        "lanes" if k is _numba_hist.walk and not isinstance(a[4], float) else k) or real(k, a))
    config = load_config(CONFIGS / "ttbar.yaml")
    with Evaluator(config, chunksize=100, backend="numba") as ev:
        fast = ev.run(order=0)
    assert ran and "lanes" not in ran  # the fused loop or the walk without tangents
    ran.clear()
    with Evaluator(config, chunksize=100,
                   backend=Backend("numba", fused=False, value_loop=False)) as ev:
        general = ev.run(order=0)
    assert "lanes" in ran and chainwalk.cut_walk not in ran
    assert _assert_states_equal(fast, general) > 10
