"""Sorting-based array helpers the Spark engine's per-partition passes share
(spark_partition, spark_chains, spark_txn, spark_groups), and the packing of
sorted samples they send the driver."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


_ZSTD = pa.Codec("zstd", 1)


def pack_sorted(a: np.ndarray) -> bytes:
    """int64 samples sorted and compressed, with their count first: a 10M-op
    history's lag samples, 27 MB raw on their way to the driver, are 0.3 MB."""
    a = np.sort(a.astype(np.int64, copy=False), kind="stable")      # timsort: ack times come nearly sorted
    return np.int64(len(a)).tobytes() + _ZSTD.compress(a.tobytes(), asbytes=True)


def unpack_sorted(b: bytes) -> np.ndarray:
    n = int(np.frombuffer(b[:8], np.int64)[0])
    return np.frombuffer(_ZSTD.decompress(b[8:], decompressed_size=8 * n, asbytes=True), np.int64)


def rows_by(key: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The rows under ``mask`` ordered by ``key``, ties in row order. A stable
    sort: a partition's offsets and values come nearly in order (history
    order), and timsort takes such runs whole."""
    if mask.all():
        return np.argsort(key, kind="stable")
    rows = np.flatnonzero(mask)
    return rows[np.argsort(key[rows], kind="stable")]


def unique(a: np.ndarray, kind: str | None = None) -> np.ndarray:
    """np.unique of a 1-D array, by sorting. numpy 2.4's np.unique hashes
    instead, and on 1.9M int64 offsets that took 0.9 s against 0.03 s sorted:
    half of the 10M-op partition pass (bench/checker_throughput.py). ``kind``
    "stable" (timsort) for input mostly in order already, as a partition's
    offsets and values are in history order: 18M offsets sorted in 0.15 s so
    against 0.55 s by the default quicksort."""
    s = np.sort(a, kind=kind)
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def dedup_sorted(s: np.ndarray) -> np.ndarray:
    """unique of an already sorted array: no sort."""
    return s[np.r_[True, s[1:] != s[:-1]]] if len(s) else s


def _groups(sorted_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Start and end indexes of runs of equal key tuples in sorted arrays."""
    n = len(sorted_keys[0])
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    change = np.zeros(n, bool)
    change[0] = True
    for k in sorted_keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    return starts, np.append(starts[1:], n)


def _first_k(keys: list[np.ndarray], k: int) -> np.ndarray:
    """Indexes of the k least rows by the key tuple (first key most significant)."""
    if len(keys[0]) == 0:
        return np.zeros(0, np.int64)
    return np.lexsort(tuple(reversed(keys)))[:k]


def spans(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The indexes lo[0]..hi[0]-1, lo[1]..hi[1]-1, ... in one array."""
    n = hi - lo
    return np.repeat(lo - np.cumsum(n) + n, n) + np.arange(int(n.sum()))


def lexsort_grouped(majors: list[np.ndarray], rows: np.ndarray, minors: list[np.ndarray]) -> np.ndarray | None:
    """np.lexsort((*(m[rows] for m in reversed(minors)), *reversed(majors))):
    the order of ``rows`` by ``majors`` (one value per row, first most
    significant), then by the columns ``minors`` (taken at ``rows``), ties in
    place; None when that is their own order. History order comes in runs of
    one major group (a poll's or a send's messages, a process's ops one after
    another), and within a group in minor order (op, position): then the runs,
    sorted by group, are the order, a sort of the runs and not of the rows (the
    lexsort of 19M reads took about 2 s). Checked, and the lexsort when not so."""
    n = len(rows)
    mins = [m[rows] for m in minors]
    if n > 1:
        new = np.zeros(n, bool)
        new[0] = True
        for m in majors:
            new[1:] |= m[1:] != m[:-1]
        starts = np.flatnonzero(new)
        if len(starts) <= n // 8 + 1:
            ro = np.lexsort(tuple(m[starts] for m in reversed(majors)))   # the runs by group, stably
            s, e = starts[ro], np.append(starts[1:], n)[ro]
            same = np.ones(len(s) - 1, bool)                               # successive runs of one group
            for m in majors:
                same &= m[s[1:]] == m[s[:-1]]
            if not (_descends(mins, slice(None, -1), slice(1, None))[~new[1:]].any()
                    or _descends(mins, e[:-1] - 1, s[1:])[same].any()):
                return None if (ro[1:] > ro[:-1]).all() else spans(s, e)
    return np.lexsort((*reversed(mins), *reversed(majors)))


def count_distinct(a: np.ndarray, kind: str | None = None) -> int:
    """len(unique(a, kind)), without making the unique array."""
    s = np.sort(a, kind=kind)
    return int(len(s) and 1 + np.count_nonzero(s[1:] != s[:-1]))


def _descends(keys: list[np.ndarray], i: np.ndarray | slice, j: np.ndarray | slice) -> np.ndarray:
    """Whether the rows ``j`` come before the rows ``i`` by ``keys`` (first most significant)."""
    down: np.ndarray | bool = False
    tied: np.ndarray | bool = True
    for k in keys:
        a, b = k[i], k[j]
        down = down | (tied & (b < a))
        tied = tied & (b == a)
    return np.asarray(down)
