"""Names that become paths, ROOT keys, workspace names and datacard tokens (issue 54, item 2).

Each name is refused at load, in one line naming the key, the name and the rule; the
plot files are resolved inside the output folder as a second line of defence, and the
overlay's file name is no dataset's ``hist_NAME.png``. References: the colliding keys
are written out by hand (``sr/dy_jesUp``, ``staterror_sr``)."""

from __future__ import annotations

import copy
import fcntl
import os
import threading
import time

import pytest

from analysis.cli.outdir import LOCK, OutputError, claim_output, inside
from analysis.cli.parser import main
from analysis.config.loader import ConfigError, config_from_dict
from analysis.config.names import MAX_NAME_BYTES, NAME_RULE
from tests.conftest import one_line_error, write_config
from tests.likelihood.test_yaml_pipeline import lk_config


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return lk_config(tmp_path_factory.mktemp("nodata"))


def _refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def _rename_dataset(cfg: dict, old: str, new: str) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg["datasets"] = {new if k == old else k: v for k, v in cfg["datasets"].items()}
    for s in cfg["systematics"]:
        if "datasets" in s:
            s["datasets"] = [new if d == old else d for d in s["datasets"]]
    return cfg


@pytest.mark.parametrize("name", ["../../../../escape_hist", "a/b", "a b", "a\nrate 1",
                                  "nul\0", "..", ".hidden", "-x", "x" * (MAX_NAME_BYTES + 1), "日" * 67,
                                  "a:b"])
def test_dataset_name_characters(base, name):
    msg = _refused(_rename_dataset(base, "dy", name))
    assert msg.startswith("<config>: datasets: dataset name ")
    assert msg.endswith(f"is not allowed: it becomes a file name, a ROOT key and a datacard "
                        f"token; expected {NAME_RULE}")


@pytest.mark.parametrize("name", ["../../../../escape_ch", "s r", "rate"])
def test_channel_name(base, name):
    cfg = copy.deepcopy(base)
    cfg["likelihood"]["channels"] = {name: cfg["likelihood"]["channels"]["b1"]}
    msg = _refused(cfg)
    assert msg.startswith("<config>: likelihood.channels: channel name ")
    assert ("datacard keyword" if name == "rate" else NAME_RULE) in msg


@pytest.mark.parametrize("name, rule", [("mu", "reserved"), ("staterror_b1", "reserved"),
                                        ("staterror_x", "reserved"), ("shapes", "keyword"),
                                        ("a\tb", NAME_RULE)])
def test_systematic_name(base, name, rule):
    cfg = copy.deepcopy(base)
    cfg["systematics"][0]["name"] = name
    msg = _refused(cfg)
    assert msg.startswith("<config>: systematics.0.name: systematic name ") and rule in msg


def test_histogram_and_observable_names(base):
    cfg = copy.deepcopy(base)
    cfg["histograms"][0]["name"] = "../h"
    cfg["likelihood"]["channels"]["b1"]["histogram"] = "../h"
    assert "histograms.0.name: histogram name '../h'" in _refused(cfg)
    cfg = copy.deepcopy(base)
    cfg["observables"] = [{"name": "../o", "x": "jets.pt", "stats": ["mean"]}]
    assert "observables.0.name: observable name '../o'" in _refused(cfg)


def test_data_obs_is_reserved(base):
    msg = _refused(_rename_dataset(base, "dy", "data_obs"))
    assert msg == ("<config>: datasets: dataset name 'data_obs' is reserved (Combine's "
                   "observed data in shapes.root); rename the dataset")


def test_dataset_named_as_a_variation_key(base):
    """``dy_jesUp`` beside ``dy`` and shift ``jes``: both write ``sr/dy_jesUp``."""
    cfg = copy.deepcopy(base)
    cfg["datasets"]["dy_jesUp"] = dict(cfg["datasets"]["dy"])
    msg = _refused(cfg)
    assert msg == ("<config>: datasets: dataset name 'dy_jesUp' is the shapes.root key of the "
                   "up template of systematic 'jes' of dataset 'dy' (CH/dy_jesUp); rename the "
                   "dataset")
    cfg["datasets"]["dy_jesDown"] = cfg["datasets"].pop("dy_jesUp")
    assert "down template of systematic 'jes'" in _refused(cfg)
    # a systematic limited to other datasets writes no such key
    cfg["systematics"][0]["datasets"] = ["ttbar"]
    config_from_dict(cfg)


def test_allowed_names_load(base):
    for name in ("DY_2j-v1.2", "日本語データ", "tt̄→ℓℓ", "mc[0]", "x" * MAX_NAME_BYTES):
        config_from_dict(_rename_dataset(base, "dy", name))


def test_cli_name_is_one_line(base, tmp_path, capsys):
    path = write_config(tmp_path / "c.yaml", _rename_dataset(base, "dy", "../../escape"))
    capsys.readouterr()
    assert main(["evaluate", str(path), "-o", str(tmp_path / "out"), "--quiet"]) == 2
    assert "dataset name '../../escape'" in one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- plot files: the second line of defence ----------------------------------------------


@pytest.mark.parametrize("name", ["../x.png", "a/../../x.png", "/tmp/x.png", "..", "", "a\0b"])
def test_inside_refuses_paths_that_leave(tmp_path, name):
    with pytest.raises(OutputError, match="not a plain file name inside the output directory"):
        inside(tmp_path, name)
    assert inside(tmp_path, "hist_a.png") == tmp_path.resolve() / "hist_a.png"


def test_templates_plot_never_leaves_the_folder(tmp_path, monkeypatch):
    """A tampered results section naming a channel ``../../escape_ch``: refused, nothing
    written outside (the config refuses such a channel at load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.cli import lkplots

    monkeypatch.setattr(lkplots, "templates_figure", lambda *a, **k: plt.figure())
    monkeypatch.setattr(lkplots, "pulls_figure", lambda *a, **k: None)
    out = tmp_path / "a" / "b"
    out.mkdir(parents=True)
    with pytest.raises(OutputError):
        lkplots.plot_likelihood({"channels": {"../../escape_ch": {}}}, out)
    assert not list(tmp_path.rglob("*.png"))


def test_overlay_is_no_dataset_plot():
    """A dataset ``signal_background`` writes ``hist_signal_background.png``; the overlay
    has no ``hist_`` (nor ``templates_``, ``score_``) prefix, so no name reaches it."""
    from analysis.cli.plots import OVERLAY

    assert not OVERLAY.startswith(("hist_", "templates_", "score_"))


# --- a lock held by another process ------------------------------------------------------


def test_lock_held_by_another_process_waits_then_fails(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: the same as another process
        t0 = time.monotonic()
        with pytest.raises(OutputError, match=r"another process has held the lock \(flock\) "
                                              r"for more than 0.3 s"):
            with claim_output(out, lock_wait_s=0.3):
                pass
        assert time.monotonic() - t0 < 5
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "waiting for" in err and "holds its lock (flock)" in err
        # released while we wait: the run goes on
        threading.Timer(0.2, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
        with claim_output(out, lock_wait_s=10):
            pass
    finally:
        os.close(fd)
