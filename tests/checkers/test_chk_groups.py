"""Consumer groups, hand-written: one history per anomaly (and per edge that
matters) in both engines; the Spark side checks every case in one multi-run pass.

The base history: partitions 0 and 1 (values 1..6 and 1..4 at offsets 0..5 and
0..3), group g with members 5 and 6 under the cooperative protocol (member 6
joins, member 5 gives up partition 1 and keeps partition 0), commits as they go,
and a final drain. Each variant changes it in one place.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


import checkers
import chk_cases
from chk_builder import History
from chk_cases import Case

G = "g"


def subscribe(h: History, proc: int, group: str = G) -> None:
    h.add(proc, "invoke", "subscribe", "topic", group=group)
    h.add(proc, "ok", "subscribe", "topic", group=group)


def rebalance(h: History, proc: int, assigned: list[int], revoked: list[int], gen: int, group: str = G) -> None:
    """An event: written right after the op during which the callback ran."""
    h.add(proc, "ok", "rebalance", {"assigned": assigned, "revoked": revoked, "generation": gen,
                                    "member": f"m{proc}"}, group=group)


def gpoll(h: History, proc: int, reads: dict[int, list[tuple[int, int]]], type: str = "ok",
          group: str = G, **kw: Any) -> None:
    h.add(proc, "invoke", "poll", None, group=group, **kw)
    h.add(proc, type, "poll", {str(p): [[o, v] for o, v in rs] for p, rs in reads.items()} if type == "ok"
          else None, group=group, **kw)


def commit(h: History, proc: int, offsets: dict[int, int] | None, type: str = "ok", group: str = G,
           asked: dict[int, int] | None = None) -> None:
    """``asked`` None: commit the consumer's positions."""
    h.add(proc, "invoke", "commit", None if asked is None else {str(p): o for p, o in asked.items()},
          group=group)
    h.add(proc, type, "commit", {str(p): o for p, o in offsets.items()} if type == "ok" and offsets else None,
          group=group)


def drain(h: History) -> None:
    h.assign(9, [0, 1])
    h.poll(9, {0: [(o, o + 1) for o in range(6)], 1: [(o, o + 1) for o in range(4)]}, drain=True)


def group(*, skip: bool = False, backwards: bool = False, lost: bool = False, redeliver: bool = False,
          explained: bool = False, tainted: bool = False, backwards_explained: bool = False) -> Callable[[], History]:
    def build() -> History:
        h = History()
        for v in range(1, 7):
            h.send(0, [(0, v, v - 1)])
        for v in range(1, 5):
            h.send(1, [(1, v, v - 1)])
        subscribe(h, 5)
        gpoll(h, 5, {})
        rebalance(h, 5, [0, 1], [], 1)
        gpoll(h, 5, {0: [(0, 1), (1, 2)], 1: [(0, 1), (1, 2)]})
        commit(h, 5, {0: 2, 1: 2})
        if explained:
            commit(h, 5, None, type="info")               # positions, outcome unknown: may have gone anywhere
        subscribe(h, 6)
        gpoll(h, 6, {})
        gpoll(h, 5, {0: [(2, 3)]})
        rebalance(h, 5, [], [1], 2)                      # cooperative: 5 gives up 1, keeps 0
        gpoll(h, 6, {})
        rebalance(h, 6, [1], [], 2)
        if tainted:
            gpoll(h, 6, {}, type="info")
        gpoll(h, 5, {0: [(4, 5)] if skip else [(3, 4)]})  # skip: jumps over offset 3 across the rebalance
        if redeliver or explained:
            gpoll(h, 6, {1: [(1, 2), (2, 3), (3, 4)]})   # starts below the committed 2
        elif lost or tainted:
            gpoll(h, 6, {1: [(3, 4)]})                   # starts above the committed 2: offset 2 never delivered
        else:
            gpoll(h, 6, {1: [(2, 3), (3, 4)]})
        if not skip:
            commit(h, 5, {0: 4})
        commit(h, 6, {1: 4})
        if backwards_explained:
            commit(h, 6, None, type="info", asked={1: 1})  # timed out: may land after the commit of 4
        if backwards or backwards_explained:
            commit(h, 6, {1: 3}, asked={1: 3})
        gpoll(h, 5, {0: [(5, 6)]} if skip else {0: [(4, 5), (5, 6)]})
        if not skip:
            commit(h, 5, {0: 6})
        drain(h)
        return h
    return build


def eager_rewind() -> History:
    """Eager protocol: member 5 had read partition 0 up to offset 2 but committed 2;
    revoked everything, it gets partition 0 back and starts over at offset 2. The
    poll during which that happened already re-read offset 2: its reads of 0 may
    fall on either side, so they belong to no chain. Not nonmonotonic."""
    h = History()
    for v in range(1, 7):
        h.send(0, [(0, v, v - 1)])
    for v in range(1, 5):
        h.send(1, [(1, v, v - 1)])
    subscribe(h, 5)
    gpoll(h, 5, {})
    rebalance(h, 5, [0, 1], [], 1)
    gpoll(h, 5, {0: [(0, 1), (1, 2), (2, 3)], 1: [(0, 1), (1, 2)]})
    commit(h, 5, {0: 2, 1: 2}, asked={0: 2, 1: 2})       # commits lag the reads
    subscribe(h, 6)
    gpoll(h, 6, {})
    gpoll(h, 5, {0: [(2, 3)]})                           # already from the new assignment
    rebalance(h, 5, [], [0, 1], 2)
    rebalance(h, 5, [0], [], 2)
    gpoll(h, 6, {})
    rebalance(h, 6, [1], [], 2)
    gpoll(h, 5, {0: [(3, 4), (4, 5), (5, 6)]})
    gpoll(h, 6, {1: [(2, 3), (3, 4)]})
    commit(h, 5, {0: 6})
    commit(h, 6, {1: 4})
    drain(h)
    return h


