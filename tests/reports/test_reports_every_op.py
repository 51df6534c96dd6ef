"""Every operation counted (issue 33): the report's figures are of the whole
history, whichever way it is read (history.parquet, the JSONL converted in
memory, op by op), and with no line cap: a history of more lines than the old
2,000,000-line cap shows its op counts whole."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from history.ops import NEMESIS, SAMPLER, read_history
from history.parquet import history_to_parquet
from reports.digest import Digest, digest, digest_tables
from reports.history_source import parquet_tables, run_digest
from reports.load import load_run
from reports.render import build_context

S = 1_000_000_000
KINDS = ("valid", "invalid", "unknown")


def _counts_by_hand(path: Path) -> tuple[int, dict[str, Counter]]:
    """History lines, and client completions per f and type, counted op by op."""
    lines, counts = 0, {}
    for op in read_history(path):
        lines += 1
        if op["process"] not in (NEMESIS, SAMPLER) and op["type"] != "invoke":
            counts.setdefault(op["f"], Counter())[op["type"]] += 1
    return lines, counts


@pytest.mark.parametrize("kind", KINDS)
def test_op_counts_in_the_report_equal_the_history(kind, fixture_copy):
    run_dir = fixture_copy(kind)
    lines, counts = _counts_by_hand(run_dir / "history.jsonl")
    ctx = build_context(load_run(run_dir), plots=False)
    assert dict(ctx["summary"])["history ops"] == str(lines)
    assert {r["f"]: {k: r[k] for k in ("ok", "fail", "info") if r[k]} for r in ctx["computed_ops"]} == \
        {f: dict(c) for f, c in counts.items()}
    assert not any("first" in n and "only" in n for n in ctx["notes"])     # no prefix notice


def _same(a: Digest, b: Digest) -> None:
    for name in ("n_ops", "duration", "start", "processes", "write_start", "write_end", "samples"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("comp_t", "comp_type", "lat_t", "lat_ms", "lat_type", "write_acks"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert dict(a.op_counts) == dict(b.op_counts)
    assert [(e.index, e.f, e.value, e.time) for e in a.nemesis] == [(e.index, e.f, e.value, e.time) for e in b.nemesis]
    assert a.acks.keys() == b.acks.keys() and a.positions.keys() == b.positions.keys()
    for p in a.acks:
        for name in ("t", "offset", "value", "seen"):
            assert np.array_equal(getattr(a.acks[p], name), getattr(b.acks[p], name), equal_nan=True), (p, name)
    for p in a.positions:
        assert all(np.array_equal(x, y) for x, y in zip(a.positions[p], b.positions[p])), p


@pytest.mark.parametrize("kind", KINDS)
def test_every_way_of_reading_a_history_gives_one_digest(kind, fixture_copy):
    """The JSONL converted in memory, history.parquet a slice at a time (slices
    smaller than a row group and larger), and the ops paired one by one."""
    run_dir = fixture_copy(kind)
    jsonl, parquet = run_dir / "history.jsonl", run_dir / "history.parquet"
    from_jsonl, notes = run_digest(run_dir)
    assert not notes and not parquet.exists()       # the report writes nothing into the run
    by_op = digest(read_history(jsonl))
    history_to_parquet(jsonl, parquet)
    from_parquet, _ = run_digest(run_dir)
    for d in (by_op, from_parquet, digest_tables(parquet_tables(parquet, slice_rows=7))):
        _same(from_jsonl, d)


def _big_history(path: Path, sends: int) -> int:
    """``sends`` sends, each read back by a poll, and a fault in the middle;
    returns the number of lines."""
    with open(path, "w") as fh:
        fh.write(json.dumps({"kchaos-history": 2}) + "\n")
        i = 0

        def line(op: dict) -> None:
            nonlocal i
            fh.write(json.dumps({"index": i, "time": i * 1000, **op}, separators=(",", ":")) + "\n")
            i += 1
        for k in range(sends):
            p = k % 3
            line({"process": k % 4, "type": "invoke", "f": "send", "value": [[p, k, None]]})
            line({"process": k % 4, "type": "ok", "f": "send", "value": [[p, k, k // 3]]})
            line({"process": 9, "type": "invoke", "f": "poll", "value": None})
            line({"process": 9, "type": "ok", "f": "poll", "value": {str(p): [[k // 3, k]]}})
            if k == sends // 2:
                line({"process": "nemesis", "type": "invoke", "f": "kill", "value": {"nodes": ["n1"]}})
                line({"process": "nemesis", "type": "info", "f": "kill",
                      "value": {"action": "start", "fault": "kill", "nodes": ["n1"]}})
    return i


def test_a_long_history_is_counted_whole(tmp_path):
    """More paired ops than one slice of history.parquet and more row groups
    than one: the counts, acks and reads are of every op, however it is read."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sends = 30_000
    lines = _big_history(run_dir / "history.jsonl", sends)
    d, notes = run_digest(run_dir)
    assert not notes and d.n_ops == lines == 4 * sends + 2
    assert d.op_counts["send"]["ok"] == d.op_counts["poll"]["ok"] == sends
    assert sum(len(a) for a in d.acks.values()) == sends
    assert all(not np.isnan(a.seen).any() for a in d.acks.values())       # every write read back
    assert sum(len(t) for t, _ in d.positions.values()) == sends
    assert [e.f for e in d.nemesis] == ["kill"]
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")      # 50,000 rows a row group
    _same(d, digest_tables(parquet_tables(run_dir / "history.parquet", slice_rows=20_000)))
    ctx = build_context(load_run(run_dir), plots=False)
    assert dict(ctx["summary"])["history ops"] == str(lines)
