"""The per-chunk memo of :mod:`analysis.pipeline.backends.numba._chunkmemo`: it lives as long as its
columns object and no longer, a copy of the columns starts its own, and an entry is made
again when an array it was made from is replaced."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np

from analysis.pipeline.backends.numba import _chunkmemo
from analysis.pipeline.backends.numba._chunkmemo import chunk_memo, remember
from analysis.pipeline.layout import ChunkColumns


def cols(n: int = 4) -> ChunkColumns:
    return ChunkColumns(n_events=n, weight=np.ones(n), events={"x": np.arange(n, dtype=float)})


def test_one_memo_per_columns_object_and_gone_with_it():
    a = cols()
    memo = chunk_memo(a)
    memo["k"] = 1
    assert chunk_memo(a) is memo
    b = dataclasses.replace(a, weight=np.full(4, 2.0))  # a copy: its own memo
    assert chunk_memo(b) is not memo and "k" not in chunk_memo(b)
    assert chunk_memo(cols()) is not memo  # equal columns, another object
    n = len(_chunkmemo._MEMOS)
    del a, memo
    gc.collect()
    assert len(_chunkmemo._MEMOS) == n - 1


def test_remember_makes_again_when_a_source_is_replaced():
    memo: dict = {}
    made = []

    def make(v):
        made.append(v)
        return v

    x, y = np.zeros(3), np.ones(3)
    assert remember(memo, "k", (x, y), lambda: make(1)) == 1
    assert remember(memo, "k", (x, y), lambda: make(2)) == 1  # kept
    assert remember(memo, "k", (x, y.copy()), lambda: make(3)) == 3  # equal, not the same
    assert remember(memo, "k", (x,), lambda: make(4)) == 4
    assert made == [1, 3, 4]
