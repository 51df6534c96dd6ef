"""The history contract: header and version, reading, fault boundaries and intervals."""
from __future__ import annotations

import json
import time

import pytest

from history.ops import FORMAT_VERSION, HEADER_KEY, HistoryFormatError, history_format, read_history
from history.fault_intervals import fault_boundary, fault_intervals, nemesis_ops
from history.writer import HistoryWriter


def test_writer_starts_with_the_format_header(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.append({"process": 0, "type": "invoke", "f": "poll", "value": None})
    first = json.loads(path.read_text().splitlines()[0])
    assert first[HEADER_KEY] == FORMAT_VERSION and set(first) == {HEADER_KEY, "wall_ns_at_zero"}
    assert abs(first["wall_ns_at_zero"] - time.time_ns()) < 60 * 10**9   # the wall clock at history time 0
    assert history_format(path) == FORMAT_VERSION
    assert [o["f"] for o in read_history(path)] == ["poll"]
    with HistoryWriter(path) as w:          # appending to a history writes no second header
        w.append({"process": 0, "type": "ok", "f": "poll", "value": {}})
    assert path.read_text().count(HEADER_KEY) == 1


def test_a_history_without_header_is_format_1(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "poll"}) + "\n")
    assert history_format(path) == 1
    assert len(list(read_history(path))) == 1


def test_a_newer_format_is_refused(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({HEADER_KEY: FORMAT_VERSION + 1}) + "\n")
    with pytest.raises(HistoryFormatError, match="newer"):
        list(read_history(path))


def test_fault_boundary_reads_the_stated_action():
    assert fault_boundary("anything", {"action": "start", "fault": "netem"}) == ("start", "netem")
    assert fault_boundary("kill", {"action": None, "fault": "kill"}) == (None, "kill")
    assert fault_boundary("heal", {"action": "heal"}) == ("heal", None)
    assert fault_boundary("x", {"action": "bogus", "fault": "kill"}) == (None, "kill")


def test_format_1_ops_are_read_by_their_exact_names():
    assert fault_boundary("start-partition", {}) == ("start", "partition")
    assert fault_boundary("stop-partition", {}) == ("stop", "partition")
    assert fault_boundary("kill", {}) == ("start", "kill")
    assert fault_boundary("start", {}) == ("stop", "kill")
    assert fault_boundary("restart", {}) == ("stop", "kill")
    assert fault_boundary("pause", {}) == ("start", "pause")
    assert fault_boundary("resume", {}) == ("stop", "pause")
    assert fault_boundary("bump-clock", {}) == ("start", "clock")
    assert fault_boundary("strobe-clock", {}) == ("start", "clock")
    assert fault_boundary("reset-clock", {}) == ("stop", "clock")
    assert fault_boundary("heal", {}) == ("heal", None)
    # no guessing from names: an op this table does not name is no boundary
    assert fault_boundary("start-netem", {}) == (None, None)
    assert fault_boundary("isolate-leader", {"fault": "partition"}) == (None, "partition")
    assert fault_boundary("sample", {}) == (None, None)


def _nem(i, t, f, value, typ="info"):
    return {"index": i, "time": t, "process": "nemesis", "type": typ, "f": f, "value": value}


def test_a_stop_ends_only_the_nodes_it_names():
    ops = [_nem(0, 1, "kill", {"action": "start", "fault": "kill", "nodes": ["n1"]}),
           _nem(1, 2, "kill", {"action": "start", "fault": "kill", "nodes": ["n2"]}),
           _nem(2, 3, "start", {"action": "stop", "fault": "kill", "nodes": ["n1"]}),
           _nem(3, 5, "start", {"action": "stop", "fault": "kill", "nodes": ["n2", "n3"]})]
    ivs = fault_intervals(nemesis_ops(ops))
    assert [(iv.start_time, iv.end_time, sorted(iv.nodes)) for iv in ivs] == [(1, 3, ["n1"]), (2, 5, ["n2"])]


def test_a_start_on_no_node_opens_nothing_and_a_nodeless_stop_ends_its_kind():
    ops = [_nem(0, 1, "kill", {"action": "start", "fault": "kill", "nodes": []}),
           _nem(1, 2, "pause", {"action": "start", "fault": "pause", "nodes": ["n1", "n2"]}),
           _nem(2, 3, "clock", {"action": "start", "fault": "clock"}),
           _nem(3, 4, "resume", {"action": "stop", "fault": "pause"}),
           _nem(4, 6, "heal", {"action": "heal"})]
    ivs = fault_intervals(nemesis_ops(ops))
    assert [(iv.fault, iv.start_time, iv.end_time) for iv in ivs] == [("pause", 2, 4), ("clock", 3, 6)]


def test_invokes_pair_with_their_completions():
    ops = [_nem(0, 1, "kill", {"fault": "kill"}, "invoke"),
           {"index": 1, "time": 2, "process": 0, "type": "invoke", "f": "poll"},
           _nem(2, 3, "kill", {"action": "start", "fault": "kill", "nodes": ["n1"]}),
           _nem(3, 4, "start", {"fault": "kill"}, "invoke")]
    evs = list(nemesis_ops(ops))
    assert [(e.index, e.invoke_time, e.time, e.action) for e in evs] == [(0, 1, 3, "start"), (3, 4, None, "stop")]
    assert fault_intervals(evs)[0].end_time == 4   # an incomplete stop ends it when invoked
