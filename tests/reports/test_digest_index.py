"""The report's digest reads a history's messages from its message index
(history.messages.parquet) when that is current, and from history.parquet's
nested messages column otherwise: both ways give one digest, field by field
(array order within a partition and NaN places in ``seen`` included), for
sends, info sends acknowledged in part, txns, polls with and without an
invoke, the drain, values sent never read and read never sent, sparse values
and many partitions."""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import reports.digest as digest_module
from history.convert import history_tables
from history.parquet import history_to_parquet
from history.row_groups import index_path
from reports.columns import Column
from reports.digest import Digest, digest_tables
from reports.digest_messages import FirstReads, _reduce, index_plan
from reports.history_source import parquet_digest, parquet_tables, run_digest

KINDS = ("valid", "invalid", "unknown")


def _same(a: Digest, b: Digest) -> None:
    """Every field equal: arrays element for element (and of one dtype), NaNs in place."""
    for f in fields(Digest):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        elif f.name == "acks":
            assert list(x) == list(y)
            for p in x:
                for name in ("t", "offset", "value", "seen"):
                    u, v = getattr(x[p], name), getattr(y[p], name)
                    assert u.dtype == v.dtype and np.array_equal(u, v, equal_nan=u.dtype.kind == "f"), (p, name)
        elif f.name == "positions":
            assert list(x) == list(y)
            for p in x:
                assert all(u.dtype == v.dtype and np.array_equal(u, v) for u, v in zip(x[p], y[p])), p
        elif f.name == "op_counts":
            assert dict(x) == dict(y)
        else:
            assert x == y, f.name


def _odd_history(path: Path, ops: int, seed: int, partitions: int = 4, sparse: bool = False) -> None:
    """A history of odd cases: ok, info (acknowledged in part) and failed
    sends; ok, failed and drain polls; txns of each type; polls completing
    with no invoke; samples, faults and ops never completed."""
    rnd = random.Random(seed)
    lines: list[dict] = [{"kchaos-history": 2}]
    sent: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    offs = dict.fromkeys(range(partitions), 0)
    pending: dict[int, dict] = {}
    counter = [0]

    def line(op: dict) -> None:
        lines.append({"index": len(lines) - 1, "time": len(lines) * 997 + rnd.randint(0, 900), **op})

    def value() -> int:
        counter[0] += 1
        return counter[0] * 1_000_003 - 50 if sparse else counter[0]

    def ack(p: int, v: int) -> list:
        sent[p].append((offs[p], v))
        offs[p] += 1
        return [p, v, offs[p] - 1]

    def some(p: int) -> list:
        a = rnd.randrange(len(sent[p])) if sent[p] else 0
        return [list(x) for x in sent[p][a:a + rnd.randint(0, 4)]] + ([[99, 10**9]] if rnd.random() < 0.05 else [])

    for k in range(ops):
        proc = rnd.randrange(6)
        inv, r = pending.pop(proc, None), rnd.random()
        if inv is not None and inv["f"] == "send":
            if r < 0.7:
                line({"process": proc, "type": "ok", "f": "send", "value": [ack(p, v) for p, v, _ in inv["value"]]})
            else:
                typ = "info" if r < 0.85 else "fail"
                out = [ack(p, v) if typ == "info" and rnd.random() < 0.5 else [p, v, None] for p, v, _ in inv["value"]]
                line({"process": proc, "type": typ, "f": "send", "value": out})
        elif inv is not None and inv["f"] == "poll":
            if r < 0.8:
                polled = {str(p): some(p) for p in rnd.sample(range(partitions), rnd.randint(0, 3))}
                line({"process": proc, "type": "ok", "f": "poll", "value": polled, **({"drain": True} if inv.get("drain") else {})})
            else:
                line({"process": proc, "type": rnd.choice(["fail", "info"]), "f": "poll", "value": None})
        elif inv is not None:
            typ = rnd.choice(["ok", "ok", "fail", "info"])
            mops = [["send", m[1], m[2], offs[m[1]] + i] if m[0] == "send" else ["poll", {"0": some(0)}]
                    for i, m in enumerate(inv["value"])]
            if typ == "ok":
                for m in mops:
                    if m[0] == "send":
                        ack(m[1], m[2])
            line({"process": proc, "type": typ, "f": "txn", "value": mops})
        elif r < 0.45:
            pending[proc] = {"process": proc, "type": "invoke", "f": "send",
                             "value": [[p, value(), None] for p in rnd.sample(range(partitions), rnd.randint(1, 3))]}
        elif r < 0.8:
            pending[proc] = {"process": proc, "type": "invoke", "f": "poll", "value": None,
                             **({"drain": True} if k > ops * 0.9 else {})}
        elif r < 0.9:
            pending[proc] = {"process": proc, "type": "invoke", "f": "txn",
                             "value": [["send", rnd.randrange(partitions), value()] if rnd.random() < 0.6 else ["poll"]
                                       for _ in range(3)]}
        elif r < 0.93:      # a poll's completion with no invoke: its reads count, its positions do not
            p = rnd.randrange(partitions)
            line({"process": 50 + rnd.randrange(3), "type": "ok", "f": "poll", "value": {str(p): some(p)}})
        elif r < 0.96:
            line({"process": "sampler", "type": "ok", "f": "sample",
                  "value": {"controller": 1, "partitions": {"0": {"leader": 1, "isr": [1, 2], "epoch": 3}}}})
        else:
            line({"process": "nemesis", "type": "invoke", "f": "kill", "value": {"nodes": ["n1"]}})
            line({"process": "nemesis", "type": "info", "f": "kill",
                  "value": {"action": "start", "fault": "kill", "nodes": ["n1"]}})
        if proc in pending and pending[proc] is not inv:
            line(pending[proc])
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))


