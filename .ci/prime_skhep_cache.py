"""Copy the scikit-hep-testdata files of the shared data folder into skhep's offline cache.

``skhep_testdata.data_path(name)`` downloads into ``~/.local/skhepdata``; these machines
are offline, so ``skhep:`` dataset entries resolve only once the file is there. Test and
CI plumbing, not part of the package: used by ``.ci/run`` (``python
.ci/prime_skhep_cache.py ../shared/data``) and by ``tests/conftest.py`` (at session start).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SKHEP_CACHE = Path.home() / ".local" / "skhepdata"
# The last two are not scikit-hep-testdata files: they live only in ../shared/data and
# are primed under their own names so that configs can name them as skhep:NAME.
SKHEP_FILES = ("nanoAOD_2015_CMS_Open_Data_ttbar.root", "nano_tt_v12.root", "nano_dy.root")


def prime(data_dir: str | os.PathLike[str], cache: Path = SKHEP_CACHE) -> list[Path]:
    """Copy each of ``SKHEP_FILES`` found in ``data_dir`` into ``cache`` unless it is
    already there with the same size; returns the files copied. Copy, then rename, so a
    parallel reader never sees a partial file."""
    copied = []
    for name in SKHEP_FILES:
        src, dst = Path(data_dir) / name, cache / name
        if not src.is_file():
            continue  # whoever needs it fails with skhep_testdata's own message
        if dst.is_file() and dst.stat().st_size == src.stat().st_size:
            continue
        cache.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{name}.{os.getpid()}.tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        copied.append(dst)
    return copied


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    for path in prime(sys.argv[1] if len(sys.argv) > 1 else default):
        print(f"primed {path}")
