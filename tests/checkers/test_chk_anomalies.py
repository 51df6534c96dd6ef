"""One tiny hand-written history per anomaly (and per edge that matters), in
both engines. The Spark side checks every case in one multi-run pass."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


import checkers
from checkers.result import ANOMALY_TYPES
import chk_cases
from chk_builder import History
from chk_cases import Case




def sends(h: History, proc: int, part: int, pairs: list[tuple[int, int | None]], type: str = "ok") -> None:
    for value, offset in pairs:
        h.send(proc, [(part, value, offset)], type=type)


# ------------------------------------------------------------------ cases

def clean() -> History:
    h = History()
    h.sample({0: (1, [1, 2]), 1: (2, [2, 1])})
    sends(h, 0, 0, [(1, 0), (2, 1)])
    sends(h, 1, 1, [(1, 0)])
    h.sample({0: (2, [2, 1]), 1: (2, [2, 1])})      # a clean election: 2 was in the ISR
    h.assign(5, [0, 1])
    h.poll(5, {0: [(0, 1)], 1: []})
    h.poll(5, {0: [(1, 2)], 1: [(0, 1)]})
    h.assign(9, [0, 1])
    h.poll(9, {0: [(0, 1), (1, 2)], 1: [(0, 1)]}, drain=True)
    return h


def inconsistent() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0)])
    h.poll(5, {0: [(0, 1)]})
    h.poll(6, {0: [(0, 2)]})
    return h


def duplicate() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.poll(5, {0: [(0, 1), (1, 2)]})
    h.poll(6, {0: [(2, 1)]})
    return h


def nonlinearizable() -> History:
    h = History()
    sends(h, 0, 0, [(1, 5)])
    sends(h, 1, 0, [(2, 3)])
    return h


def concurrent_sends() -> History:
    h = History()
    h.add(0, "invoke", "send", [[0, 1, None]])
    h.add(1, "invoke", "send", [[0, 2, None]])
    h.add(0, "ok", "send", [[0, 1, 5]])
    h.add(1, "ok", "send", [[0, 2, 3]])
    return h


def nonmonotonic_send() -> History:
    h = History()
    h.send(0, [(0, 1, 1), (0, 2, 0)])
    return h


def interleaved_send() -> History:
    """Messages not grouped by partition: the Spark engine's one-row-per-message path."""
    h = History()
    h.send(0, [(0, 1, 1), (1, 1, 0), (0, 2, 0)])
    h.poll(5, {0: [(0, 2), (1, 1)], 1: [(0, 1)]})
    return h


def nonmonotonic_poll(f: str = "assign") -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1)])
        h.assign(5, [0], f=f)
        h.poll(5, {0: [(0, 1), (1, 2)]})
        h.poll(5, {0: [(1, 2)]})
        return h
    return build


def reassigned_rewind() -> History:
    """An assignment that keeps partition 0 continues its chain: the consumer
    reads on from its position, so going back is nonmonotonic."""
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.assign(5, [0, 1])
    h.poll(5, {0: [(0, 1), (1, 2)]})
    h.assign(5, [0])
    h.poll(5, {0: [(0, 1)]})
    h.poll(6, {0: [(0, 1)]})                         # another process: its own chain
    return h


def reassigned_skip() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
    h.assign(5, [0])
    h.poll(5, {0: [(0, 1)]})
    h.assign(5, [0, 1])                              # keeps 0
    h.poll(5, {0: [(2, 3)]})                         # jumped over offset 1
    h.poll(6, {0: [(1, 2)]})
    return h


def readded(skip: bool) -> Callable[[], History]:
    """Partition 0 dropped, then assigned again: it starts from the beginning,
    a chain of its own (no rewind or skip against the reads before)."""
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
        h.assign(5, [0])
        h.poll(5, {0: [(0, 1), (1, 2)] if not skip else [(0, 1)]})
        h.assign(5, [1])
        h.assign(5, [0, 1])
        h.poll(5, {0: [(0, 1)]} if not skip else {0: [(2, 3)]})
        h.poll(6, {0: [(0, 1), (1, 2), (2, 3)]})
        return h
    return build


