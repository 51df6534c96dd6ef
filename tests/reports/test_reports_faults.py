"""Fault intervals from nemesis ops."""
from __future__ import annotations

from reports.digest import digest
from reports.faults import PALETTE, fault_timeline, safe_color

S = 1_000_000_000


def nem(i, t, f, value=None, typ="invoke"):
    return {"index": i, "time": int(t * S), "process": "nemesis", "type": typ, "f": f, "value": value or {}}


def test_intervals_pairs_and_heal():
    ops = [
        nem(0, 1, "start-partition", {"nodes": ["n1"]}), nem(1, 1.1, "start-partition", {"nodes": ["n1"]}, "info"),
        nem(2, 2, "kill", {"nodes": ["n1"]}), nem(3, 2.1, "kill", {"nodes": ["n1"]}, "info"),
        nem(4, 3, "kill", {"nodes": ["n2"]}),
        nem(5, 4, "start", {"nodes": ["n1"]}),        # n2 still dead: kill interval continues
        nem(6, 5, "stop-partition", {"nodes": ["n1"]}),
        nem(7, 6, "start", {"nodes": ["n2"]}),
        nem(8, 7, "pause", {"nodes": ["n3"]}),
        nem(9, 8, "bump-clock", {"nodes": ["n2"], "color": "#123"}),
        nem(10, 9, "heal"),
        nem(11, 10, "strobe-clock", {"nodes": ["n1"], "fault": "clock"}),
        {"index": 12, "time": 12 * S, "process": 0, "type": "ok", "f": "poll", "value": {}},
    ]
    tl = fault_timeline(digest(ops))
    got = [(iv.kind, iv.start, iv.end, iv.nodes, iv.open_at_end) for iv in tl.intervals]
    assert got == [
        ("partition", 1.0, 5.0, ["n1"], False),
        ("kill", 2.0, 6.0, ["n1", "n2"], False),
        ("pause", 7.0, 9.0, ["n3"], False),
        ("clock", 8.0, 9.0, ["n2"], False),
        ("clock", 10.0, 12.0, ["n1"], True),
    ]
    assert tl.colors["clock"] == "#112233"          # the value's colour wins
    assert tl.colors["kill"] == PALETTE["kill"]
    # invoke and completion pair into one event
    assert len(tl.events) == 10
    assert tl.events[0].end == 1.1
    assert [iv.kind for iv in tl.active_at(2.5)] == ["partition", "kill"]


def test_completion_without_invoke_and_nodeless_ops():
    ops = [nem(0, 1, "pause", typ="info"), nem(1, 3, "resume", {"nodes": ["n1"]}, typ="info")]
    tl = fault_timeline(digest(ops))
    assert [(iv.kind, iv.start, iv.end) for iv in tl.intervals] == [("pause", 1.0, 3.0)]


def test_safe_color():
    assert safe_color("#ABC") == "#aabbcc"
    assert safe_color("red") == "#ff0000"
    assert safe_color("tab:blue").startswith("#")
    for bad in ("red; background: url(http://x)", "javascript:alert(1)", 12, None, "", "#12345g"):
        assert safe_color(bad) is None


def test_explicit_actions_win_over_names():
    ops = [nem(0, 1, "cut", {"nodes": ["n1"], "fault": "netem", "action": "start"}, "info"),
           nem(1, 2, "kill", {"nodes": ["n1"], "fault": "kill", "action": None}, "info"),
           nem(2, 4, "uncut", {"nodes": ["n1"], "fault": "netem", "action": "stop"}, "info")]
    tl = fault_timeline(digest(ops))
    assert [(iv.kind, iv.start, iv.end) for iv in tl.intervals] == [("netem", 1.0, 4.0)]
