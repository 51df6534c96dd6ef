"""The Recorder (history/recorder.py) takes a pipelined producer's sends as rows
(``append_sends``) or as ops (``append_many``): the history lines, counts,
outstanding invocations and acknowledged offsets are the same either way."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from history.writer import HistoryWriter
from history.recorder import Recorder
from history.writer import send_op


@st.composite
def send_histories(draw) -> list[tuple[list[tuple], str | None]]:
    """Batches of rows as a pipelined producer records them: invokes on free
    processes, completions (ok with an offset, fail, info with or without one)
    of outstanding ones, sometimes an invoke among them; some left outstanding."""
    batches, open_, next_process = [], {}, 100
    for _ in range(draw(st.integers(1, 8))):
        if open_ and draw(st.booleans()):
            done = draw(st.lists(st.sampled_from(sorted(open_)), unique=True, min_size=1))
            rows = []
            if draw(st.booleans()):
                open_[next_process] = (0, -next_process)
                rows.append((next_process, "invoke", 0, -next_process, None, "p1", None))
                next_process += 1
            for process in done:
                p, v = open_.pop(process)
                typ = draw(st.sampled_from(["ok", "ok", "fail", "info"]))
                offset = draw(st.integers(0, 50)) if typ == "ok" else draw(st.none() | st.integers(0, 50)) \
                    if typ == "info" else None
                rows.append((process, typ, p, v, offset, "p0", None if typ == "ok" else "E: x"))
            batches.append((rows, draw(st.none() | st.just("n1"))))
        else:
            rows = []
            for _ in range(draw(st.integers(1, 4))):
                p, v = draw(st.integers(0, 2)), draw(st.integers(0, 10 ** 6))
                open_[next_process] = (p, v)
                rows.append((next_process, "invoke", p, v, None, "p0", None))
                next_process += 1
            batches.append((rows, None))
    return batches


@settings(max_examples=40, deadline=None)
@given(send_histories())
def test_rows_and_ops_are_recorded_alike(tmp_path_factory, batches):
    d = tmp_path_factory.mktemp("rec")
    a = Recorder(HistoryWriter(d / "rows.jsonl", start_ns=0, columnar=False))
    b = Recorder(HistoryWriter(d / "ops.jsonl", start_ns=0, columnar=False))
    for rows, node in batches:
        a.append_sends(rows, node)
        b.append_many([send_op(r, node) for r in rows])
    assert a.counts == b.counts
    assert a.max_acked == b.max_acked
    assert a.outstanding.keys() == b.outstanding.keys()
    a.complete_outstanding("interrupted")
    b.complete_outstanding("interrupted")
    assert not a.outstanding and not b.outstanding and a.counts == b.counts
    a.writer.close()
    b.writer.close()

    def ops(name):
        out = [json.loads(line) for line in (d / name).read_text().splitlines()[1:]]
        for op in out:
            op.pop("time")
        return out
    assert ops("rows.jsonl") == ops("ops.jsonl")
