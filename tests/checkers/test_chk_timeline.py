"""Which faults a witness's context says were in effect, from nemesis ops."""
from __future__ import annotations

from checkers.common import Timeline
from history.paired import pair_ops
from chk_builder import History


def timeline(h: History) -> Timeline:
    return Timeline([o.to_row() for o in pair_ops(h.ops) if not o.client])


def faults_at(tl: Timeline, t: int) -> list[str]:
    return [f["f"] for f in tl.context(0, {"invoke_time": t, "time": t, "index": 0,
                                           "invoke_index": 0})["faults"]]


def test_final_heal_of_a_fault_that_never_started_opens_nothing() -> None:
    h = History()
    h.nemesis("start-partition", {"fault": "partition", "nodes": ["n1"]})
    h.nemesis("stop-partition", {"fault": "partition"})
    # the final phase heals every package, including ones that never acted
    h.nemesis("start", {"fault": "kill", "target": "all"})
    h.nemesis("resume", {"fault": "pause"})
    h.nemesis("reset-clock", {"fault": "clock"})
    tl = timeline(h)
    assert [f["end"] is not None for f in tl.faults] == [True]
    assert faults_at(tl, h.t + 10**9) == []


def test_two_starts_of_one_kind_are_both_closed_by_its_stop() -> None:
    h = History()
    h.nemesis("bump-clock", {"fault": "clock", "nodes": ["n1"]})
    h.nemesis("strobe-clock", {"fault": "clock", "nodes": ["n2"]})
    during = h.t
    h.nemesis("reset-clock", {"fault": "clock"})
    tl = timeline(h)
    assert faults_at(tl, during) == ["bump-clock", "strobe-clock"]
    assert faults_at(tl, h.t + 10**9) == []
    assert [e["op"]["f"] for e in tl.events] == ["reset-clock"]


def test_heal_closes_every_kind_and_waits_are_events() -> None:
    h = History()
    h.nemesis("kill", {"fault": "kill", "nodes": ["n1"]})
    h.nemesis("pause", {"fault": "pause", "nodes": ["n2"]})
    h.nemesis("await-new-leader", {"scenario": "unclean-election"})
    during = h.t
    h.nemesis("heal", {})
    tl = timeline(h)
    assert faults_at(tl, during) == ["kill", "pause"]
    assert faults_at(tl, h.t + 10**9) == []
    assert [e["op"]["f"] for e in tl.events] == ["await-new-leader", "heal"]
