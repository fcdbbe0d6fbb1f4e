"""Reading a chunk: from NanoEvents (or any awkward record array) to flat numpy columns.

This is the only module that touches awkward event records. The maths
(:mod:`analysis.pipeline.backends.jax.passes`) sees plain arrays padded to a few bucket sizes, so that a
future column cache can hand it the same arrays without re-reading ROOT.
"""

from __future__ import annotations

import difflib
import re

import awkward as ak
import numpy as np

from analysis.data.faults import NONFINITE_POLICIES, note_dropped
from analysis.errors import InputError, first_line
from analysis.pipeline.hardcut import kept_counts, survivors
from analysis.pipeline.histplan import SF_PREFIX
from analysis.pipeline.layout import ChunkColumns
from analysis.pipeline.plan import Plan
from analysis.pipeline.split import entry_uniform, event_uniform
from analysis.select.objects import check_counts

__all__ = ["MissingBranchError", "extract_columns"]


class MissingBranchError(InputError):
    """A branch (collection, field) the plan reads is not in the file: ``name``, what it
    is (``what``: ``"branch"``, ``"collection"``, ``"field of Jet"``) and the closest
    names the file has (``close``, best first)."""

    def __init__(self, message: str, name: str = "", what: str = "",
                 close: tuple[str, ...] = ()) -> None:
        super().__init__(message, name, what, close)
        self.name, self.what, self.close = name, what, tuple(close)

    def __str__(self) -> str:
        return str(self.args[0])


def _missing(what: str, name: str, available: list[str], source: str) -> InputError:
    close = tuple(difflib.get_close_matches(name, available, n=3))
    return MissingBranchError(f"{source}: no {what} {name!r}{suggestion(close)}", name, what,
                              close)


def suggestion(close: tuple[str, ...]) -> str:
    """``"; did you mean 'a'? (or 'b', 'c')"`` of the closest names, best first ("" if none).

    Parameters
    ----------
    close : tuple of str
        The closest names, best first.

    Returns
    -------
    str
    """
    if not close:
        return ""
    more = f" (or {', '.join(repr(c) for c in close[1:])})" if len(close) > 1 else ""
    return f"; did you mean {close[0]!r}?{more}"


def _get(record, name: str, what: str, source: str):
    fields = list(getattr(record, "fields", []) or [])
    if name not in fields:
        raise _missing(what, name, fields, source)
    return record[name]


_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]$")


def _event_branch(events, key: str, source: str) -> np.ndarray:
    fields = list(events.fields)
    item = _ITEM.match(key)
    if item:  # B[i]: entry i of a per-event array branch (PSWeight[0], LHEScaleWeight[4])
        name, i = item.group(1), int(item.group(2))
        value = _get(events, name, "branch", source)
        n = np.asarray(ak.to_numpy(ak.num(value, axis=1)))
        short = np.flatnonzero(n <= i)
        if short.size:
            entry = int(short[0]) + int((getattr(events, "metadata", None) or {}).get(
                "entrystart") or 0)
            raise InputError(f"{source}: branch {key!r}: entry {entry} has {int(n[short[0]])} "
                             f"values of {name}; expected more than {i}")
        return np.asarray(ak.to_numpy(value[:, i]), dtype=np.float64)
    if "." in key:
        head, tail = key.split(".", 1)
        value = _get(_get(events, head, "branch", source), tail, f"field of {head}", source)
    elif key in fields:
        value = events[key]
    elif "_" in key and key.split("_", 1)[0] in fields:
        # NanoAODSchema groups MET_pt into MET.pt; accept the flat branch name too.
        head, tail = key.split("_", 1)
        value = _get(events[head], tail, f"field of {head}", source)
    else:
        raise _missing("branch", key, fields, source)
    layout = ak.to_layout(value)
    if layout.purelist_depth != 1 or not hasattr(value, "to_numpy"):
        raise InputError(
            f"{source}: branch {key!r} is not one number per event (type {ak.type(value)}); "
            "per-object quantities need an object set, or sum()/count() of one"
        )
    return np.asarray(ak.to_numpy(value), dtype=np.float64)