def pipelined_send(producers: tuple[str, str]) -> Callable[[], History]:
    """Two sends in flight at once on processes 10 and 11: the first sent
    gets the higher offset. One idempotent producer must not do that; two
    producers may."""
    def build() -> History:
        h = History()
        h.add(10, "invoke", "send", [[0, 1, None]], producer=producers[0])
        h.add(11, "invoke", "send", [[0, 2, None]], producer=producers[1])
        h.add(11, "ok", "send", [[0, 2, 0]], producer=producers[1])
        h.add(10, "ok", "send", [[0, 1, 1]], producer=producers[0])
        h.poll(5, {0: [(0, 2), (1, 1)]})
        return h
    return build


def poll_skip(f: str = "assign", within: bool = False) -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
        h.assign(5, [0], f=f)
        if within:
            h.poll(5, {0: [(0, 1), (2, 3)]})
        else:
            h.poll(5, {0: [(0, 1)]})
            h.poll(5, {0: [(2, 3)]})
        h.poll(6, {0: [(1, 2)]})
        return h
    return build


def unknown_gap() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 2)])                 # offset 1: nothing known (a marker, say)
    h.poll(5, {0: [(0, 1), (2, 2)]})
    return h


def lost_write() -> History:
    h = History()
    h.sample({0: (1, [1, 2, 3])})
    h.nemesis("kill", {"nodes": ["n2"]})
    h.nemesis("start", {"nodes": ["n2"]})
    h.nemesis("start-partition", {"nodes": ["n1"], "fault": "partition"})
    sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
    h.nemesis("stop-partition", {"nodes": ["n1"], "fault": "partition"})
    h.poll(5, {0: [(0, 1)]})
    h.poll(6, {0: [(2, 3)]})
    return h


def read_then_truncated() -> History:
    """Read by a poll, then gone from the completed drain: an unclean election
    truncated it after clients saw it. Lost, and its offset inconsistent."""
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.poll(5, {0: [(0, 1), (1, 2)]})
    sends(h, 1, 0, [(3, 1)])                          # the new leader reuses offset 1
    h.assign(9, [0])
    h.poll(9, {0: [(0, 1), (1, 3)]}, drain=True)
    return h


def lost_by_drain() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.send(0, [(0, 3, None)])                        # ok without an offset: lost once drained
    h.assign(9, [0])
    h.poll(9, {0: [(0, 1)]}, drain=True)
    return h


STOPPED = ("drain of partition 0 incomplete: read to offset 1 of 3 before the timeout: "
           "the last stable offset is 1, a transaction still open")


def drain_stopped() -> History:
    """The drain of partition 0 stopped at an open transaction: what it did not
    read is not judged, and the verdict's reason says why the drain stopped."""
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 2)])
    h.assign(9, [0])
    h.poll(9, {0: [(0, 1)]}, drain=True)
    h.add(9, "invoke", "poll", None, drain=True)
    h.add(9, "info", "poll", None, drain=True, error=STOPPED)
    return h


def v_drain_stopped(r: Any) -> None:
    assert r.stats["drain_complete"] is False and r.stats["drains"]["stopped"] == STOPPED
    assert any(u.endswith(f"({STOPPED})") and "final drain did not complete" in u for u in r.unknown), r.unknown


def unseen() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.poll(5, {0: [(0, 1)]})
    return h


def phantom() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0)])
    sends(h, 0, 0, [(5, None)], type="fail")
    sends(h, 0, 0, [(6, None)], type="info")         # info may have happened: reading it is fine
    h.poll(5, {0: [(0, 1), (1, 5), (2, 6)]})
    return h


