"""Transaction checks: one tiny hand-written history per anomaly (and per
edge that matters), with its clean variant, in both engines. The Spark side
checks every case in one multi-run pass."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


import checkers
import chk_cases
from chk_builder import History
from chk_cases import Case

Mop = tuple  # ("send", partition, value, offset | None) | ("poll", {partition: [(offset, value)]})


def _value(mops: list[Mop]) -> list[list]:
    return [["send", m[1], m[2], m[3]] if m[0] == "send" else
            ["poll", {str(p): [[o, v] for o, v in rs] for p, rs in m[1].items()}] for m in mops]


def begin(h: History, proc: int, mops: list[Mop], **kw: Any) -> None:
    h.add(proc, "invoke", "txn", [["send", m[1], m[2]] if m[0] == "send" else ["poll"] for m in mops], **kw)


def end(h: History, proc: int, mops: list[Mop], type: str = "ok", **kw: Any) -> None:
    h.add(proc, type, "txn", _value(mops), **kw)


def txn(h: History, proc: int, mops: list[Mop], type: str = "ok", **kw: Any) -> None:
    begin(h, proc, mops, **kw)
    end(h, proc, mops, type, **kw)


def sends(h: History, proc: int, part: int, pairs: list[tuple[int, int]]) -> None:
    for value, offset in pairs:
        h.send(proc, [(part, value, offset)])


RU = {"isolation": "read_uncommitted"}


def ru_poll(h: History, proc: int, reads: dict[int, list[tuple[int, int]]]) -> None:
    h.add(proc, "invoke", "poll", None, **RU)
    h.add(proc, "ok", "poll", {str(p): [[o, v] for o, v in rs] for p, rs in reads.items()}, **RU)


# ------------------------------------------------------------------ cases

def clean() -> History:
    """Two committed txns, an aborted one (its offsets, and a commit marker's,
    skipped by read_committed readers; seen by a read_uncommitted one), a
    read_committed poll chain across them, a complete drain."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 2, 1), ("send", 1, 3, 0), ("poll", {0: [(0, 1)]})])          # marker at 0@2, 1@1
    txn(h, 2, [("send", 0, 4, 3)], type="fail", abort=True)                            # marker at 0@4
    sends(h, 3, 0, [(6, 5)])
    txn(h, 2, [("poll", {0: [(1, 2), (5, 6)]}), ("send", 1, 5, 2)], producer="t2.0")   # rc: skips 3 and 4
    ru_poll(h, 4, {0: [(0, 1), (1, 2), (3, 4), (5, 6)]})
    h.poll(5, {0: [(0, 1), (1, 2)]})
    h.poll(5, {0: [(5, 6)]})                                                           # rc poll: skips 3
    h.assign(9, [0, 1])
    h.poll(9, {0: [(0, 1), (1, 2), (5, 6)], 1: [(0, 3), (2, 5)]}, drain=True)
    return h


def aborted_read(isolation: str | None) -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0)])
        txn(h, 1, [("send", 0, 5, 1)], type="fail")
        kw = {} if isolation is None else {"isolation": isolation}
        h.add(2, "invoke", "poll", None, **kw)
        h.add(2, "ok", "poll", {"0": [[0, 1], [1, 5]]}, **kw)
        return h
    return build


