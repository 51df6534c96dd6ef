"""Sorting-based array helpers the Spark engine's per-partition passes share
(spark_partition, spark_chains, spark_txn, spark_groups)."""
from __future__ import annotations

import numpy as np


def unique(a: np.ndarray) -> np.ndarray:
    """np.unique of a 1-D array, by sorting. numpy 2.4's np.unique hashes
    instead, and on 1.9M int64 offsets that took 0.9 s against 0.03 s sorted:
    half of the 10M-op partition pass (bench/checker_throughput.py)."""
    s = np.sort(a)
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