def extract_columns(
    events,
    plan: Plan,
    *,
    weight_branch: str | None,
    source: str,
    nonfinite: str | None = None,
    uid: bool = True,
) -> ChunkColumns:
    """Read what ``plan`` needs from one chunk of ``events``.

    ``source`` (usually the file name) is named in every error message. ``uid``: compute
    each event's number in [0, 1) (``ChunkColumns.uid``, from ``run``,
    ``luminosityBlock`` and ``event`` where the file has them: three more branches
    read); ``False`` leaves it None, for a pass that neither splits events nor keeps
    the columns (validation splits and bootstrap replicas need it).

    Non-finite values (NaN, +-inf) in any column read, weights included, are never
    passed on: with ``nonfinite="error"`` (the default) they raise an
    :class:`InputError` naming ``source``, the branch and the first such entry (the
    entry number in the file: the chunk's ``entrystart`` from ``events.metadata`` is
    added); with ``"drop"`` the events holding a non-finite value (an object field,
    the weight or a per-event branch) are removed and their numbers noted
    (:func:`analysis.data.faults.note_dropped`). ``None`` takes the policy from
    ``events.metadata["nonfinite"]`` (set by the driver for every chunk), else ``"error"``.
    """
    meta = getattr(events, "metadata", None) or {}
    policy = nonfinite or meta.get("nonfinite") or "error"
    if policy not in NONFINITE_POLICIES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_POLICIES}, got {policy!r}")
    n = len(events)
    if weight_branch is not None:
        weight = _event_branch(events, weight_branch, source)
    else:
        weight = np.ones(n, dtype=np.float64)
    cols = ChunkColumns(n_events=n, weight=weight,
                        uid=_event_uid(events, meta, n) if uid else None)
    for name, fields in plan.sets.fields:
        coll = _get(events, name, "collection", source)
        counts = np.asarray(ak.to_numpy(ak.num(coll, axis=1)), dtype=np.int64)
        flat = {
            f: np.asarray(
                ak.to_numpy(ak.flatten(_get(coll, f, f"field of {name}", source))),
                dtype=np.float64,
            )
            for f in fields if not f.startswith(SF_PREFIX)
        }
        if name in plan.sets.caps:  # objects.<set>.max_objects: one line, no truncation
            check_counts(_capped_counts(plan, name, counts, flat), plan.sets.caps[name],
                         collection=name, source=source, of=counts,
                         offset=int(meta.get("entrystart") or 0), key=plan.sets.cap_keys[name])
        for corr in plan.corrections:  # per-object scale factors (correctionlib)
            if corr.collection == name:
                flat[corr.field] = _scale_factors(corr, flat, source)
        cols.collections[name] = (counts, flat)
    for key in plan.event_keys:
        cols.events[key] = _event_branch(events, key, source)
    return _finite(
        cols,
        plan,
        weight_branch=weight_branch,
        policy=policy,
        source=source,
        offset=int(meta.get("entrystart") or 0),
    )


def _capped_counts(plan: Plan, collection: str, counts: np.ndarray,
                   flat: dict[str, np.ndarray]) -> np.ndarray:
    """Per event, the objects of ``collection`` that ``max_objects`` counts: those that
    can pass the cuts of one of its root sets configured with width 0 and constant
    thresholds (:func:`analysis.pipeline.hardcut.survivors`: in the nominal columns and
    under every shift of the cut's field). The others are out of every set at every
    parameter point, so no enumeration, candidate or bound ever counts them; the
    columns keep them all the same."""
    keep = survivors(plan, collection, flat, int(counts.sum()))
    return counts if keep is None else kept_counts(counts, keep)


_EVENT_IDS = ("run", "luminosityBlock", "event")


