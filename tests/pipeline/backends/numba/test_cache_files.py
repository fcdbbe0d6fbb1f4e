"""numba's cache files of the kernels are untrusted input (issue 54): a bit-flipped,
truncated, rotated, non-regular or oversized index or data file is not read: the kernel
compiles again (one debug line), gives the same bits, and its files are rewritten, so
the run after is a cache hit again; a full disk leaves no temporary file behind."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis._compat import numba as cn

ROOT = Path(__file__).resolve().parents[4]

CHILD = """
import json, logging, sys
import numpy as np
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
logging.getLogger("analysis._compat.numba").setLevel(logging.DEBUG)
from analysis.pipeline.backends.numba.kernels._numba_sums import block_sums
rng = np.random.default_rng(7)
ev, pe = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
out = np.zeros((5, 2, 3))
block_sums(ev, pe, 3, 10, out, 0, 5)
print(json.dumps({"out": out.tolist(), "hits": sum(block_sums.stats.cache_hits.values())}))
"""


def _child(cache_dir: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache_dir)}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _files(cache_dir: Path) -> tuple[Path, Path]:
    index = next(cache_dir.rglob("_numba_sums.block_sums-*.nbi"))
    return index, next(index.parent.glob(index.name[:-len(".nbi")] + ".*.nbc"))


def _flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


@pytest.mark.slow
@pytest.mark.parametrize("which", [0, 1], ids=["index", "data"])
@pytest.mark.parametrize("spoil", [_flip, _truncate, _fifo, _dev_zero],
                         ids=["flipped", "truncated", "fifo", "dev_zero"])
def test_a_spoilt_cache_file_compiles_again(tmp_path, which, spoil):
    first, _ = _child(tmp_path)
    assert first["hits"] == 0
    path = _files(tmp_path)[which]
    spoil(path)
    again, err = _child(tmp_path)  # compiles again, the same bits
    assert again == first
    assert err.count("not used") == 1, err
    assert str(path.name) in err
    hit, err = _child(tmp_path)  # the files were rewritten: a hit again
    assert hit["hits"] == 1 and hit["out"] == first["out"]
    assert "not used" not in err


def test_rotated_or_oversized_files_are_refused(tmp_path, monkeypatch):
    """Each file's digest covers its name: a data file copied over another's name is
    refused; so is one over the size bound."""
    a, b = tmp_path / "k.1.nbc", tmp_path / "k.2.nbc"
    for path in (a, b):
        content = path.name.encode() * 3
        path.write_bytes(cn.MAGIC + cn._digest(path.name, content)
                         + b"\n" + content)
    assert cn.read_checked(str(a)) == b"k.1.nbc" * 3
    b.write_bytes(a.read_bytes())
    with pytest.raises(cn.Unusable, match="digest"):
        cn.read_checked(str(b))
    monkeypatch.setattr(cn, "MAX_BYTES", 8)
    with pytest.raises(cn.Unusable, match="over 8"):
        cn.read_checked(str(a))
    assert cn.read_checked(str(tmp_path / "absent.nbc")) is None


def test_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch, caplog):
    """numba's write through a temporary name, failing with ENOSPC: the kernel's save is
    skipped (one debug line), nothing is left in the folder."""
    import builtins

    cache = cn.CheckedCacheFile(str(tmp_path), "k", "stamp")
    real_open = builtins.open

    class Full:
        def __init__(self, *args, **kwargs):
            self.file = real_open(*args, **kwargs)  # noqa: SIM115

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.file.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", Full)
    with caplog.at_level("DEBUG", logger="analysis._compat.numba"):
        cache.save(("sig",), b"data")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert [r.message for r in caplog.records if "not written" in r.message]


def test_numbas_own_reader_takes_a_checked_index_for_another_version(tmp_path):
    """An older version of this package (numba's plain reader) sharing the folder
    compiles instead of failing on the checked files."""
    from numba.core.caching import IndexDataCacheFile

    checked = cn.CheckedCacheFile(str(tmp_path), "k", "stamp")
    checked.save(("sig",), b"data")
    assert IndexDataCacheFile(str(tmp_path), "k", "stamp").load(("sig",)) is None
    assert checked.load(("sig",)) == b"data"
