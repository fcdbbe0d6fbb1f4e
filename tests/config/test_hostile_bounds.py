"""Bounds on every size a config or argument sets (issue 37, classes 4-7): fit size,
network width and depth, scan grids, generated events, workers, retries, seeds,
expressions; dask addresses; files that are not regular files. Each is one line,
naming the key, before anything is allocated (the memory cases under an address-space
limit in a subprocess, the hangs under a timeout)."""

from __future__ import annotations

import copy
import os
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from analysis.cli.parser import main
from analysis.config.loader import config_from_dict, load_config
from analysis.errors import ConfigError, InputError
from analysis.limits import ENV_LIMIT, MAX_RETRIES, MAX_WORKERS, ResourceError
from analysis.pipeline.bounds import check_fit
from tests import opt_helpers as H
from tests.conftest import one_line_error, write_config
from tests.likelihood.test_yaml_pipeline import lk_config

REPO = Path(__file__).resolve().parents[2]
SCORE = yaml.safe_load((REPO / "configs" / "demo_score.yaml").read_text())


@pytest.fixture(autouse=True)
def _limit(monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, "4096")  # 4 GB whatever the machine


def _refused(cfg: dict, base: Path = REPO / "configs") -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg, base_dir=base)
    assert "\n" not in str(err.value)
    return str(err.value)


def _fails(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return one_line_error(capsys.readouterr().err)


# --- class 4: sizes -----------------------------------------------------------------------


def test_fit_of_100000_bins_with_mc_statistics(tmp_path):
    """10**5 bins with MC statistics: the fit's Hessian alone is 80 GB (2.56 TB asked
    for, with a traceback, before)."""
    cfg = lk_config(tmp_path)
    cfg["histograms"][0] = {"name": "lead", "x": "jets[0].pt",
                            "bins": {"n": 100000, "lo": 0, "hi": 400}}
    config = config_from_dict(cfg, base_dir=tmp_path)
    with pytest.raises(ResourceError, match=r"likelihood.channels: implies the profile fit's "
                                            r"Hessian and tangents: 100007 nuisances x 200008"):
        check_fit(config)
    check_fit(config_from_dict(lk_config(tmp_path), base_dir=tmp_path))  # the usual size


@pytest.mark.parametrize("hidden, message", [
    ([100000, 100000], r"has 10000600001 weights; at most 1000000"),
    ([3000, 3000], r"has 9018001 weights; at most 1000000"),
    ([4] * 2000, r"2000 hidden layers; at most 64"),
])
def test_score_network_size(hidden, message):
    cfg = copy.deepcopy(SCORE)
    cfg["scores"][0]["mlp"]["hidden"] = hidden
    start = time.perf_counter()
    assert "scores.0.mlp.hidden" in _refused(cfg)
    assert time.perf_counter() - start < 5
    with pytest.raises(ConfigError, match=message):
        config_from_dict(cfg, base_dir=REPO / "configs")


def test_workers_and_retries_are_bounded(tmp_path, capsys):
    base = {"datasets": {"a": {"files": "a.root"}}}
    for key, top in (("workers", MAX_WORKERS), ("retries", MAX_RETRIES)):
        msg = _refused({**base, "executor": {"type": "futures", key: 1000000}})
        assert f"executor.{key}" in msg and str(top) in msg
        config_from_dict({**base, "executor": {"type": "futures", key: top}})
    config = write_config(tmp_path / "c.yaml", base)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["evaluate", str(config), "--workers", "1000000"])
    assert f"at most {MAX_WORKERS}" in capsys.readouterr().err


def test_scan_grid_is_bounded(tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", H.config_dict(tmp_path))
    start = time.perf_counter()
    line = _fails(["scan", str(config), "-o", str(tmp_path / "o"), "--grid",
                   "jet_pt_min=20:60:10000000000"], capsys)
    assert "10000000000 points; at most 1000000" in line and time.perf_counter() - start < 10


def _limited_subprocess(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose address space is 3 GB: an allocation the
    bounds miss fails there instead of swapping this machine."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, preexec_fn=limit,
                          env={**os.environ, ENV_LIMIT: "1024"})


def test_generated_events_are_bounded_under_an_address_space_limit(tmp_path):
    proc = _limited_subprocess(f"""
        from analysis.errors import DiffcoffeaError
        from analysis.data.generate import write_dataset
        for n, files in ((10**12, 1), (10**7, 1)):
            try:
                write_dataset({str(tmp_path)!r}, process="ttbar", n_events=n, n_files=files)
            except DiffcoffeaError as e:
                print(e)
        """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "make-dataset: events = 1000000000000; expected an integer in 0..100000000"
    assert lines[1].startswith("make-dataset: events: implies 10000000 generated events per "
                               "file = 9.54 GB, more than the memory limit 1 GB")
    cfg = {"datasets": {"a": {"generate": {"process": "ttbar", "events": 10**12,
                                           "dir": "g"}}}}
    assert "datasets.a.generate.events" in _refused(cfg, tmp_path)


# --- class 5: not regular files ----------------------------------------------------------


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _within(seconds: float, fn, *args):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(out=fn(*args)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} hung on a non-regular file"
    return box.get("out")


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "loop"])
def test_config_that_is_not_a_regular_file(tmp_path, kind):
    path = {"fifo": tmp_path / "f.yaml", "device": Path("/dev/zero"), "directory": tmp_path,
            "loop": tmp_path / "loop.yaml"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    if kind == "loop":
        path.symlink_to(path)

    def load():
        with pytest.raises(ConfigError) as err:
            load_config(path)
        return str(err.value)

    msg = _within(5, load)
    assert msg.startswith(f"{path}: config file is") and "\n" not in msg


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "dir"])
def test_correction_file_that_is_not_a_regular_file(tmp_path, fifo, target):
    path = {"fifo": fifo, "/dev/zero": Path("/dev/zero"), "dir": tmp_path}[target]
    cfg = lk_config(tmp_path)
    cfg["systematics"].append({"name": "sf", "type": "weight", "up": "up", "down": "down",
                               "correction": {"file": str(path), "key": "k", "set": "jets",
                                              "inputs": ["pt"]}})
    msg = _within(5, _refused, cfg, tmp_path)
    assert "systematics.3.correction.file" in msg and "expected a regular file" in msg


