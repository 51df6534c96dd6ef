"""The shortcuts of the per-partition pass (spark_arrays, spark_partition.offsets)
against the plain formulation they stand for: the order of a lexsort, the
inconsistent offsets and duplicates of every (offset, value) pair."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from checkers.spark_arrays import count_distinct, dedup_sorted, lexsort_grouped, spans
from checkers.spark_partition import Context, analyze_group
from history.message_index import MESSAGE_SCHEMA


def _lexsort(majors: list[np.ndarray], rows: np.ndarray, minors: list[np.ndarray]) -> np.ndarray:
    return np.lexsort((*(m[rows] for m in reversed(minors)), *reversed(majors)))


@st.composite
def _runs(draw: st.DrawFn) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]:
    """Rows in runs of one group (long runs: the shortcut's case), minor keys
    mostly rising within a group, with ties and the odd descent."""
    n = draw(st.integers(0, 120))
    groups = draw(st.integers(1, 4))
    run = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    g = np.repeat(rng.integers(0, groups, n // run + 1), run)[:n]
    flag = rng.random(n) < draw(st.sampled_from([0.0, 0.5]))
    ids = np.cumsum(rng.integers(0, 2, n)).astype(np.int64)
    if n and draw(st.booleans()):
        ids[rng.integers(0, n)] -= draw(st.integers(1, 3))
    pos = rng.integers(0, 3, n).astype(np.int32)
    rows = np.sort(rng.choice(n + 5, n, replace=False))
    full_ids, full_pos = np.zeros(n + 5, np.int64), np.zeros(n + 5, np.int32)
    full_ids[rows], full_pos[rows] = ids, pos
    return [g * 10**6, flag], rows, [full_ids, full_pos]


@settings(max_examples=400, deadline=None)
@given(_runs())
def test_lexsort_grouped_is_the_lexsort(case: tuple[list[np.ndarray], np.ndarray, list[np.ndarray]]) -> None:
    majors, rows, minors = case
    got = lexsort_grouped(majors, rows, minors)
    want = _lexsort(majors, rows, minors)
    assert np.array_equal(np.arange(len(rows)) if got is None else got, want)


def test_small_helpers() -> None:
    assert spans(np.array([2, 10]), np.array([4, 13])).tolist() == [2, 3, 10, 11, 12]
    assert spans(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
    assert dedup_sorted(np.array([1, 1, 2, 5, 5])).tolist() == [1, 2, 5]
    assert count_distinct(np.array([3, 1, 3, 2]), "stable") == 3 and count_distinct(np.zeros(0)) == 0


def _table(rows: list[tuple[int, int, int, int]]) -> pa.Table:
    """(op, kind, offset, value) per message: kind 0 an acked send, 4 a read."""
    n = len(rows)
    return pa.Table.from_pydict({
        "id": [r[0] for r in rows], "pos": [0] * n, "process": [r[0] % 3 for r in rows], "producer": [None] * n,
        "kind": [r[1] for r in rows], "rc": [True] * n, "t_inv": [r[0] for r in rows],
        "t_done": [r[0] + 1 for r in rows], "offset": [r[2] for r in rows], "value": [r[3] for r in rows]},
        schema=MESSAGE_SCHEMA)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 4]), st.integers(0, 6), st.integers(0, 6)), max_size=40),
       st.integers(1, 3))
def test_offsets_against_pairs(msgs: list[tuple[int, int, int]], k: int) -> None:
    """inconsistent-offset and duplicate as the distinct (offset, value) pairs, each
    with its lowest op, define them; the inconsistent row with each offset's
    earliest ack."""
    rows = [(i, kind, o, v) for i, (kind, o, v) in enumerate(msgs)]
    key = (pa.scalar(0, pa.int32()), pa.scalar(0, pa.int32()))
    out = analyze_group(key, _table(rows), Context(k=k)).to_pylist()
    first: dict[tuple[int, int], int] = {}
    acked: dict[int, int] = {}
    for i, kind, o, v in rows:
        first[(o, v)] = min(first.get((o, v), i), i)
        if kind == 0:
            acked[o] = min(acked.get(o, i + 1), i + 1)
    by_off, by_val = defaultdict(list), defaultdict(list)
    for (o, v), i in sorted(first.items()):
        by_off[o].append((v, i))
        by_val[v].append((o, i))
    inc = sorted(o for o, vs in by_off.items() if len(vs) > 1)
    dup = sorted(v for v, os in by_val.items() if len(os) > 1)
    count = {r["type"]: r["n"] for r in out if r["what"] == "count"}
    assert count["inconsistent-offset"] == len(inc) and count["duplicate"] == len(dup)
    wit = [(r["type"], r["key"], r["offsets"], r["values"], r["ids"]) for r in out if r["what"] == "witness"
           and r["type"] in ("inconsistent-offset", "duplicate")]
    assert wit == ([("inconsistent-offset", [0, o], [o], [v for v, _ in by_off[o]], [i for _, i in by_off[o]])
                    for o in inc[:k]]
                   + [("duplicate", [0, v], [o for o, _ in by_val[v]], [v], [i for _, i in by_val[v]])
                      for v in dup[:k]])
    row = next(r for r in out if r["what"] == "inconsistent")
    assert row["offsets"] == inc
    assert np.frombuffer(row["blob"], np.int64).tolist() == [acked.get(o, -1) for o in inc]
