"""The columnar JSONL conversion (history.convert) equals the per-op one,
row for row, and hands what it cannot read to the per-op path."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from history import convert, jsonl_blocks
from history.ops import HistoryFormatError, header, read_history
from history.parquet import history_to_parquet, parquet_is_current
from history.paired import PARQUET_SCHEMA, pair_ops
from chk_builder import History
from chk_gen import Params, params, simulate
from chk_gen_inject import inject

ANOMALIES = ["lost-write", "duplicate", "inconsistent-offset", "phantom-write", "poll-skip", "nonmonotonic-send"]


def per_op(path: Path) -> list[dict[str, Any]]:
    return pa.Table.from_pylist([o.to_row() for o in pair_ops(read_history(path))], schema=PARQUET_SCHEMA).to_pylist()


def write(ops: list[dict[str, Any]], path: Path, compact: bool, with_header: bool = True) -> Path:
    sep = (",", ":") if compact else (", ", ": ")
    lines = ([json.dumps(header(123), separators=sep)] if with_header else []) + \
        [json.dumps(op, separators=sep) for op in ops]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(params(meta=None), st.sampled_from(ANOMALIES), st.integers(0, 2**16), st.booleans())
def test_columnar_equals_per_op(tmp_path_factory: Any, p: Params, typ: str, seed: int, compact: bool) -> None:
    ops = simulate(p)
    got = inject(ops, typ, random.Random(seed))
    ops = got[0] if got else ops
    path = write(ops, tmp_path_factory.mktemp("h") / "history.jsonl", compact)
    assert convert.history_table(path).to_pylist() == per_op(path)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(params(meta=None), st.sampled_from(ANOMALIES), st.integers(0, 2**16), st.integers(64, 4096))
def test_conversion_in_blocks_equals_whole(tmp_path_factory: Any, p: Params, typ: str, seed: int,
                                           block: int) -> None:
    """Invokes whose completion lies in a later block are carried over: the
    blocks together are the per-op pairing, row for row."""
    ops = simulate(p)
    got = inject(ops, typ, random.Random(seed))
    ops = got[0] if got else ops
    path = write(ops, tmp_path_factory.mktemp("h") / "history.jsonl", compact=True)
    tables = list(convert.history_tables(path, block_bytes=block))
    body = path.stat().st_size - len(path.read_bytes().split(b"\n", 1)[0]) - 1   # the header is no block's
    assert body < 2 * block or len(list(jsonl_blocks.line_blocks(path, block))) > 1
    assert [row for t in tables for row in t.to_pylist()] == per_op(path)


def test_sends_and_polls_skip_the_per_op_builder(tmp_path: Path, monkeypatch: Any) -> None:
    built: list[Any] = []
    real = convert._build
    monkeypatch.setattr(convert, "_build", lambda inv, comp: built.append(inv or comp) or real(inv, comp))
    h = History()
    h.sample({0: (1, [1, 2, 3])})
    h.assign(5, [0, 1])
    for i in range(20):
        h.send(i % 3, [(0, i, i), (1, i, i)])
        h.poll(5, {1: [(i, i)], 0: [(i, i)]})
    h.add(7, "invoke", "send", [[0, 99, None]])
    path = write(h.ops, tmp_path / "history.jsonl", compact=True)
    assert convert.history_table(path).to_pylist() == per_op(path)
    assert sorted(o["f"] for o in built) == ["assign", "sample"]


def test_odd_shapes_equal_per_op(tmp_path: Path) -> None:
    """Superseded and unfinished invokes, null and missing values, empty node,
    a partition in two runs, unordered poll keys, a non-client poll."""
    h = History()
    h.send(0, [(0, 1, 0), (1, 1, 0), (0, 2, 1)])
    h.send(2, [(2, 2, None)], type="info", error="x")
    h.add(3, "invoke", "send", [[0, 9, None]], node="n2")
    h.add(3, "invoke", "send", [[0, 10, None]])
    h.add(4, "invoke", "poll", None)
    h.add(4, "fail", "poll", None, error="boom", node="")
    h.poll(5, {3: [(0, 1)], 0: [], 1: [(4, 5), (5, 6)]})
    h.add(6, "invoke", "poll", None, drain=True)
    h.add(6, "ok", "poll", None, drain=True)
    h.add(8, "ok", "poll", {"0": [[1, 2]]})
    h.add(9, "invoke", "send", [[0, 11, None]])
    h.add(9, "ok", "send", None, node="n1")
    h.add("x", "invoke", "poll", None)
    h.add(10, "invoke", "send", [[0, 12]])
    for compact in (True, False):
        path = write(h.ops, tmp_path / "history.jsonl", compact, with_header=compact)
        assert convert.history_table(path).to_pylist() == per_op(path)


def test_what_it_cannot_read_goes_to_the_per_op_path(tmp_path: Path) -> None:
    h = History()
    h.send(0, [(0, 1, 0)])
    h.add(1, "invoke", "send", [[0, 1.5, None]])           # not an int: the per-op path names it
    path = write(h.ops, tmp_path / "history.jsonl", compact=True)
    with pytest.raises(convert.Unsupported):
        convert.history_table(path)
    with pytest.raises(HistoryFormatError, match="value is not an integer"):
        history_to_parquet(path, tmp_path / "history.parquet")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + "".join(lines[1:2]))
    with pytest.raises(HistoryFormatError, match=r"history.jsonl:2"):
        history_to_parquet(path, tmp_path / "history.parquet")


def test_conversion_marks_the_parquet_current(tmp_path: Path) -> None:
    h = History()
    h.send(0, [(0, 1, 0)])
    path = write(h.ops, tmp_path / "history.jsonl", compact=True)
    out = tmp_path / "history.parquet"
    assert not parquet_is_current(path, out)
    history_to_parquet(path, out)
    assert parquet_is_current(path, out) and pq.read_table(out).schema.equals(PARQUET_SCHEMA)
    with open(path, "a") as fh:                       # the JSONL grew after the conversion
        fh.write(json.dumps({"index": 2, "time": 9, "process": 1, "type": "invoke", "f": "poll"}) + "\n")
    assert not parquet_is_current(path, out)
    out.write_bytes(out.read_bytes()[:-20])           # no footer
    assert not parquet_is_current(path, out)


def test_transactions_commits_and_rebalances_convert_like_the_per_op_path(tmp_path: Path) -> None:
    """The history contract's txn, commit and rebalance ops and the isolation
    and group fields land in their own columns, the same on both paths."""
    g = {"group": "g1", "isolation": "read_uncommitted"}
    ops = [
        {"index": 0, "time": 1, "process": 1, "type": "invoke", "f": "txn",
         "value": [["send", 0, 5], ["poll"], ["send", 1, 6]]},
        {"index": 1, "time": 2, "process": 1, "type": "ok", "f": "txn", "isolation": "read_committed",
         "value": [["send", 0, 5, 10], ["poll", {"2": [[3, 7], [4, 8]]}], ["send", 1, 6, 11]]},
        {"index": 2, "time": 3, "process": 2, "type": "invoke", "f": "poll", "value": None, **g},
        {"index": 3, "time": 4, "process": 2, "type": "ok", "f": "poll", "value": {"0": [[10, 5]]}, **g},
        {"index": 4, "time": 5, "process": 2, "type": "ok", "f": "rebalance", "group": "g1",
         "value": {"assigned": [0, 2], "revoked": [1], "generation": 4, "member": "m-1"}},
        {"index": 5, "time": 6, "process": 2, "type": "invoke", "f": "commit", "value": None, "group": "g1",
         "async": True},
        {"index": 6, "time": 7, "process": 2, "type": "ok", "f": "commit", "value": {"0": 11}, "group": "g1"},
        {"index": 7, "time": 8, "process": 3, "type": "invoke", "f": "txn", "value": [["send", 2, 9]]},
        {"index": 8, "time": 9, "process": 3, "type": "fail", "f": "txn", "abort": True, "value": None},
    ]
    path = write(ops, tmp_path / "history.jsonl", compact=True)
    rows = convert.history_table(path).to_pylist()
    assert rows == per_op(path)
    txn, poll, rebalance, commit, aborted = rows
    assert [(m["partition"], m["offset"], m["value"]) for m in txn["messages"]] == [(0, 10, 5), (1, 11, 6)]
    assert [(m["partition"], m["offset"], m["value"]) for m in txn["reads"]] == [(2, 3, 7), (2, 4, 8)]
    assert (txn["isolation"], poll["isolation"], poll["group"]) == ("read_committed", "read_uncommitted", "g1")
    assert (rebalance["partitions"], rebalance["revoked"], rebalance["generation"]) == ([0, 2], [1], 4)
    assert rebalance["type"] == "ok" and rebalance["invoke_index"] == 4
    assert commit["committed"] == [{"partition": 0, "offset": 11}]
    assert [(m["partition"], m["offset"]) for m in aborted["messages"]] == [(2, None)]
    assert aborted["type"] == "fail"


# Lines of every shape the value's regex meets: values last and not, nested, null and near-null,
# whitespace before and inside, lists the regex cuts short or refuses, a second "value" key, no value.
VALUE_LINES = [b'{"a":1,"value":{"1":[[1,2]]},"w":{"x":1}}\n', b'{"value": {"1":[[1,2]]}}\n', b'{"value":null}\n',
               b'{"value":nul}\n', b'{"value":nullx}\n', b'{"value":[[0,1,null]],"p":"x"}\n',
               b'{"value":[[0,1,null]]}\n', b'{"value":[]}\n', b'{"value":[}\n', b'{"value":{"a":{"b":1}}}\n',
               b'{"value":{}}\n', b'{"x":1}\n', b'{"value":"s"}\n', b'{"value":[1,2,"a"]}\n', b'{"value":[1,[2]]}\n',
               b'{"value":{"1":[[1,2]]},"value":[1]}\n', b'{"value":5,"value":[1]}\n', b'{"value":[1] , "x":2}\n',
               b'{"value":{"k" : [ 1 ]} }\n', b'{"e":"\xc3\xa9","value":[[1,2]]}\n', b'{"value":\t[1]}\n',
               b'{"value":]}\n', b'{"value":[[1,2]]]}\n', b'{"value":{"a":1}}}\n', b'{"value":']


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(VALUE_LINES), min_size=1, max_size=12))
def test_value_texts_are_what_the_regex_extracts(pieces: list[bytes]) -> None:
    """``value_texts`` finds the value by byte positions; on every line it
    gives what ``_VALUE_RE`` extracts, null where that extracts nothing."""
    body = b"".join(pieces)
    lines = jsonl_blocks._split_lines(body if body.endswith(b"\n") else body + b"\n")
    regex = pc.struct_field(pc.extract_regex(lines, jsonl_blocks._VALUE_RE), "v")
    assert jsonl_blocks.value_texts(lines).to_pylist() == regex.to_pylist()
