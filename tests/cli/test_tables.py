"""Terminal tables: every number whole at any width, piped or not, and the printed
numbers read back to the values in results.json (to the printed precision).

The evaluate summary of ``configs/ttbar.yaml`` on the real CMS file is printed at
COLUMNS=60, 80, 200, piped and as a terminal (FORCE_COLOR), parsed back and compared
with its own results.json; a synthetic report with extreme values and long names
checks the same without a pass.
"""

from __future__ import annotations

import json
import math
import re
from io import StringIO
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from analysis.cli.parser import main
from analysis.cli.report import print_summary
from analysis.cli.tables import DIGITS, fmt_number, print_table

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NUMBER = re.compile(r"^(nan|-?inf|-?\d+(\.\d+)?(e[+-]\d+)?)$")
#: a number rounded to DIGITS significant digits is within this of the value
RTOL = 0.5 * 10 ** (1 - DIGITS) * 1.0001


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (3.63018e7, "3.630e+07"),
        (-241294.0, "-2.413e+05"),
        (0.0005522, "5.522e-04"),
        (9.64943e-05, "9.649e-05"),
        (76.3519, "76.35"),
        (3846.83, "3847"),
        (9999.7, "1.000e+04"),
        (0.00999951, "0.01000"),
        (0.001, "0.001000"),
        (0.0, "0"),
        (None, "nan"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
    ],
)
def test_fmt_number(x, text) -> None:
    assert fmt_number(x) == text


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_fmt_number_round_trips_to_its_digits(x) -> None:
    text = fmt_number(x)
    assert len(text) <= 11 and NUMBER.match(text)
    assert math.isclose(float(text), x, rel_tol=RTOL, abs_tol=0.0) or x == 0


def _console(width: int, *, terminal: bool = False) -> tuple[Console, StringIO]:
    buf = StringIO()
    return Console(file=buf, width=width, force_terminal=terminal, color_system="standard"), buf


LONG = ["jet_abs_eta_max_of_the_leading_jets", "btag_min", "lep_pt_min", "jet_pt_min"]


@pytest.mark.parametrize("width", [40, 60, 80, 200])
@pytest.mark.parametrize("terminal", [False, True])
def test_wide_table_is_folded_never_cut(width, terminal) -> None:
    values = [3.63018e7, -9.64943e-5, 0.0005522, -241294.0, 76.3519]
    headers = ["value", *(f"d/d\n{n}" for n in LONG)]
    rows = [("linear_fit.intercept_error", [fmt_number(v) for v in values]), ("section", None),
            ("  mean", [fmt_number(-v) for v in values])]
    console, buf = _console(width, terminal=terminal)
    tables = print_table(console, "title", "statistic", headers, rows)
    out = ANSI.sub("", buf.getvalue())
    assert "…" not in out and "..." not in out
    assert all(len(line) <= width for line in out.splitlines())
    for v in values:  # each cell whole, once per row
        assert out.count(f" {fmt_number(v)} ") + out.count(f" {fmt_number(v)}\n") >= 1
        assert re.search(rf"(^|\s){re.escape(fmt_number(-v))}(\s|$)", out, re.M)
    for name in LONG:
        assert name in out.replace("\n", "") or width < len(name)
    assert tables == 1 if width == 200 else tables > 1


def _parse(text: str) -> dict[str, dict[str, list[str]]]:
    """``{dataset: {row label: [cells...]}}`` of printed summary tables (column groups
    of one dataset concatenated in order)."""
    out: dict[str, dict[str, list[str]]] = {}
    dataset, rows, section = None, False, None
    for line in ANSI.sub("", text).splitlines():
        m = re.match(r"^(\S+): \d+ events", line)
        if m:
            dataset = m.group(1)
            out.setdefault(dataset, {})
            continue
        if "─" in line and set(line.strip()) <= {"─"}:
            rows, section = True, None
            continue
        if rows:
            if not line.strip():
                rows = False
                continue
            indent = len(line) - len(line.lstrip())
            label, *cells = line.split()
            if not cells:
                section = label.rstrip("*")
                continue
            assert all(NUMBER.match(c) for c in cells), line
            key = label if indent <= 2 else f"{section}.{label}"
            out[dataset].setdefault(key, []).extend(cells)
    return out