def unclean() -> History:
    h = History()
    h.sample({0: (1, [1, 2])})
    sends(h, 0, 0, [(1, 0), (2, 1)])
    h.sample({0: (1, [1])})
    h.sample({0: (None, [1])})
    h.sample({0: (2, [2])}, epoch=3)
    sends(h, 1, 0, [(3, 1)])
    h.poll(9, {0: [(0, 1), (1, 3)]}, drain=True)
    return h


def no_ok_send() -> History:
    h = History()
    sends(h, 0, 0, [(1, None)], type="fail")
    h.poll(5, {0: []})
    return h


# ---------------------------------------------------------- witness checks

def w0(result: Any, typ: str) -> dict:
    return result.anomalies[typ]["witnesses"][0]


def v_inconsistent(r: Any) -> None:
    w = w0(r, "inconsistent-offset")
    assert (w["partition"], w["offsets"], w["values"]) == (0, [0], [1, 2])
    assert [o["f"] for o in w["ops"]] == ["send", "poll"]


def v_duplicate(r: Any) -> None:
    w = w0(r, "duplicate")
    assert (w["offsets"], w["values"]) == ([0, 2], [1])


def v_nonlinearizable(r: Any) -> None:
    w = w0(r, "nonlinearizable-offset")
    assert (w["offsets"], w["values"]) == ([5, 3], [1, 2])
    assert [o["process"] for o in w["ops"]] == [0, 1]


def v_skip(r: Any) -> None:
    w = w0(r, "poll-skip")
    assert (w["offsets"], w["skipped"], w["skipped_count"]) == ([0, 2], [1], 1)


def v_lost(r: Any) -> None:
    w = w0(r, "lost-write")
    assert (w["offsets"], w["values"], w["max_read_offset"]) == ([1], [2], 2)
    assert [o["f"] for o in w["ops"]] == ["send", "poll"]
    ctx = w["context"]
    assert [f["f"] for f in ctx["faults"]] == ["start-partition"]
    assert ctx["faults"][0]["healed_time"] is not None
    assert [e["f"] for e in ctx["recent_nemesis"]] == ["start"]
    assert ctx["sample"]["leader"] == 1 and ctx["sample"]["isr"] == [1, 2, 3]


def v_lost_drain(r: Any) -> None:
    assert r.stats["drain_complete"] is True
    assert sorted(tuple(w["values"]) for w in r.anomalies["lost-write"]["witnesses"]) == [(2,), (3,)]


def v_unclean(r: Any) -> None:
    (e,) = r.unclean_elections
    assert (e["partition"], e["from_leader"], e["to_leader"], e["last_isr"], e["epoch"]) == (0, 1, 2, [1], 3)
    assert (e["lost_writes"], e["inconsistent_offsets"]) == (1, 1)
    assert w0(r, "unclean-election")["to_leader"] == 2


def v_allowed_subscribe(r: Any) -> None:
    assert r.anomalies["poll-skip"]["allowed"] and r.anomalies["nonmonotonic-poll"]["allowed"]
    assert "subscribe" in r.anomalies["poll-skip"]["reason"]


