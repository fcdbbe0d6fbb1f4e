"""One column cache (issue 51): the YAML engine and own processors keep chunk columns
under one chunk key (:func:`analysis.data.cache.chunk_key`) in one store
(:class:`analysis.data.cache.ColumnCache`). Fast: no file is read.

References: the key against the fields it must hold (an own processor's chunk is the
YAML key of the same file and range plus its class and its dataset's metadata); the
``evict="drop"`` store against a plain least-recently-used list kept by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from analysis.data import owncache, ownkeys, placement
from analysis.data.cache import ColumnCache, chunk_key

UUID = "0b8b4e8a-7e53-11ee-9e2b-0242ac120002"


class Own(owncache.CachedColumns):
    def column_key(self):
        return ("jets", 2)


def test_an_own_chunk_has_the_one_key():
    meta = {"fileuuid": UUID, "treename": "Events", "entrystart": 100, "entrystop": 200,
            "dataset": "mc", "filename": "/x/a.root", "isMC": True}
    key = ownkeys.own_key(Own(), meta)
    yaml_key = chunk_key(UUID, "Events", 100, 200, branches="[...]", weight_branch="genWeight",
                         nonfinite="drop")
    assert len(key) == len(yaml_key) and key[:4] == yaml_key[:4]  # the file and the range
    assert key == chunk_key(UUID, "Events", 100, 200,
                            branches=(Own.__module__, Own.__qualname__, ("jets", 2)),
                            weight_branch=None, nonfinite=None, metadata=key[-1])
    assert yaml_key[-1] is None  # the YAML engine's columns depend on no dataset
    assert ownkeys.own_key(Own(), {**meta, "dataset": "data"}) != key
    # its store: the one ColumnCache, in this process's registry by the processor's token
    owncache.clear_cache()
    store = owncache._store(Own())
    assert isinstance(store, ColumnCache) and store.evict == "drop"
    assert placement.store(owncache.OWN_STORE) is store and owncache.clear_cache() == 0
    assert placement.store(owncache.OWN_STORE) is None


def test_the_drop_store_is_least_recently_used_within_its_budget():
    store = ColumnCache(budget=30, evict="drop")
    order: list[str] = []  # the reference: least recently used first

    def put(k, n):
        kept = store.put((k,), np.zeros(n // 8), nbytes=n)
        if n <= 30:
            while order and sum(sizes[o] for o in order) + n > 30:
                order.pop(0)
            order.append(k)
        sizes[k] = n
        return kept

    sizes: dict[str, int] = {}
    assert put("a", 8) and put("b", 8) and put("c", 8)
    store.get(("a",))
    order.remove("a")
    order.append("a")
    assert put("d", 8)  # drops b, the least recently used
    assert [k[0] for k in store.keys()] == order == ["c", "a", "d"]
    assert store.memory_bytes == 24
    assert not put("e", 40)  # larger than the budget: not kept, nothing dropped
    assert [k[0] for k in store.keys()] == order and store.spilled == 0
    store.get(("c",), touch=False)  # a look that does not count as a use
    assert [k[0] for k in store.keys()] == ["c", "a", "d"]


def test_only_chunk_columns_spill():
    store = ColumnCache(budget=8)
    assert store.put(("a",), object(), nbytes=8)
    with pytest.raises(TypeError, match="only ChunkColumns spill"):
        store.put(("b",), object(), nbytes=8)
    with pytest.raises(ValueError, match="evict: expected 'spill' or 'drop'"):
        ColumnCache(evict="lru")
