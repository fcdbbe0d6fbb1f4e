"""Shared pytest configuration and fixtures.

Real NanoAOD files live outside the repository, in ``shared/data`` beside the project
root (``Path(__file__).resolve().parents[1].parent / "shared" / "data"``). This machine
has no internet: ``skhep_testdata.data_path(name)`` only works offline once the file is
in its cache, ``~/.local/skhepdata/``, so the cache is primed from ``shared/data`` when
the test session starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SKHEP_CACHE = Path.home() / ".local" / "skhepdata"
SKHEP_FILES = ("nanoAOD_2015_CMS_Open_Data_ttbar.root",)


def _prime_skhep_cache() -> None:
    """Copy the scikit-hep-testdata files we use into its cache, unless already there."""
    for name in SKHEP_FILES:
        src, dst = SHARED_DATA / name, SKHEP_CACHE / name
        if not src.is_file():
            continue  # the tests that need it fail with skhep_testdata's own message
        if dst.is_file() and dst.stat().st_size == src.stat().st_size:
            continue
        SKHEP_CACHE.mkdir(parents=True, exist_ok=True)
        # copy then rename: parallel workers (pytest-xdist) never see a partial file
        tmp = dst.with_name(f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


def pytest_configure(config: pytest.Config) -> None:
    _prime_skhep_cache()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Directory of the shared real NanoAOD files (see ``shared/data/README.md``)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data directory not found: {SHARED_DATA}")
    return SHARED_DATA