def eager_rewind_then_back() -> History:
    """The same, but after the rebalance member 5 goes back below its own read
    of offset 3 in the new assignment: nonmonotonic-poll."""
    h = eager_rewind()
    ops = [o for o in h.ops]
    h.ops = []
    h.t = 0
    for o in ops:
        if o["f"] == "commit" and o["process"] == 5 and (o.get("value") or {}).get("0") == 6:
            gpoll(h, 5, {0: [(4, 5)]})
        h.add(o["process"], o["type"], o["f"], o["value"], **{k: v for k, v in o.items()
                                                              if k not in ("index", "time", "process", "type",
                                                                           "f", "value")})
    return h


def aborted_gap() -> History:
    """read_committed member: the value at partition 1 offset 2 belongs to an aborted
    transaction; starting above it and committing past it loses nothing."""
    h = History()
    for v in range(1, 3):
        h.send(1, [(1, v, v - 1)])
    h.add(2, "invoke", "txn", [["send", 1, 50]])
    h.add(2, "fail", "txn", [["send", 1, 50, 2]], abort=True)
    h.send(1, [(1, 3, 4)])                               # offset 3: the abort marker
    subscribe(h, 6)
    gpoll(h, 6, {}, isolation="read_committed")
    rebalance(h, 6, [1], [], 1)
    gpoll(h, 6, {1: [(0, 1), (1, 2), (4, 3)]}, isolation="read_committed")
    commit(h, 6, {1: 5})
    h.assign(9, [1])
    h.poll(9, {1: [(0, 1), (1, 2), (4, 3)]}, drain=True)
    return h




def v_mode(r: Any) -> None:
    assert r.stats["mode"] == "group"
    assert not r.anomalies["poll-skip"]["allowed"] and not r.anomalies["nonmonotonic-poll"]["allowed"]


def v_skip(r: Any) -> None:
    v_mode(r)
    w = r.anomalies["poll-skip"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["skipped"]) == (0, [2, 4], [3])


def v_backwards(r: Any) -> None:
    w = r.anomalies["commit-backwards"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["group"]) == (1, [4, 3], G)
    assert [o["f"] for o in w["ops"]] == ["commit", "commit"]


def v_lost(r: Any) -> None:
    w = r.anomalies["lost-consumption"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["values"], w["group"], w["delivered_from"]) == (1, [2, 4], [3], G, 0)
    assert [o["f"] for o in w["ops"]] == ["commit", "send"]


def v_redelivery(r: Any) -> None:
    w = r.anomalies["redelivery"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["values"], w["committed"]) == (1, [1, 2], [2], 2)
    assert [o["f"] for o in w["ops"]] == ["poll", "commit", "rebalance"]
    assert w["ops"][0]["process"] == 6 and w["ops"][1]["process"] == 5


def v_tainted(r: Any) -> None:
    assert r.stats["unknown_consumption"] == 1
    assert any("member poll ended info" in u for u in r.unknown)


CASES: dict[str, Case] = {
    "group-clean": Case(group(), {}, True, v_mode),
    "coop-keep-skip": Case(group(skip=True), {"poll-skip": 1}, False, v_skip),
    "eager-rewind": Case(eager_rewind, {}, True, v_mode),
    "eager-rewind-then-back": Case(eager_rewind_then_back, {"nonmonotonic-poll": 1}, False, v_mode),
    "commit-backwards": Case(group(backwards=True), {"commit-backwards": 1}, False, v_backwards),
    "commit-backwards-explained": Case(group(backwards_explained=True), {}, True),
    "lost-consumption": Case(group(lost=True), {"lost-consumption": 1}, False, v_lost),
    "lost-consumption-unknown": Case(group(tainted=True), {}, "unknown", v_tainted),
    "aborted-gap": Case(aborted_gap, {}, True),
    "redelivery": Case(group(redeliver=True), {"redelivery": 1}, False, v_redelivery),
    "redelivery-explained": Case(group(explained=True), {}, True),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "groups")


def reference_result(name: str, tmp_path: Path) -> Any:
    return chk_cases.reference_result(CASES[name], tmp_path)


def test_without_rebalances_subscribe_keeps_its_allowance(tmp_path: Path) -> None:
    """The same skip with the rebalance events left out (an old history): mode
    subscribe, poll-skip counted and allowed as before."""
    h = group(skip=True)()
    h.ops = [o for o in h.ops if o["f"] != "rebalance"]
    for i, o in enumerate(h.ops):
        o["index"] = i
    r = checkers.check(h.write(tmp_path / "history.jsonl"), {"engine": "reference"})
    assert r.stats["mode"] == "subscribe"
    assert r.anomalies["poll-skip"]["count"] == 1 and r.anomalies["poll-skip"]["allowed"]
    assert r.valid is True