def _run(tmp_path: Path, name: str, **kw) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    _odd_history(run_dir / "history.jsonl", **kw)
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
    return run_dir


def _ways(run_dir: Path) -> list[Digest]:
    """The index's way (slices of several sizes) and the messages column's."""
    parquet = run_dir / "history.parquet"
    assert index_plan(parquet, index_path(parquet)) is not None
    return [parquet_digest(parquet), parquet_digest(parquet, slice_rows=7), parquet_digest(parquet, use_index=False),
            digest_tables(parquet_tables(parquet, slice_rows=7)), digest_tables(history_tables(run_dir / "history.jsonl"))]


@pytest.mark.parametrize("kind", KINDS)
def test_the_fixtures_digest_the_same_from_the_index(kind, fixture_copy):
    run_dir = fixture_copy(kind)
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
    first, *others = _ways(run_dir)
    assert first.acks and first.positions
    for d in others:
        _same(first, d)


@pytest.mark.parametrize("seed,partitions,sparse", [(1, 4, False), (2, 12, False), (3, 3, True)])
def test_odd_histories_digest_the_same_from_the_index(tmp_path, monkeypatch, seed, partitions, sparse):
    """12 partitions: split by a sort, not a mask each; sparse values: first
    reads kept as sorted pieces, not a table; a small MESSAGE_CHUNK: the
    messages column flattened a few ops at a time."""
    run_dir = _run(tmp_path, "run", ops=6000, seed=seed, partitions=partitions, sparse=sparse)
    first, *others = _ways(run_dir)
    assert any(np.isnan(a.seen).any() for a in first.acks.values())       # some acks never read
    assert len(first.acks) == partitions and len(first.nemesis) and len(first.samples)
    for d in others:
        _same(first, d)
    monkeypatch.setattr(digest_module, "MESSAGE_CHUNK", 5)
    _same(first, parquet_digest(run_dir / "history.parquet", use_index=False))


