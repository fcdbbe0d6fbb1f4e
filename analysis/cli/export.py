"""The files that take a likelihood result to pyhf and CMS Combine, and ``diffcoffea export``.

:func:`write_exports` writes, beside results.json, from its ``likelihood`` section
(:mod:`analysis.likelihood.export` builds the contents):

* ``workspace.json``: the pyhf workspace (validated against pyhf's schema when pyhf
  is installed);
* ``shapes.root``: every template as a ``TH1D`` with ``sumw2`` (uproot), in one
  directory per channel;
* ``datacard.txt``: the Combine shape datacard that reads ``shapes.root``.

``evaluate`` and ``optimize`` of a config with a ``likelihood:`` section call it (for
``optimize``: the final hard-cut point, the Z results.json reports at its top level);
:func:`cmd_export` writes them again for an earlier run's directory. Each file is
written whole or not at all, and the three together (a temporary folder, then
renames). ``export`` reads results.json as untrusted input (:func:`read_section`).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from analysis.errors import DiffcoffeaError

__all__ = ["DATACARD", "MAX_RESULTS_BYTES", "SHAPES", "WORKSPACE", "cmd_export", "read_section",
           "write_exports"]

WORKSPACE = "workspace.json"
SHAPES = "shapes.root"
DATACARD = "datacard.txt"


def _validate(spec: dict) -> None:
    try:
        import pyhf
    except ImportError:  # pyhf is a test dependency only: the schema check is skipped
        return
    pyhf.Workspace(spec)  # validates against workspace.json; raises on a bad spec


def _write_root(path: Path, hists: dict[str, tuple[list[float], list[float], list[float]]]) -> None:
    import hist
    import numpy as np
    import uproot

    tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with uproot.recreate(tmp) as f:
            for name, (edges, sumw, sumw2) in hists.items():
                h = hist.Hist(hist.axis.Variable(edges), storage=hist.storage.Weight())
                view = h.view(flow=False)
                view["value"] = np.asarray(sumw, dtype=np.float64)
                view["variance"] = np.asarray(sumw2, dtype=np.float64)
                f[name] = h
        os.replace(tmp, path)
    except OSError as err:
        raise DiffcoffeaError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def write_exports(section: dict[str, Any], outdir: Path) -> list[Path]:
    """Write workspace.json, shapes.root and datacard.txt of ``section`` into ``outdir``;
    return their paths. All three are built, then written into a temporary folder in
    ``outdir`` and renamed into place, so that a failure leaves none of them half
    written (nor one new beside two old). A section without templates
    (``{"error": ...}``) raises :class:`~analysis.errors.DiffcoffeaError` naming what is
    missing."""
    import shutil
    import tempfile

    from analysis.cli.jsonout import write_json
    from analysis.cli.statuslines import floor_line
    from analysis.data.atomic import write_atomic
    from analysis.likelihood.export import combine_inputs, pyhf_workspace

    spec = pyhf_workspace(section)
    _validate(spec)
    card, hists = combine_inputs(section, shapes_file=SHAPES)
    floor = floor_line(section)
    if floor:  # the datacard says what the run said: Z from the floor
        card = f"# WARNING: {floor}\n{card}"
    outdir = Path(outdir)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=outdir))
    except OSError as err:
        raise DiffcoffeaError(f"cannot write into {outdir}: {err.strerror or err}") from None
    try:
        write_json(tmp / WORKSPACE, spec)
        _write_root(tmp / SHAPES, hists)
        write_atomic(tmp / DATACARD, card, what="datacard")
        for name in (WORKSPACE, SHAPES, DATACARD):
            os.replace(tmp / name, outdir / name)
    except OSError as err:
        raise DiffcoffeaError(f"cannot write into {outdir}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [outdir / WORKSPACE, outdir / SHAPES, outdir / DATACARD]


#: Largest results.json ``diffcoffea export`` reads (a real one is a few MB).
MAX_RESULTS_BYTES = 256 * 2**20


def read_section(results: Path) -> dict[str, Any]:
    """The ``likelihood`` section of the results file ``results``, read as untrusted
    input: a regular file of at most :data:`MAX_RESULTS_BYTES` (a FIFO or ``/dev/zero``
    refused at once), strict JSON (each key once), and the section checked against
    :func:`analysis.likelihood.section.check_section` before anything is built from it;
    every problem one line of one :class:`~analysis.errors.DiffcoffeaError`."""
    from analysis.jsonsafe import read_json
    from analysis.likelihood.section import check_section

    if not os.path.lexists(results):
        raise DiffcoffeaError(f"{results}: no such file (expected the output directory of "
                              "'diffcoffea evaluate' or 'optimize')")
    data = read_json(results, "JSON results file", error=DiffcoffeaError,
                     max_bytes=MAX_RESULTS_BYTES)
    section = data.get("likelihood") if isinstance(data, dict) else None
    if not isinstance(section, dict) or "channels" not in section:
        why = section.get("error") if isinstance(section, dict) else None
        raise DiffcoffeaError(
            f"{results}: key 'likelihood': "
            + (f"no templates ({why})" if why else "missing; expected the result of a config "
               "with a 'likelihood:' section")
        )
    problems = check_section(section)
    if problems:
        raise DiffcoffeaError("\n".join(f"{results}: {p}" for p in problems))
    return section


def cmd_export(args) -> int:
    """``diffcoffea export RESULTS_DIR``: the three files from RESULTS_DIR/results.json."""
    from analysis.cli.outdir import claim_output

    outdir = Path(args.results_dir)
    section = read_section(outdir / "results.json")
    target = Path(args.output) if args.output else outdir
    with claim_output(target, command="export"):
        paths = write_exports(section, target)
    if not args.quiet:
        for p in paths:
            print(f"wrote {p}")
    return 0
