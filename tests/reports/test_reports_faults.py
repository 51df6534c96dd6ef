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


def test_proxy_events_are_fault_events_not_client_ops():
    """What the protocol proxy did (process "proxy", history.ops) is listed with
    the nemesis ops under its fault's colour; it is not a client op, and it
    neither opens nor closes an interval (the proxy-arm and proxy-heal ops do)."""
    hold = {"fault": "proxy", "action": None, "event": "hold", "nodes": ["n1"], "api": "Produce"}
    ops = [
        nem(0, 1, "proxy-arm", {"fault": "proxy"}),
        nem(1, 1.1, "proxy-arm", {"fault": "proxy", "nodes": ["n1"], "action": "start"}, "info"),
        {"index": 2, "time": 2 * S, "process": 0, "type": "invoke", "f": "send", "value": [[0, 1, None]]},
        {"index": 3, "time": 3 * S, "process": "proxy", "type": "info", "f": "proxy-hold", "value": hold},
        {"index": 4, "time": 4 * S, "process": 0, "type": "ok", "f": "send", "value": [[0, 1, 0]]},
        nem(5, 5, "proxy-heal", {"fault": "proxy"}),
        nem(6, 5.1, "proxy-heal", {"fault": "proxy", "action": "heal"}, "info"),
    ]
    d = digest(ops)
    assert {f: dict(c) for f, c in d.op_counts.items()} == {"send": {"ok": 1}}
    assert d.processes == 1
    tl = fault_timeline(d)
    assert [(ev.f, ev.action, ev.kind) for ev in tl.events] == [
        ("proxy-arm", "start", "proxy"), ("proxy-hold", None, "proxy"), ("proxy-heal", "heal", "proxy")]
    assert [(iv.kind, iv.start, iv.end) for iv in tl.intervals] == [("proxy", 1.0, 5.1)]
    assert tl.events[1].color == tl.colors["proxy"]
