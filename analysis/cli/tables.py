"""Terminal tables whose numbers are never cut, at any width, piped or not.

Numbers are written by :func:`fmt_number` (4 significant digits: fixed between 1e-3
and 1e4, scientific outside), each number column is exactly as wide as its widest
cell, and a table too wide for the console is folded: its value columns are split
over several tables, each repeating the label column (:func:`print_table`). Only
labels may wrap (character by character, never with an ellipsis); digits never do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["fmt_number", "print_table"]

#: significant digits of every printed statistic (the tests parse them back to this)
DIGITS = 4


def fmt_number(x: Any) -> str:
    """``x`` with :data:`DIGITS` significant digits: ``76.35``, ``-3.630e+07``,
    ``5.522e-04``, ``0``; ``None``/NaN as ``nan``, infinities as ``inf``/``-inf``.

    Fixed notation for ``1e-3 <= |x| < 1e4`` (after rounding), scientific otherwise:
    one column reads the same way throughout and no exponent is ever lost."""
    if x is None:
        return "nan"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    sci = f"{x:.{DIGITS - 1}e}"
    exponent = int(sci.split("e")[1])
    if -3 <= exponent < 4:
        return f"{x:.{max(DIGITS - 1 - exponent, 0)}f}"
    return sci


def _table(title: str | None, label: str, headers: Sequence[str], rows, caption: str | None):
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # Text, not markup: a label such as "jets[0].pt" must print as written
    t = Table(
        title=None if title is None else Text(title), title_justify="left",
        caption=None if caption is None else Text(caption), caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    t.add_column(Text(label), overflow="fold")
    for i, h in enumerate(headers):
        widest = max([*map(len, h.split("\n"))] + [len(c[i]) for _, c in rows if c is not None])
        t.add_column(Text(h, justify="right"), justify="right", no_wrap=True, min_width=widest)
    for name, cells in rows:
        if cells is None:  # a section heading: the label alone
            t.add_row(Text(name, style="bold"))
        else:
            t.add_row(Text(name), *(Text(c) for c in cells))
    return t


def print_table(
    console: Any,
    title: str | None,
    label: str,
    headers: Sequence[str],
    rows: Sequence[tuple[str, Sequence[str]]],
    *,
    caption: str | None = None,
) -> int:
    """Print ``rows`` (``(label, cells)``, cells already formatted) under ``headers``
    (a header may hold a line break; ``cells=None``: a section heading, label only).

    If the table is wider than ``console.width``, the value columns are split into
    consecutive groups that fit (at least one column each), each printed as its own
    table with the label column; the title goes on the first, the caption on the last.
    Returns the number of tables printed."""
    rows = [(name, None if cells is None else list(cells)) for name, cells in rows]
    unbounded = console.options.update_width(10**6)
    groups: list[list[int]] = []
    current: list[int] = []
    for i in range(len(headers)):
        trial = current + [i]
        t = _table(None, label, [headers[j] for j in trial], _pick(rows, trial), None)
        if current and console.measure(t, options=unbounded).maximum > console.width:
            groups.append(current)
            trial = [i]
        current = trial
    groups.append(current)
    for k, group in enumerate(groups):
        head = title if k == 0 else None
        if head is not None and len(groups) > 1:
            head += f" (columns 1-{len(group)} of {len(headers)})"
        elif len(groups) > 1:
            start = sum(len(g) for g in groups[:k]) + 1
            head = f"(continued: columns {start}-{start + len(group) - 1} of {len(headers)})"
        last = k == len(groups) - 1
        console.print(
            _table(head, label, [headers[j] for j in group], _pick(rows, group),
                   caption if last else None)
        )
    return len(groups)


def _pick(rows, columns: list[int]):
    return [(name, None if cells is None else [cells[j] for j in columns]) for name, cells in rows]