def aborted_drain() -> History:
    """The final drain (read_committed) returns an aborted txn's value: KAFKA-17754's aborted read."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 5, 1), ("send", 1, 6, 0)], type="fail")
    h.poll(9, {0: [(0, 1), (1, 5)], 1: []}, drain=True)
    return h


def own_write(isolation: str | None) -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0)])
        kw = {} if isolation is None else {"isolation": isolation}
        txn(h, 1, [("send", 0, 5, 1), ("poll", {0: [(0, 1), (1, 5)]})], **kw)
        return h
    return build


def read_before_invoke(before: bool) -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0)])
        if before:
            h.poll(2, {0: [(0, 1), (1, 5)]})
        txn(h, 1, [("send", 0, 5, 1)])
        if not before:
            h.poll(2, {0: [(0, 1), (1, 5)]})
        return h
    return build


def torn_info(torn: bool) -> Callable[[], History]:
    """An info txn: all of it in the drain, or none (clean), or part (torn)."""
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0)])
        txn(h, 1, [("send", 0, 5, 1), ("send", 1, 6, 0)], type="info")
        h.poll(9, {0: [(0, 1), (1, 5)], 1: [] if torn else [(0, 6)]}, drain=True)
        return h
    return build


def torn_ok() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 5, 1), ("send", 1, 6, 0)])
    h.poll(9, {0: [(0, 1), (1, 5)], 1: []}, drain=True)
    return h


def lost_txn_write() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 5, 1)])
    sends(h, 0, 0, [(2, 3)])              # the commit marker took offset 2
    h.poll(2, {0: [(0, 1)]})
    h.poll(3, {0: [(3, 2)]})              # reads reached offset 1
    return h


def unseen_txn_write() -> History:
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 5, 1)])
    h.poll(2, {0: [(0, 1)]})
    return h


def int_poll(kind: str) -> Callable[[], History]:
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
        h.poll(5, {0: [(0, 1), (1, 2), (2, 3)]})
        if kind == "skip":
            txn(h, 1, [("poll", {0: [(0, 1)]}), ("poll", {0: [(2, 3)]})])
        elif kind == "back":
            txn(h, 1, [("poll", {0: [(0, 1), (1, 2)]}), ("poll", {0: [(1, 2)]})])
        elif kind == "rebalanced":     # the skip, with a rebalance of 0 right after the txn
            txn(h, 1, [("poll", {0: [(0, 1)]}), ("poll", {0: [(2, 3)]})], group="g")
            h.add(1, "ok", "rebalance", {"assigned": [], "revoked": [0], "generation": 2, "member": "m1"},
                  group="g")
        else:
            txn(h, 1, [("poll", {0: [(0, 1)]}), ("poll", {0: [(1, 2), (2, 3)]})])
        return h
    return build


def rc_skips_aborted() -> History:
    """A read_committed txn and poll skip offset 1, known only from an aborted
    txn's value read at read_uncommitted: no skip for them; a
    read_uncommitted txn skipping it does skip."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 1, [("send", 0, 9, 1)], type="fail")
    sends(h, 0, 0, [(3, 3)])
    ru_poll(h, 4, {0: [(0, 1), (1, 9), (3, 3)]})
    txn(h, 2, [("poll", {0: [(0, 1)]}), ("poll", {0: [(3, 3)]})])
    h.poll(5, {0: [(0, 1)]})
    h.poll(5, {0: [(3, 3)]})
    txn(h, 3, [("poll", {0: [(0, 1)]}), ("poll", {0: [(3, 3)]})], **RU)
    return h


def int_send(kind: str) -> Callable[[], History]:
    def build() -> History:
        h = History()
        if kind == "back":     # an aborted txn: its offsets are no acks, so only the int- check sees it
            txn(h, 1, [("send", 0, 5, 2), ("send", 0, 6, 1)], type="fail")
            sends(h, 0, 0, [(1, 4)])
            h.poll(2, {0: [(4, 1)]})
            return h
        skip = kind == "skip"      # another producer's value lands between the txn's two
        begin(h, 1, [("send", 0, 5, None), ("send", 0, 6, None)])
        sends(h, 0, 0, [(7, 2 if skip else 3)])
        end(h, 1, [("send", 0, 5, 1), ("send", 0, 6, 3 if skip else 2)])
        h.poll(2, {0: [(1, 5), (2, 7), (3, 6)] if skip else [(1, 5), (2, 6), (3, 7)]})
        return h
    return build


