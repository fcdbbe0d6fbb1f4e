"""No code from data: checkpoints are data only, validated on --resume; crafted pickles are
refused without being loaded; the ``python`` term is looked up in the config's directory
first, then ``sys.path``, the same for every entry point."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from analysis.cli.parser import main
from analysis.config.loader import ConfigError
from analysis.config.terms import _import_function
from analysis.optimize import checkpoint as C
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config

NAMES = ("a", "b", "c")


class _Payload:
    """Unpickling this creates ``marker``: proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _adam_state(u):
    return optax.adam(0.05).init(jnp.asarray(u))


def _save(path: Path, *, opt_state=None, names=NAMES, config=None, step=2, fingerprint="f1"):
    u = np.array([0.25, 0.5, 0.75])
    history = [{"step": k, "objective": -1.0 - k, "significance": None,
                "parameters": dict.fromkeys(names or NAMES, 1.0)} for k in range(step)]
    C.save_checkpoint(
        path,
        {
            "fingerprint": fingerprint,
            "names": names,
            "config": config or {"optimizer": {"learning_rate": 0.05, "steps": 6}},
            "step": step,
            "u": u,
            "opt_state": _adam_state(u) if opt_state is None else opt_state,
            "history": history,
            "converged": False,
        },
    )
    return u, history


