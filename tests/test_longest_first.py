"""The test order's list of long files (``tests/conftest.py``, ``LONGEST_FIRST``) names
files that exist: a moved file silently lost its early start (``pipeline/test_fastkernel.py``
had moved to ``pipeline/backends/numba/``)."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, TESTS


def test_every_long_file_listed_exists() -> None:
    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"LONGEST_FIRST names files that do not exist: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
