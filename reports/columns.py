"""Arrow columns as numpy arrays for the report's digest (``reports.digest``).

Read from the columns' buffers rather than with pyarrow's ``to_numpy`` or
``pa.array``/``pa.scalar``, which import pandas on their first use: half a
second a report would pay for nothing. Strings are compared by dictionary
index, never decoded.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.arrays import _array

_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


def _bits(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=offset + n, bitorder="little")[offset:].view(bool)


def numpy_of(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    """An int or bool column as numpy, nulls as ``fill``, read from its
    buffers: pyarrow's to_numpy and scalars import pandas on first use (0.5 s,
    which a report would pay for nothing)."""
    a = _array(col)
    n, offset, (valid, data) = len(a), a.offset, a.buffers()[:2]
    if not n or data is None:
        return np.full(n, fill, bool if pa.types.is_boolean(a.type) else _NUMPY[a.type])
    if pa.types.is_boolean(a.type):
        out = _bits(data, offset, n)
    else:
        dtype = _NUMPY[a.type]
        out = np.frombuffer(data, dtype, count=n, offset=offset * np.dtype(dtype).itemsize)
    if a.null_count:
        out = np.where(_bits(valid, offset, n), out, fill)
    return out


def indices(rows: np.ndarray) -> pa.Array:
    """Row numbers for ``take``, without ``pa.array`` (which imports pandas)."""
    rows = np.ascontiguousarray(rows, np.int64)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


def bools(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return numpy_of(col, False)


def codes(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[Any]]:
    """A string column as (codes, names), null as -1: compared by index, not by string."""
    a = _array(col)
    if not pa.types.is_dictionary(a.type):
        a = pc.dictionary_encode(a)
    return numpy_of(a.indices, -1).astype(np.int64), a.dictionary.to_pylist()


def code_of(names: list[Any], name: str) -> int:
    return names.index(name) if name in names else -2


class Seen:
    """Distinct ints, as a bitmap while they are small and not negative (client
    processes: a sort of every op's process would cost more than the rest)."""

    def __init__(self) -> None:
        self.bits = np.zeros(0, bool)
        self.other: set[Any] = set()

    def add(self, xs: np.ndarray) -> None:
        if not len(xs):
            return
        lo, hi = int(xs.min()), int(xs.max())
        if lo < 0 or hi >= 1 << 26:
            self.other.update(np.unique(xs).tolist())
            return
        if hi >= len(self.bits):
            self.bits = np.concatenate([self.bits, np.zeros(hi + 1 - len(self.bits), bool)])
        self.bits[xs] = True

    def __len__(self) -> int:
        return int(self.bits.sum()) + len({x for x in self.other if not 0 <= x < len(self.bits) or not self.bits[x]})


class Column:
    """An array appended to in place, so that a long history's figures are
    never held twice (as pieces and as their concatenation): one allocation
    of ``capacity`` when a bound is known (pages not yet written take no
    memory), else grown by a quarter at a time; ``array`` trims it with
    realloc (ndarray.resize), which remaps a large block rather than copying
    it."""

    def __init__(self, dtype: Any, capacity: int = 0) -> None:
        self._a = np.empty(capacity, dtype)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, x: np.ndarray) -> None:
        n = self._n + len(x)
        if n > len(self._a):       # (resize zero-fills what it adds: a small step wastes little)
            self._a.resize(max(n, len(self._a) + len(self._a) // 4, 1 << 12), refcheck=False)
        self._a[self._n:n] = x
        self._n = n

    def array(self) -> np.ndarray:
        """The values appended (the column is left empty)."""
        a, n = self._a, self._n
        self._a, self._n = np.empty(0, a.dtype), 0
        a.resize(n, refcheck=False)
        return a