def test_positions_of_a_poll_with_no_invoke_are_left_out(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ops = [{"kchaos-history": 2},
           {"index": 0, "time": 10, "process": 0, "type": "invoke", "f": "send", "value": [[0, 7, None]]},
           {"index": 1, "time": 20, "process": 0, "type": "ok", "f": "send", "value": [[0, 7, 0]]},
           {"index": 2, "time": 30, "process": 5, "type": "ok", "f": "poll", "value": {"0": [[0, 7]]}},
           {"index": 3, "time": 40, "process": 1, "type": "invoke", "f": "poll", "value": None},
           {"index": 4, "time": 50, "process": 1, "type": "ok", "f": "poll", "value": {"0": [[0, 7]]}}]
    (run_dir / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in ops))
    history_to_parquet(run_dir / "history.jsonl", run_dir / "history.parquet")
    d = parquet_digest(run_dir / "history.parquet")
    assert d.acks[0].seen.tolist() == [30 / 1e9]         # the lone poll's read counts
    assert d.positions[0][0].tolist() == [40 / 1e9]      # its position does not
    _same(d, parquet_digest(run_dir / "history.parquet", use_index=False))


def test_an_index_not_of_this_history_is_not_read(tmp_path):
    a, b = _run(tmp_path, "a", ops=500, seed=4), _run(tmp_path, "b", ops=500, seed=5)
    shutil.copy(index_path(b / "history.parquet"), index_path(a / "history.parquet"))
    assert index_plan(a / "history.parquet", index_path(a / "history.parquet")) is None
    d, notes = run_digest(a)
    assert not notes
    _same(d, digest_tables(history_tables(a / "history.jsonl")))


def test_first_reads_are_the_least_time_of_each_value():
    """Tables and sorted pieces, and the moves between them: values in order,
    shuffled, sparse, below the table, with a negative time."""
    rng = np.random.default_rng(7)
    for trial in range(400):
        reads, vs, ts = FirstReads(), [], []
        for b in range(int(rng.integers(1, 10))):
            n = int(rng.integers(0, 200))
            shape = int(rng.integers(0, 4))
            v = [rng.integers(0, 50, n), np.sort(rng.integers(b * 100, b * 100 + 400, n)),
                 rng.integers(-10**12, 10**12, n), np.arange(n) + int(rng.integers(-10**5, 10**5))][shape]
            t = rng.integers(0, 10**12, n)
            if n and rng.random() < 0.05:
                t[0] = -5
            reads.add(v, t)
            vs.append(v)
            ts.append(t)
        v, t = np.concatenate(vs), np.concatenate(ts)
        asked = np.concatenate([v, rng.integers(-1000, 1000, 100)])
        want = np.full(len(asked), np.nan)
        if len(v):
            uv, ut = _reduce(v, t)
            k = np.minimum(np.searchsorted(uv, asked), len(uv) - 1)
            hit = uv[k] == asked
            want[hit] = ut[k[hit]] / 1e9
        assert np.array_equal(reads.seen(asked), want, equal_nan=True), trial


def test_a_column_grows_past_its_capacity_and_trims_to_its_length():
    for capacity in (0, 3, 10_000):
        c = Column(np.int64, capacity)
        for k in range(5):
            c.append(np.arange(k * 1000, (k + 1) * 1000))
        a = c.array()
        assert a.dtype == np.int64 and a.tolist() == list(range(5000)) and len(c) == 0


def test_a_broken_index_leaves_the_digest_to_history_parquet(tmp_path, caplog):
    run_dir = _run(tmp_path, "run", ops=500, seed=6)
    index = index_path(run_dir / "history.parquet")
    want = parquet_digest(run_dir / "history.parquet", use_index=False)
    data = bytearray(index.read_bytes())
    data[4:4000] = bytes(3996)          # its pages, not its footer: still current by its footprint
    index.write_bytes(bytes(data))
    assert index_plan(run_dir / "history.parquet", index) is not None
    d, notes = run_digest(run_dir)
    assert not notes and any("without the index" in r.getMessage() for r in caplog.records)
    _same(d, want)