def g0() -> History:
    """A before B in partition 0, B before A in partition 1: concurrent txns interleave."""
    h = History()
    begin(h, 1, [("send", 0, 5, None), ("send", 1, 6, None)])
    begin(h, 2, [("send", 0, 7, None), ("send", 1, 8, None)])
    end(h, 1, [("send", 0, 5, 0), ("send", 1, 6, 1)])
    end(h, 2, [("send", 0, 7, 1), ("send", 1, 8, 0)])
    h.poll(3, {0: [(0, 5), (1, 7)], 1: [(0, 8), (1, 6)]})
    return h


def g0_realtime() -> History:
    """T1 writes 0 early, T2 runs whole, then T3 (invoked after T2 completed)
    writes 1 before T1 does: T1 ww T2 rt T3 ww T1, legal for a long T1."""
    h = History()
    begin(h, 1, [("send", 0, 5, None), ("send", 1, 6, None)])
    txn(h, 2, [("send", 0, 7, 1)])
    txn(h, 3, [("send", 1, 8, 0)])
    end(h, 1, [("send", 0, 5, 0), ("send", 1, 6, 1)])
    h.poll(4, {0: [(0, 5), (1, 7)], 1: [(0, 8), (1, 6)]})
    return h


def g1c() -> History:
    """A reads B's write and B reads A's: each committed before the other."""
    h = History()
    begin(h, 1, [("send", 0, 5, None), ("poll", {})])
    begin(h, 2, [("send", 1, 6, None), ("poll", {})])
    end(h, 1, [("send", 0, 5, 0), ("poll", {1: [(0, 6)]})])
    end(h, 2, [("send", 1, 6, 0), ("poll", {0: [(0, 5)]})])
    return h


def g1c_order(same_process: bool) -> Callable[[], History]:
    """B read A's value, yet completed before A was invoked."""
    def build() -> History:
        h = History()
        txn(h, 1, [("poll", {0: [(0, 5)]}), ("send", 1, 6, 0)])
        txn(h, 1 if same_process else 2, [("send", 0, 5, 0)])
        h.poll(3, {1: [(0, 6)]})
        return h
    return build


def ww_wr_cycle() -> History:
    """T1 writes 0, T2 writes 0 after it and 1, commits; T1 reads T2's write to 1:
    T1 ww T2 wr T1, legal (write order is not commit order). No G0, no G1c."""
    h = History()
    begin(h, 1, [("send", 0, 5, None), ("poll", {})])
    txn(h, 2, [("send", 0, 7, 1), ("send", 1, 8, 0)])
    end(h, 1, [("send", 0, 5, 0), ("poll", {1: [(0, 8)]})])
    h.poll(3, {0: [(0, 5), (1, 7)], 1: [(0, 8)]})
    return h


# ---------------------------------------------------------- witness checks

def w0(r: Any, typ: str) -> dict:
    return r.anomalies[typ]["witnesses"][0]


def v_aborted(r: Any) -> None:
    w = w0(r, "aborted-read")
    assert (w["partition"], w["offsets"], w["values"]) == (0, [1], [5])
    assert [(o["f"], o["type"]) for o in w["ops"]] == [("txn", "fail"), ("poll", "ok")]


def v_own(r: Any) -> None:
    w = w0(r, "precommitted-read")
    assert (w["offsets"], w["values"]) == ([1], [5]) and [o["f"] for o in w["ops"]] == ["txn"]


def v_torn(r: Any) -> None:
    w = w0(r, "torn-transaction")
    assert (w["partition"], w["values"], w["present"], w["absent"]) == (1, [6], [[0, 1, 5]], [[1, 0, 6]])


def v_skip(r: Any) -> None:
    w = w0(r, "int-poll-skip")
    assert (w["offsets"], w["skipped"], w["skipped_count"]) == ([0, 2], [1], 1)


def v_cycle(typ: str, kinds: list[str]) -> Callable[[Any], None]:
    def verify(r: Any) -> None:
        w = w0(r, typ)
        steps = w["cycle"]
        assert sorted(s["kind"] for s in steps) == sorted(kinds)
        assert [s["to"] for s in steps] == [s["from"] for s in steps[1:]] + [steps[0]["from"]]
        assert [o["invoke_index"] for o in w["ops"]] == [s["from"] for s in steps]
        assert all(s["partition"] is not None for s in steps if s["kind"] in ("ww", "wr"))
    return verify