def _event_uid(events, meta: dict, n: int) -> np.ndarray:
    """Each event's number in [0, 1) (:mod:`analysis.pipeline.split`): from (run,
    luminosityBlock, event) where the file has them, else from the file's UUID (or
    name) and the entry number."""
    fields = set(getattr(events, "fields", ()) or ())
    if set(_EVENT_IDS) <= fields:
        ids = [np.asarray(ak.to_numpy(events[k])) for k in _EVENT_IDS]
        return event_uniform(*ids)
    raw = meta.get("fileuuid") or meta.get("filename") or ""
    file_id = raw.hex() if isinstance(raw, (bytes, bytearray)) else str(raw)
    start = int(meta.get("entrystart") or 0)
    return entry_uniform(file_id, np.arange(start, start + n, dtype=np.int64))


def _scale_factors(corr, flat: dict[str, np.ndarray], source: str) -> np.ndarray:
    """The correction of every object (flat float64), from its fields ``corr.inputs``."""
    from analysis.data.corrections import correction

    args = []
    for x in corr.inputs:
        v = flat[x[4:]] if x.startswith("abs_") else flat[x]
        args.append(np.abs(v) if x.startswith("abs_") else v)
    fn = correction(corr.path, corr.key)
    try:
        values = fn.evaluate(*_ordered(fn, args, corr.side))
    except Exception as err:  # noqa: BLE001  (correctionlib's own errors: one line)
        raise InputError(
            f"{source}: correction {corr.key!r} of {corr.path}: {first_line(err)}") from None
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _ordered(fn, numbers: list, side: str) -> list:
    """The correction's arguments in its input order: the string input is ``side``."""
    it = iter(numbers)
    return [side if v.type == "string" else next(it) for v in fn.inputs]


def _finite(
    cols: ChunkColumns,
    plan: Plan | None,
    *,
    weight_branch: str | None,
    policy: str,
    source: str,
    offset: int,
) -> ChunkColumns:
    """``cols`` without non-finite values (see :func:`extract_columns`): an error naming
    the first bad entry, or with ``drop`` the events holding any non-finite value
    (objects included) are removed and counted. An object is never dropped alone: that
    would change its event's counts and indices, so the whole event goes (one policy
    for every selection)."""
    bad_events: dict[str, np.ndarray] = {}
    first: dict[str, float] = {}  # the first non-finite value of each branch
    for name, (counts, flat) in cols.collections.items():
        event_of = None  # made only for a column with a non-finite value
        for f, v in flat.items():
            if np.isfinite(v).all():
                continue
            m = ~np.isfinite(v)
            if event_of is None:
                event_of = np.repeat(np.arange(cols.n_events), counts)
            bad_events[f"{name}_{f}"] = np.bincount(event_of[m], minlength=cols.n_events
                                                    ).astype(bool)
            first[f"{name}_{f}"] = v[int(np.argmax(m))]
    for key, v in cols.events.items():
        if not np.isfinite(v).all():
            bad_events[key] = ~np.isfinite(v)
            first[key] = v[int(np.argmax(bad_events[key]))]
    if weight_branch is not None and not np.isfinite(cols.weight).all():
        bad_events[weight_branch] = ~np.isfinite(cols.weight)
        first[weight_branch] = cols.weight[int(np.argmax(bad_events[weight_branch]))]
    if not bad_events:
        return cols
    if policy == "error":
        branch, m = min(bad_events.items(), key=lambda kv: int(np.argmax(kv[1])))
        raise InputError(
            f"{source}: branch {branch!r} has a non-finite value ({first[branch]}) at entry "
            f"{offset + int(np.argmax(m))}; expected finite numbers (or set "
            "'nonfinite: drop' to drop such events)"
        )
    keep = np.ones(cols.n_events, dtype=bool)
    for branch, m in bad_events.items():
        note_dropped(branch, events=int((m & keep).sum()))
        keep &= ~m
    out = {}
    for name, (counts, flat) in cols.collections.items():
        keep_obj = np.repeat(keep, counts)
        out[name] = (counts[keep], {f: v[keep_obj] for f, v in flat.items()})
    return ChunkColumns(
        n_events=int(keep.sum()), weight=cols.weight[keep],
        events={k: v[keep] for k, v in cols.events.items()}, collections=out,
        uid=None if cols.uid is None else cols.uid[keep],
    )