def test_round_trip_rebuilds_the_optax_state(tmp_path):
    u = np.array([0.25, 0.5, 0.75])
    opt = optax.adam(0.05)
    state = opt.init(jnp.asarray(u))
    _, state = opt.update(jnp.asarray([0.1, -0.2, 0.3]), state, jnp.asarray(u))
    path = tmp_path / C.CHECKPOINT
    _, history = _save(path, opt_state=state)
    assert not list(tmp_path.glob("*.tmp"))
    fresh = opt.init(jnp.asarray(u))
    data = C.load_checkpoint(path, "f1", like=fresh, names=NAMES)
    assert data["step"] == 2 and data["history"] == history
    np.testing.assert_array_equal(data["u"], u)
    assert jax.tree_util.tree_structure(data["opt_state"]) == jax.tree_util.tree_structure(state)
    for a, b in zip(jax.tree_util.tree_leaves(data["opt_state"]), jax.tree_util.tree_leaves(state)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The file is a plain .npz that numpy reads without pickle.
    with np.load(path, allow_pickle=False) as npz:
        assert set(npz.files) >= {"state", "u", "opt_0"}


def test_newton_state_with_nones_round_trips(tmp_path):
    state = {
        "radius": np.float64(0.1),
        "u": np.ones(3),
        "obj": np.float64(-2.0),
        "g": None,
        "h": np.eye(3),
        "d": None,
        "pred": np.float64(0.5),
    }
    path = tmp_path / C.CHECKPOINT
    _save(path, opt_state=state)
    like = dict.fromkeys(state)
    back = C.load_checkpoint(path, "f1", like=like, names=NAMES)["opt_state"]
    assert back["g"] is None and back["d"] is None
    np.testing.assert_array_equal(back["h"], np.eye(3))
    assert float(back["obj"]) == -2.0


def test_crafted_pickle_is_refused_never_loaded(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / C.CHECKPOINT
    path.write_bytes(pickle.dumps({"step": 1, "x": _Payload(marker)}))
    with pytest.raises(C.CheckpointError, match="a pickle.*refused") as info:
        C.load_checkpoint(path, "f1")
    assert not marker.exists()
    assert "\n" not in str(info.value)
    # Sanity: the payload does run when unpickled (so the test above can fail).
    pickle.loads(path.read_bytes())
    assert marker.exists()


def test_object_array_inside_the_npz_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / C.CHECKPOINT
    _save(path)
    arrays = dict(np.load(path, allow_pickle=False))
    arrays["u"] = np.array([_Payload(marker)], dtype=object)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(C.CheckpointError, match="unreadable checkpoint"):
        C.load_checkpoint(path, "f1")
    assert not marker.exists()


def test_legacy_pickle_checkpoint_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / C.LEGACY_CHECKPOINT).write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(C.CheckpointError, match="old pickle checkpoint refused"):
        C.load_checkpoint(tmp_path / C.CHECKPOINT, "f1")
    assert not marker.exists()


def test_wrong_structure_is_one_line(tmp_path):
    u = np.array([0.25, 0.5, 0.75])
    path = tmp_path / C.CHECKPOINT
    _save(path)
    # A different optimiser: its state has another number of arrays.
    sgd = optax.sgd(0.1, momentum=0.9).init(jnp.asarray(u))
    with pytest.raises(C.CheckpointError, match="optimiser state has 3 arrays.*needs 1"):
        C.load_checkpoint(path, "f1", like=sgd, names=NAMES)
    # Same optimiser, other shapes (a fourth parameter).
    with pytest.raises(C.CheckpointError, match=r"float64\[3\], expected float64\[4\]"):
        C.load_checkpoint(path, "f1", like=_adam_state(np.zeros(4)), names=NAMES)
    # Newton's mapping where adam's state is expected.
    with pytest.raises(C.CheckpointError, match="does not match the configured method"):
        C.load_checkpoint(path, "f1", like={"radius": None}, names=NAMES)
    # History and step disagree: a hand-edited or corrupt file.
    arrays = dict(np.load(path, allow_pickle=False))
    arrays["state"] = np.frombuffer(
        arrays["state"].tobytes().replace(b'"step": 2', b'"step": 5'), np.uint8
    )
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(C.CheckpointError, match="step 5 with 2 history entries"):
        C.load_checkpoint(path, "f1", like=_adam_state(u), names=NAMES)
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(C.CheckpointError, match="unreadable checkpoint"):
        C.load_checkpoint(path, "f1")


def test_changed_parameters_and_config_are_named(tmp_path):
    u = np.array([0.25, 0.5, 0.75])
    path = tmp_path / C.CHECKPOINT
    _save(path)
    with pytest.raises(
        C.CheckpointError,
        match="trainable parameters differ: a, b, c in the checkpoint, a, b, d now",
    ):
        C.load_checkpoint(path, "f1", like=_adam_state(u), names=("a", "b", "d"))
    now = {"optimizer": {"learning_rate": 0.01, "steps": 6}}
    with pytest.raises(C.CheckpointError) as info:
        C.load_checkpoint(path, "f2", like=_adam_state(u), names=NAMES, config=now)
    msg = str(info.value)
    assert "different config" in msg
    assert "optimizer.learning_rate: 0.05 in the checkpoint, 0.01 now" in msg


@pytest.fixture(scope="module")
def data(small_data) -> Path:
    return small_data


def test_resume_from_a_crafted_pickle_on_the_command_line(data, tmp_path, capsys):
    config = write_config(tmp_path / "opt.yaml", H.config_dict(data))
    out = tmp_path / "out"
    out.mkdir()
    marker = tmp_path / "pwned"
    argv = ["optimize", str(config), "-o", str(out), "--quiet", "--no-plots"]
    for name in (C.CHECKPOINT, C.LEGACY_CHECKPOINT):
        (out / name).write_bytes(pickle.dumps(_Payload(marker)))
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 2
        line = one_line_error(capsys.readouterr().err)
        assert name in line and "refused" in line
        assert not marker.exists()
        # Without --resume the file is not silently deleted either.
        assert main(argv) == 2
        line = one_line_error(capsys.readouterr().err)
        assert name in line and "--resume" in line and "--overwrite" in line
        assert (out / name).exists() and not marker.exists()
        (out / name).unlink()


# --- the python term's lookup ---------------------------------------------------------


def _module(directory: Path, name: str, value: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(f"def loss(stats):\n    return {value!r}\n")


@pytest.mark.parametrize(
    "entry",
    [["/venv/bin/diffcoffea", "evaluate"], ["/repo/analysis/__main__.py", "evaluate"]],
    ids=["diffcoffea", "python -m analysis"],
)
def test_python_term_lookup_is_config_dir_then_sys_path(tmp_path, monkeypatch, entry):
    confdir, cwd, elsewhere = tmp_path / "conf", tmp_path / "cwd", tmp_path / "site"
    _module(confdir, "h10_both", "config dir")
    _module(elsewhere, "h10_both", "sys.path")
    _module(elsewhere, "h10_site", "sys.path")
    _module(cwd, "h10_cwd", "cwd")
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", entry)
    # sys.path[0] is the entry point's own directory: the cwd for -m, bin/ for the script.
    first = str(cwd) if entry[0].endswith("__main__.py") else "/venv/bin"
    monkeypatch.setattr(sys, "path", [first, *sys.path, str(elsewhere)])
    for name in ("h10_both", "h10_site", "h10_cwd"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    assert _import_function("h10_both:loss", "w", confdir)({}) == "config dir"
    assert _import_function("h10_site:loss", "w", confdir)({}) == "sys.path"
    # The working directory is not looked in, whichever the entry point.
    with pytest.raises(ConfigError, match=r"w: cannot import 'h10_cwd:loss'.*looked in"):
        _import_function("h10_cwd:loss", "w", confdir)
    assert sys.path == before  # the lookup leaves sys.path as it was


@pytest.mark.slow
@pytest.mark.parametrize("method", ["first_order", "newton"])
def test_resumed_run_continues_exactly(data, tmp_path, method):
    """Save after 2 steps, resume in a fresh run, 1 more step: the same as 3 steps straight."""
    from analysis.driver.runner import Evaluator
    from analysis.optimize.loop import Optimization
    def fresh(out: Path) -> Optimization:
        cfg = H.make_config(data, optimizer={"steps": 3, "method": method})
        return Optimization(cfg, Evaluator(cfg), out)

    straight = fresh(tmp_path / "a")
    for _ in range(3):
        straight.do_step()
    first = fresh(tmp_path / "b")
    for _ in range(2):
        first.do_step()
    resumed = fresh(tmp_path / "b")
    resumed.resume()
    assert resumed.step == 2
    resumed.do_step()
    np.testing.assert_array_equal(resumed.u, straight.u)
    assert H.comparable_history(resumed.history) == H.comparable_history(straight.history)