CASES: dict[str, Case] = {
    "clean": Case(clean, {}, True),
    "inconsistent-offset": Case(inconsistent, {"inconsistent-offset": 1}, False, v_inconsistent),
    "duplicate": Case(duplicate, {"duplicate": 1}, False, v_duplicate),
    "nonlinearizable-offset": Case(nonlinearizable, {"nonlinearizable-offset": 1, "unseen": 2}, False,
                                   v_nonlinearizable),
    "concurrent-sends": Case(concurrent_sends, {"unseen": 2}, "unknown"),
    "nonmonotonic-send": Case(nonmonotonic_send, {"nonmonotonic-send": 1, "unseen": 2}, False),
    "nonmonotonic-send-interleaved": Case(interleaved_send, {"nonmonotonic-send": 1}, False),
    "nonmonotonic-poll": Case(nonmonotonic_poll(), {"nonmonotonic-poll": 1}, False),
    "nonmonotonic-poll-subscribe": Case(nonmonotonic_poll("subscribe"), {"nonmonotonic-poll": 1}, True,
                                        v_allowed_subscribe),
    "reassigned-rewind": Case(reassigned_rewind, {"nonmonotonic-poll": 1}, False),
    "reassigned-skip": Case(reassigned_skip, {"poll-skip": 1}, False),
    "readded-rewind": Case(readded(skip=False), {}, True),
    "readded-skip": Case(readded(skip=True), {}, True),
    "pipelined-reorder": Case(pipelined_send(("p0", "p0")), {"nonmonotonic-send": 1}, False),
    "pipelined-two-producers": Case(pipelined_send(("p0", "p1")), {}, True),
    "poll-skip": Case(poll_skip(), {"poll-skip": 1}, False, v_skip),
    "poll-skip-within": Case(poll_skip(within=True), {"poll-skip": 1}, False, v_skip),
    "poll-skip-subscribe": Case(poll_skip("subscribe"), {"poll-skip": 1}, True, v_allowed_subscribe),
    "unknown-gap": Case(unknown_gap, {}, True),
    "lost-write": Case(lost_write, {"lost-write": 1}, False, v_lost),
    "lost-by-drain": Case(lost_by_drain, {"lost-write": 2}, False, v_lost_drain),
    "read-then-truncated": Case(read_then_truncated,
                                {"lost-write": 1, "inconsistent-offset": 1, "nonlinearizable-offset": 1}, False),
    "unseen": Case(unseen, {"unseen": 1}, "unknown"),
    "drain-stopped": Case(drain_stopped, {"unseen": 1}, "unknown", v_drain_stopped),
    "phantom-write": Case(phantom, {"phantom-write": 1}, False),
    "unclean-election": Case(unclean, {"unclean-election": 1, "lost-write": 1, "inconsistent-offset": 1,
                                       "nonlinearizable-offset": 1}, False, v_unclean),
    "no-ok-send": Case(no_ok_send, {}, "unknown"),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "cases")


def reference_result(name: str, tmp_path: Path) -> Any:
    return chk_cases.reference_result(CASES[name], tmp_path)


def test_unseen_makes_the_verdict_unknown_unless_allowed_by_name(tmp_path: Path) -> None:
    path = unseen().write(tmp_path / "history.jsonl")
    r = checkers.check(path, {"engine": "reference"})
    assert r.valid == "unknown" and not r.anomalies["unseen"]["allowed"]
    assert any("never read" in u for u in r.unknown)
    lenient = checkers.check(path, {"engine": "reference", "allowed": {"unseen": "short smoke run"}})
    assert lenient.valid is True and lenient.unknown == []
    no_elr = checkers.check(path, {"engine": "reference", "allowed": {"elr-election": None}})
    assert not no_elr.anomalies["elr-election"]["allowed"]
    path = nonmonotonic_poll()().write(tmp_path / "h2.jsonl")
    ok = checkers.check(path, {"engine": "reference", "allowed": {"nonmonotonic-poll": "known client bug"}})
    assert ok.valid is True and ok.anomalies["nonmonotonic-poll"]["reason"] == "known client bug"


def test_max_witnesses_bounds_witnesses_not_counts(tmp_path: Path) -> None:
    h = History()
    for v in range(1, 8):
        h.send(0, [(0, v, v - 1)])
    h.poll(5, {0: [(6, 7)]})                          # 0..5 never read: six lost writes
    r = checkers.check(h.write(tmp_path / "history.jsonl"), {"engine": "reference", "max_witnesses": 2})
    lost = r.anomalies["lost-write"]
    assert lost["count"] == 6 and [w["values"] for w in lost["witnesses"]] == [[1], [2]]


def test_summary_lists_every_type(tmp_path: Path) -> None:
    r = checkers.check(unseen().write(tmp_path / "history.jsonl"), {"engine": "reference"})
    s = checkers.summary(r)
    assert [t for t, _, _ in s] == list(ANOMALY_TYPES)
    assert ("unseen", 1, False) in s