def _expected(entry: dict, names: list[str]) -> list[float | None]:
    return [entry["value"], *(entry["grad"][n] for n in names)]


def _compare(printed: dict[str, dict[str, list[str]]], report: dict) -> int:
    names = report["trainable"]
    checked = 0
    assert printed.keys() == report["datasets"].keys()
    for ds, r in report["datasets"].items():
        want = {
            key: [r[key], *(r[f"{key}_grad"][n] for n in names)]
            for key in ("selected_sumw", "selected_sumw2")
        }
        for obs, stats in r["observables"].items():
            for stat, entry in stats.items():
                if "value" in entry:
                    want[f"{obs}.{stat}"] = _expected(entry, names)
                else:
                    for part, sub in entry.items():
                        want[f"{obs}.{stat}.{part}"] = _expected(sub, names)
        assert printed[ds].keys() == want.keys()
        for key, values in want.items():
            cells = printed[ds][key]
            assert len(cells) == len(values), key
            for cell, value in zip(cells, values, strict=True):
                if value is None:
                    assert cell == "nan", key
                else:
                    assert math.isclose(float(cell), value, rel_tol=RTOL), (key, cell, value)
                checked += 1
    return checked


def _synthetic_report() -> dict:
    names = ["jet_pt_min", "jet_abs_eta_max", "lep_pt_min", "btag_min"]

    def entry(v):
        if v is None:  # an undefined statistic: null value and gradients
            return {"value": None, "grad": dict.fromkeys(names)}
        factors = [-1.234567e-3, 9.87654e4, -3.3333e-7, 1.0]
        return {"value": v, "grad": {n: v * f for n, f in zip(names, factors, strict=True)}}

    return {
        "trainable": names,
        "datasets": {
            "ttbar": {
                "events": 200, "sumw": 3.34321e7, "effective_events": 11.5, "hard_events": 25,
                "reliable": True, "selected_sumw": 3.63018e6,
                "selected_sumw_grad": dict(zip(names, [-241294.0, 1.36634e6, 0.0, -1.0])),
                "selected_sumw2": 1.14532e12,
                "selected_sumw2_grad": dict(zip(names, [-6.08115e10, None, 1e-300, 2.5])),
                "observables": {
                    "jet_pt_eta": {
                        "linear_fit": {"intercept_error": entry(0.000552269),
                                       "slope": entry(-9.64943e-05)},
                        "corr": entry(None),
                    },
                    "ht": {"mean": entry(173.449), "std": entry(151.887)},
                },
            }
        },
        "faults": None,
    }


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_summary_of_a_synthetic_report_reads_back(columns, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    report = _synthetic_report()
    print_summary(report, Path("results.json"))
    text = capsys.readouterr().out
    assert "…" not in text
    assert all(len(line) <= int(columns) for line in text.splitlines())
    assert _compare(_parse(text), report) == 7 * 5


@pytest.fixture(scope="module")
def ttbar_results(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("ttbar-tables")
    assert main(["evaluate", str(CONFIGS / "ttbar.yaml"), "--quiet", "-o", str(out)]) == 0
    path = out / "results.json"
    return json.loads(path.read_text()), path


@pytest.mark.parametrize("columns", ["60", "80", "200"])
@pytest.mark.parametrize("terminal", [False, True])
def test_evaluate_summary_reads_back_to_results_json(
    ttbar_results, columns, terminal, monkeypatch, capsys
) -> None:
    report, path = ttbar_results
    monkeypatch.setenv("COLUMNS", columns)
    if terminal:
        monkeypatch.setenv("FORCE_COLOR", "1")
    else:
        monkeypatch.delenv("FORCE_COLOR", raising=False)
    print_summary(report, path)
    text = capsys.readouterr().out
    plain = ANSI.sub("", text)
    assert ("\x1b[" in text) == terminal
    assert "…" not in plain
    assert all(len(line) <= int(columns) for line in plain.splitlines())
    # 2 sums + 5 jet_pt + 2 + 4 linear-fit fields + 2 ht, each value and 2 gradients
    assert _compare(_parse(text), report) == 15 * 3
    assert "25 pass the hard cuts" in re.sub(r"\s+", " ", plain)