def test_data_file_that_is_a_fifo(tmp_path, fifo):
    from analysis.driver.files import BadFile, open_file

    def opened():
        with pytest.raises(BadFile, match="data file is a FIFO; expected a regular file"):
            open_file(str(fifo), "Events")

    _within(5, opened)


# --- class 6: dask addresses -------------------------------------------------------------


@pytest.mark.parametrize("address, message", [
    ("not a url", "is not a scheduler address"),
    ("inproc://x", "scheme 'inproc'"),
    ("tcp://127.0.0.1:70000", "Port out of range|port in 1..65535"),
    ("tcp://127.0.0.1", "expected a port"),
    ("tcp://:8786", "no host"),
    ("http://127.0.0.1:8786", "scheme 'http'"),
])
def test_dask_address_checked_at_load(address, message):
    msg = _refused({"datasets": {"a": {"files": "a.root"}},
                    "executor": {"type": "dask", "address": address}})
    assert "executor.address" in msg
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"datasets": {"a": {"files": "a.root"}},
                          "executor": {"type": "dask", "address": address}})
    config_from_dict({"datasets": {"a": {"files": "a.root"}},
                      "executor": {"type": "dask", "address": "tls://scheduler.example:8786"}})


def test_dask_connect_closed_port_and_silent_server():
    """Loopback only, 1 s: a closed port, and a socket that accepts but never speaks
    (an HTTP server hung the handshake before)."""
    from analysis.driver.executors import connect

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()
    with pytest.raises(InputError, match=rf"^w: executor.address: tcp://127.0.0.1:{closed}: "
                                         "cannot connect to a dask scheduler"):
        connect(f"tcp://127.0.0.1:{closed}", "w: executor.address", timeout=1)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list = []
    threading.Thread(target=lambda: [held.append(srv.accept()) for _ in range(8)],
                     daemon=True).start()
    start = time.perf_counter()
    with pytest.raises(InputError, match="no dask scheduler answered within 1 s"):
        connect(f"tcp://127.0.0.1:{srv.getsockname()[1]}", "w: executor.address", timeout=1)
    assert time.perf_counter() - start < 10
    srv.close()


# --- class 7: smaller ---------------------------------------------------------------------


def test_score_seed_2_to_the_80():
    cfg = copy.deepcopy(SCORE)
    cfg["scores"][0]["init"] = {"seed": 2**80}
    assert "scores.0.init.seed" in _refused(cfg)


def test_weight_expression_of_5000_terms(tmp_path):
    cfg = lk_config(tmp_path)
    cfg["systematics"][1]["up"] = " + ".join(["PSWeight[0]"] * 5000)
    msg = _refused(cfg, tmp_path)
    assert "systematics.1" in msg and "characters; at most 2000" in msg


def test_generate_seed_and_dir(tmp_path):
    (tmp_path / "file").write_text("")
    cfg = {"datasets": {"a": {"generate": {"process": "ttbar", "events": 10, "seed": -1,
                                           "dir": "g"}}}}
    assert "datasets.a.generate.seed" in _refused(cfg, tmp_path)
    for where in (str(tmp_path / "file" / "sub"), "/proc/diffcoffea"):
        cfg = {"datasets": {"a": {"generate": {"process": "ttbar", "events": 10, "dir": where}}},
               "lumi": 1.0}
        config = config_from_dict(cfg, base_dir=tmp_path)
        from analysis.driver.files import resolve_fileset

        with pytest.raises(InputError, match=r"datasets.a.generate: (cannot create|.* exists "
                                             "and is not a directory)") as err:
            resolve_fileset(config)
        assert "\n" not in str(err.value)


def test_make_dataset_paths_and_seed(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    cases = [
        (["--seed", "-1"], tmp_path / "o", "seed = -1; expected an integer in 0.."),
        ([], tmp_path / "file", "exists and is not a directory"),
        ([], tmp_path / "file" / "sub", "cannot create"),
    ]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        cases.append(([], ro, "cannot write"))
    for extra, out, message in cases:
        line = _fails(["make-dataset", str(out), "--process", "dy", "--events", "10", *extra],
                      capsys)
        assert message in line and str(out) in line


def test_checkpoint_history_nesting_200000_arrays(tmp_path):
    import json

    import numpy as np

    from analysis.optimize import checkpoint as C

    head = json.dumps({"format": C.FORMAT, "version": C.VERSION, "step": 1, "history": []})
    text = head[:-3] + "[" * 200000 + "]" * 200000 + "]}"
    path = tmp_path / "checkpoint.npz"
    with path.open("wb") as f:
        np.savez(f, state=np.frombuffer(text.encode(), dtype=np.uint8), u=np.zeros(2))
    with pytest.raises(C.CheckpointError, match="JSON nested too deeply") as err:
        C.read_checkpoint(path)
    assert "\n" not in str(err.value)
