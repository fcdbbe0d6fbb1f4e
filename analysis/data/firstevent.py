"""The first event of a NanoAOD TTree, read with uproot alone, as the records
:func:`~analysis.data.columns.extract_columns` reads.

coffea's ``NanoEventsFactory.from_root`` builds the schema of every branch of the file
(654 on a NanoAOD v12 file: ~0.5-1 s) before anything is read; checking that a plan's
columns can be read from a file's first event needs only the branches it reads.
:class:`FirstEvent` gives the top-level names that coffea's NanoAOD schema would (a
collection ``X`` from its counter ``nX`` and its branches ``X_<field>``, a record ``MET``
from its ``MET_<field>`` branches, a plain branch as itself) and reads an item when asked.
A collection holds only the fields ``wanted`` names that the file has: a name it lacks
is missing here, and the caller asks coffea again for the words and the closest names
(coffea adds fields of its own, ``Jet.charge``, ``Jet.genJetIdxG``).
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np

__all__ = ["FirstEvent"]


class FirstEvent:
    """The first entry of ``tree`` as a read-on-demand record of NanoAOD names.

    Parameters
    ----------
    tree : uproot TTree
        An open TTree with at least one entry.
    wanted : dict of str to collection of str
        Collection -> the fields to read from it (``plan.sets.fields``).
    """

    def __init__(self, tree: Any, wanted: dict[str, Any]) -> None:
        self._tree = tree
        self._wanted = {c: tuple(f) for c, f in wanted.items()}
        self._branches = list(tree.keys())
        self._names = set(self._branches)
        heads = dict.fromkeys(k.split("_", 1)[0] for k in self._branches)
        #: the top-level names, as coffea's NanoAOD schema gives them (counters left out)
        self.fields = [h for h in heads if not (h.startswith("n") and h[1:] in heads)]
        self.metadata = {"entrystart": 0}
        self._items: dict[str, Any] = {}

    def __len__(self) -> int:
        return min(int(self._tree.num_entries), 1)

    def __getitem__(self, name: str) -> Any:
        if name not in self._items:
            self._items[name] = self._read(name)
        return self._items[name]

    def _array(self, branch: str) -> Any:
        return self._tree[branch].array(entry_stop=1, library="ak")

    def _read(self, name: str) -> Any:
        if name not in self.fields:
            raise KeyError(name)
        names = self._names
        if name in names:  # a branch of its own (genWeight; PSWeight, counted by nPSWeight)
            return self._array(name)
        prefix = f"{name}_"
        if f"n{name}" in names:  # a collection: its counter and the fields asked for
            counts = np.asarray(self._array(f"n{name}"), dtype=np.int64)
            fields = [f for f in self._wanted.get(name, ()) if prefix + f in names]
            if not fields:
                empty = ak.contents.RecordArray([], [], length=int(counts.sum()))
                return ak.unflatten(ak.Array(empty), counts)
            return ak.zip({f: self._array(prefix + f) for f in fields})
        # a record of one value per event (MET_pt, MET_phi: MET.pt, MET.phi)
        return ak.zip({k[len(prefix):]: self._array(k) for k in self._branches
                       if k.startswith(prefix)}, depth_limit=1)
