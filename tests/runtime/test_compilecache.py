"""JAX's persistent compilation cache (analysis.runtime.compilecache): which directory, and that
a second process and a worker process load what the first compiled.

The reference is JAX's own record of what it did: its monitoring events
``/jax/compilation_cache/cache_hits`` and ``.../cache_misses`` and the entries it
writes into the directory (no timing here: benchmarks/bench_rerun.py measures that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import runtime
from analysis.runtime import compilecache

ROOT = Path(__file__).resolve().parents[2]

# A fresh process: compile one small function (well under JAX's default 1 s threshold)
# and print JAX's cache events. Configures this package first (as the command line and the
# driver do: analysis.runtime.configure) unless told not to.
_COMPILE = """
import json, sys
if sys.argv[1] == "analysis":
    import analysis.runtime
    analysis.runtime.configure()
import jax, jax.numpy as jnp
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)(jnp.arange(7.0)).block_until_ready()
print(json.dumps([e for e in events if "compilation_cache/cache_" in e]))
"""


def _compile(env: dict[str, str], *, import_analysis: bool = True) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE, "analysis" if import_analysis else "plain"],
        cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        check=True, timeout=300,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        if key.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE", "DIFFCOFFEA_JAX")):
            del env[key]
    return env


def _set(monkeypatch, key: str, value: str) -> None:
    monkeypatch.setenv(key, value)
    runtime.reset()  # the settings read the environment again


def test_directory_order(monkeypatch, tmp_path):
    for key in ("JAX_COMPILATION_CACHE_DIR", compilecache.ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    _set(monkeypatch, "HOME", str(tmp_path / "home"))
    assert compilecache.directory() == str(tmp_path / "home" / ".cache" / "diffcoffea" / "jax")
    _set(monkeypatch, "XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilecache.directory() == str(tmp_path / "xdg" / "diffcoffea" / "jax")
    _set(monkeypatch, compilecache.ENV, str(tmp_path / "mine"))
    assert compilecache.directory() == str(tmp_path / "mine")
    _set(monkeypatch, compilecache.ENV, "off")
    assert compilecache.directory() is None
    _set(monkeypatch, compilecache.ENV, str(tmp_path / "mine"))
    _set(monkeypatch, "JAX_COMPILATION_CACHE_DIR", str(tmp_path / "users"))
    assert compilecache.directory() is None  # the user's own JAX setting wins
    _set(monkeypatch, "JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    assert compilecache.directory() == str(tmp_path / "mine")  # ours, exported before


def test_enable_unwritable_directory_is_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert compilecache.enable(blocker / "jax") is None


def test_second_process_loads_what_the_first_compiled(tmp_path):
    env = {**_clean_env(), compilecache.ENV: str(tmp_path / "cache")}
    first = _compile(env)
    entries = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert first and set(first) == {"/jax/compilation_cache/cache_misses"}
    assert entries, "the first process wrote no cache entry"
    second = _compile(env)
    assert "/jax/compilation_cache/cache_hits" in second
    assert "/jax/compilation_cache/cache_misses" not in second
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == entries


@pytest.mark.slow  # a JAX process (~5 s)
def test_off_means_no_cache(tmp_path):
    env = {**_clean_env(), compilecache.ENV: "off", "HOME": str(tmp_path)}
    assert _compile(env) == []
    assert not (tmp_path / ".cache").exists()


@pytest.mark.slow  # two JAX processes
def test_a_worker_started_later_inherits_the_cache(tmp_path):
    # A worker that never imports analysis (a bare process started by a driver that
    # called enable(), as coffea's executors start theirs) caches through the inherited
    # environment. The driver is a subprocess too: enable() changes its environment.
    driver = (
        "import subprocess, sys\n"
        "from analysis.runtime import compilecache\n"
        f"assert compilecache.enable({str(tmp_path / 'w')!r}) == {str(tmp_path / 'w')!r}\n"
        "for _ in range(2):\n"
        f"    subprocess.run([sys.executable, '-c', {_COMPILE!r}, 'plain'], check=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", driver], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=300,
                         env={**_clean_env(), "PYTHONPATH": str(ROOT)}).stdout
    first, second = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert set(first) == {"/jax/compilation_cache/cache_misses"}
    assert set(second) == {"/jax/compilation_cache/cache_hits"}
    assert any((tmp_path / "w").iterdir())


def test_enable_applies_to_jax_imported_before(tmp_path):
    # enable(path) after JAX has compiled (and opened its cache elsewhere) moves it.
    code = (
        "import sys, os\n"
        "import analysis.runtime, jax, jax.numpy as jnp\n"
        "analysis.runtime.configure()\n"
        "from analysis.runtime import compilecache\n"
        "jax.jit(lambda x: x + 1.0)(jnp.ones(3)).block_until_ready()\n"
        f"assert compilecache.enable({str(tmp_path / 'moved')!r}) == {str(tmp_path / 'moved')!r}\n"
        "jax.jit(lambda x: x * 5.0 - 2.0)(jnp.ones(4)).block_until_ready()\n"
        "assert jax.config.jax_compilation_cache_dir == os.environ['DIFFCOFFEA_JAX_CACHE']\n"
    )
    env = {**_clean_env(), compilecache.ENV: str(tmp_path / "first")}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                   check=True, timeout=300)
    assert any((tmp_path / "first").iterdir()) and any((tmp_path / "moved").iterdir())
