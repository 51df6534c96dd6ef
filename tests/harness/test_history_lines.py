"""The writer's fast line for one-message sends (history.writer._send_line)
is the encoder's line, byte for byte, or it declines (None) and the encoder
writes the op."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from history.recorder import Recorder
from history.writer import HistoryWriter, _encode, _send_line, op_text

ints = st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
texts = st.text(max_size=12)        # any code point: escapes, non-ASCII, surrogates


@st.composite
def send_ops(draw) -> dict:
    """A one-message send op as a pipelined producer builds it (fields in its order)."""
    op = {"process": draw(ints), "type": draw(st.sampled_from(["invoke", "ok", "fail", "info"]) | texts),
          "f": draw(st.just("send") | texts),
          "value": [[draw(ints), draw(ints), draw(st.none() | ints)]]}
    for key in ("producer", "error", "node"):
        if draw(st.booleans()):
            op[key] = draw(texts)
    return op


@given(send_ops(), ints, ints)
def test_fast_line_equals_the_encoder(op, index, t):
    line = _send_line(index, t, op)
    assert line is not None
    assert line == _encode({"index": index, "time": t, **op})


NOT_INT = st.sampled_from([True, False, 1.5, "7", [1], None])
NOT_STR = st.sampled_from([True, 7, None, ["p0"]])


@given(send_ops(), st.sampled_from(["process", "partition", "value", "offset", "type", "f", "producer", "error",
                                    "node"]), NOT_INT, NOT_STR)
def test_other_field_types_go_to_the_encoder(op, field, not_int, not_str):
    """A bool, float, string, list or null where the fast line wants an int,
    or anything but a string where it wants one: it declines."""
    if field == "offset" and not_int is None:
        not_int = 2.0                                # null is a valid offset
    if field in ("partition", "value", "offset"):
        op["value"][0][("partition", "value", "offset").index(field)] = not_int
    elif field == "process":
        op["process"] = not_int
    else:
        op[field] = not_str
    assert _send_line(0, 0, op) is None


def test_other_shapes_go_to_the_encoder():
    base = {"process": 1, "type": "ok", "f": "send", "value": [[0, 5, 9]], "producer": "p0"}
    assert _send_line(0, 0, base) is not None
    assert _send_line(0, 0, {**base, "value": [[0, 5, 9], [1, 6, 10]]}) is None       # two messages
    assert _send_line(0, 0, {**base, "value": [[0, 5]]}) is None
    assert _send_line(0, 0, {**base, "value": [(0, 5, 9)]}) is None
    assert _send_line(0, 0, {**base, "value": ((0, 5, 9),)}) is None
    assert _send_line(0, 0, {**base, "outcomes": ["ok"]}) is None                    # another field
    assert _send_line(0, 0, {"type": "ok", **base}) is None                          # another order
    assert _send_line(0, 0, {"process": 1, "type": "ok", "f": "send"}) is None


def test_writer_lines_are_json_lines_of_the_ops(tmp_path):
    """Through the writer: fast and encoder lines mixed in one batch."""
    path = tmp_path / "h.jsonl"
    ops = [{"process": 3, "type": "invoke", "f": "send", "value": [[1, 7, None]], "producer": "p1"},
           {"process": 4, "type": "invoke", "f": "poll", "value": None},
           {"process": 3, "type": "info", "f": "send", "value": [[1, 7, None]], "producer": "p1",
            "error": 'KafkaError "x"\n', "node": "n2"}]
    with HistoryWriter(path, columnar=False) as w:
        out = w.append_many([dict(op) for op in ops])
    lines = path.read_text().splitlines()[1:]
    assert [json.loads(line) for line in lines] == out
    assert [{k: v for k, v in o.items() if k not in ("index", "time")} for o in out] == ops
    assert lines == [_encode({"index": o["index"], "time": o["time"], **op}) for o, op in zip(out, ops)]


@st.composite
def send_rows(draw) -> tuple:
    """A pipelined producer's row (history.writer.SendRow), any field types
    the fast path takes; sometimes one it does not (then the encoder writes it)."""
    odd = draw(st.sampled_from([None, None, None, "process", "value", "offset", "producer", "error"]))
    row = [draw(ints), draw(st.sampled_from(["invoke", "ok", "fail", "info"]) | texts), draw(ints), draw(ints),
           draw(st.none() | ints), draw(texts), draw(st.none() | texts)]
    if odd is not None:
        i = ("process", "type", "partition", "value", "offset", "producer", "error").index(odd)
        row[i] = draw(NOT_STR if odd in ("producer", "error") else NOT_INT.filter(lambda x: x is not None))
        if odd == "error" and row[i] is None:
            row[i] = 7
    return tuple(row)


@given(st.lists(send_rows(), max_size=6), st.none() | texts)
def test_rows_are_written_as_the_ops_they_stand_for(tmp_path_factory, rows, node):
    """append_sends writes the lines append_many writes for send_op(row, node),
    same indexes, in order: whether the fast path takes the rows or not."""
    from history.writer import send_op
    d = tmp_path_factory.mktemp("rows")
    with HistoryWriter(d / "rows.jsonl", start_ns=0, columnar=False) as a, \
            HistoryWriter(d / "ops.jsonl", start_ns=0, columnar=False) as b:
        a.append({"process": 0, "type": "invoke", "f": "poll", "value": None})
        b.append({"process": 0, "type": "invoke", "f": "poll", "value": None})
        assert a.append_sends(rows, node) == 1
        b.append_many([send_op(r, node) for r in rows])
        a.append({"process": 0, "type": "ok", "f": "poll", "value": None})
        b.append({"process": 0, "type": "ok", "f": "poll", "value": None})

    def without_time(p):
        out = []
        for line in p.read_text().splitlines()[1:]:
            op = json.loads(line)
            assert line == _encode(op)
            op.pop("time")
            out.append(op)
        return out
    got, want = without_time(d / "rows.jsonl"), without_time(d / "ops.jsonl")
    assert got == want and [o["index"] for o in got] == list(range(len(rows) + 2))


def test_an_op_encoded_elsewhere_is_written_as_append_writes_it(tmp_path):
    """``append_text`` (a drain process's op, encoded there by ``op_text``)
    writes the line ``append`` writes for the same op, and the recorder
    counts it and follows its invocation as ``append`` would."""
    ops = [{"process": 1_000_002, "type": "invoke", "f": "poll", "drain": True, "value": None},
           {"process": 1_000_002, "type": "ok", "f": "poll", "drain": True, "value": {"2": [[0, 7], [1, 9]]},
            "watermarks": {"log_start": 0, "high": 2, "stable": 2, "max_acked": None}, "end": 2,
            "node": "n\u00e9\t1"}]
    lines = {}
    for how in ("append", "text"):
        rec = Recorder(HistoryWriter(tmp_path / how / "h.jsonl", columnar=False))
        for op in ops:
            if how == "append":
                rec.append(dict(op))
            else:
                rec.append_text({k: op[k] for k in ("process", "type", "f")}, op_text(op))
            if op["type"] == "invoke":
                assert 1_000_002 in rec.outstanding
        rec.writer.close()
        assert rec.outstanding == {} and rec.counts == {("poll", "ok"): 1}
        lines[how] = [json.loads(x) for x in (tmp_path / how / "h.jsonl").read_text().splitlines()[1:]]
    assert [{k: v for k, v in o.items() if k != "time"} for o in lines["text"]] == \
        [{k: v for k, v in o.items() if k != "time"} for o in lines["append"]]
    assert [list(o)[:2] for o in lines["text"]] == [["index", "time"]] * 2