CASES: dict[str, Case] = {
    "clean": Case(clean, {}, True),
    "aborted-read": Case(aborted_read(None), {"aborted-read": 1}, False, v_aborted),
    "aborted-read-committed": Case(aborted_read("read_committed"), {"aborted-read": 1}, False, v_aborted),
    "aborted-read-uncommitted": Case(aborted_read("read_uncommitted"), {}, True),
    "aborted-by-drain": Case(aborted_drain, {"aborted-read": 1}, False),
    "precommitted-own-write": Case(own_write(None), {"precommitted-read": 1}, False, v_own),
    "own-write-uncommitted": Case(own_write("read_uncommitted"), {}, True),
    "precommitted-before-invoke": Case(read_before_invoke(True), {"precommitted-read": 1}, False),
    "read-after-commit": Case(read_before_invoke(False), {}, True),
    "torn-info": Case(torn_info(True), {"torn-transaction": 1, "lost-txn-write": 1}, False, v_torn),
    "whole-info": Case(torn_info(False), {}, True),
    "torn-ok": Case(torn_ok, {"torn-transaction": 1, "lost-txn-write": 1}, False, v_torn),
    "lost-txn-write": Case(lost_txn_write, {"lost-txn-write": 1}, False),
    "unseen-txn-write": Case(unseen_txn_write, {"unseen": 1}, "unknown"),
    "int-poll-skip": Case(int_poll("skip"), {"int-poll-skip": 1}, False, v_skip),
    "int-nonmonotonic-poll": Case(int_poll("back"), {"int-nonmonotonic-poll": 1}, False),
    "int-poll-contiguous": Case(int_poll("clean"), {}, True),
    "int-poll-rebalanced": Case(int_poll("rebalanced"), {}, True),
    "rc-skips-aborted": Case(rc_skips_aborted, {"int-poll-skip": 1}, False),
    "int-nonmonotonic-send": Case(int_send("back"), {"int-nonmonotonic-send": 1}, False),
    "int-send-skip": Case(int_send("skip"), {"int-send-skip": 1}, True),
    "int-send-contiguous": Case(int_send("clean"), {}, True),
    "G0": Case(g0, {"G0": 1}, True, v_cycle("G0", ["ww", "ww"])),
    "G0-realtime": Case(g0_realtime, {"G0-realtime": 1}, True, v_cycle("G0-realtime", ["ww", "realtime", "ww"])),
    "G1c": Case(g1c, {"G1c": 1}, False, v_cycle("G1c", ["wr", "wr"])),
    "G1c-realtime": Case(g1c_order(False), {"G1c-realtime": 1, "precommitted-read": 1}, False,
                         v_cycle("G1c-realtime", ["wr", "realtime"])),
    "G1c-process": Case(g1c_order(True), {"G1c-process": 1, "G1c-realtime": 1, "precommitted-read": 1}, False,
                        v_cycle("G1c-process", ["wr", "process"])),
    "ww-wr-cycle-is-legal": Case(ww_wr_cycle, {}, True),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "txn-cases")


def reference_result(name: str, tmp_path: Path) -> Any:
    return chk_cases.reference_result(CASES[name], tmp_path)


def test_default_allowances_and_taking_them_away(tmp_path: Path) -> None:
    r = reference_result("G0", tmp_path)
    assert r.anomalies["G0"]["allowed"] and "append order" in r.anomalies["G0"]["reason"]
    assert r.anomalies["int-send-skip"]["allowed"] and not r.anomalies["G1c"]["allowed"]
    strict = checkers.check(g0().write(tmp_path / "h2.jsonl"), {"engine": "reference", "allowed": {"G0": None}})
    assert strict.valid is False and not strict.anomalies["G0"]["allowed"]
