"""Share groups, hand-written: one history per anomaly (and per edge that
matters) in both engines; the Spark side checks every case in one multi-run pass.

The base history: partition 0 holds values 1..4 at offsets 0..3. Share
members 5 and 6 (lock 1 s, delivery limit 3): member 5 is delivered offsets 0
and 1, accepts 0 and releases 1; member 6 is delivered 1 again (count 2), 2
and 3, and accepts them; the share drain says the end is complete. Each
variant changes it in one place. ``held`` has member 5 hold its records past
their locks before it marks them, with Kafka's answer ``ok`` or ``fail``
(``taken_over``: member 6 gets offset 0 meanwhile, count 1 again). ``leader_change`` kills a broker before
member 6's poll: counts that do not go up after it are unknown, not anomalies,
while an ok accept answered before it still may not be delivered again.
"""
from __future__ import annotations

from typing import Any, Callable

import chk_cases
from chk_builder import MS, History
from chk_cases import Case

G = "sg"


def subscribe(h: History, proc: int, lock_ms: int = 1000, limit: int = 3) -> None:
    h.add(proc, "invoke", "share-subscribe", "topic", group=G)
    h.add(proc, "ok", "share-subscribe", {"topic": "topic", "lock_ms": lock_ms, "delivery_count_limit": limit},
          group=G)


def spoll(h: History, proc: int, recs: list[tuple[int, int, int]], p: int = 0, dt: int = MS) -> None:
    """recs: (offset, value, delivery count)."""
    h.add(proc, "invoke", "share-poll", None, group=G, dt=dt)
    h.add(proc, "ok", "share-poll", {str(p): [list(r) for r in recs]} if recs else {}, group=G)


def marks(kinds: dict[str, list[int]], p: int = 0) -> dict[str, Any]:
    return {k: {str(p): offs} for k, offs in kinds.items() if offs}


def ack(h: History, proc: int, kinds: dict[str, list[int]], answer: str | None = "ok", dt: int = MS) -> None:
    """A share-ack marking ``kinds``, a share-commit, and its share-acked answer."""
    h.add(proc, "invoke", "share-ack", None, group=G, dt=dt)
    h.add(proc, "ok", "share-ack", marks(kinds), group=G)
    h.add(proc, "invoke", "share-commit", None, group=G)
    h.add(proc, "ok" if answer == "ok" else "info", "share-commit", {"0": None}, group=G)
    if answer is not None:
        h.add(proc, answer, "share-acked", marks(kinds), group=G)


def end(h: History, complete: bool = True) -> None:
    h.add(20, "ok", "share-end", {"complete": complete, "why": "quiet for 3 s" if complete else "timed out"},
          group=G)


def share(*, lost: bool = False, incomplete: bool = False, redeliver_accepted: bool = False,
          same_count: bool = False, expired: bool = False, double: bool = False,
          decrease: bool = False, leader_change: bool = False, held: str | None = None,
          taken_over: bool = False) -> Callable[[], History]:
    def build() -> History:
        h = History()
        for v in range(1, 5):
            h.send(0, [(0, v, v - 1)])
        if lost:
            h.send(0, [(0, 5, 4)])
        subscribe(h, 5)
        subscribe(h, 6)
        spoll(h, 5, [(0, 1, 1), (1, 2, 1)])
        if double:
            spoll(h, 6, [(0, 1, 2)])
        if expired or held:     # member 5 holds both past their locks
            h.add(5, "invoke", "share-hold", 4.0, group=G)
            h.add(5, "ok", "share-hold", 4.0, group=G, dt=4000 * MS)
            if taken_over:      # member 6 gets offset 0 while 5 holds it, with no higher count
                spoll(h, 6, [(0, 1, 1)])
            ack(h, 5, {"accept": [0], "release": [1]}, answer=held or "fail")
        else:
            ack(h, 5, {"accept": [0], "release": [1]})
        if leader_change:   # a broker kill (never healed): every share-partition leader may move after it
            h.nemesis("kill", {"nodes": ["n1"]})
        c1 = 1 if (same_count or expired) else 2      # held: offset 1 comes back released or expired
        again = [(0, 1, 2)] if expired else []
        spoll(h, 6, again + [(1, 2, c1), (2, 3, 1), (3, 4, 2 if decrease else 1)])
        done = [0, 1, 2] if expired else [1, 2]
        ack(h, 6, {"accept": done, **({"release": [3]} if decrease else {"accept": done + [3]})},
            answer="info" if decrease else "ok")
        if decrease:
            spoll(h, 5, [(3, 4, 1)])
            ack(h, 5, {"accept": [3]})
        if redeliver_accepted:
            spoll(h, 6, [(0, 1, 2)])
            ack(h, 6, {"accept": [0]})
        if double:
            ack(h, 6, {"accept": [0]})
        end(h, complete=not incomplete)
        h.assign(9, [0])     # the runner's plain drain reads the partition as well
        h.poll(9, {0: [(o, o + 1) for o in range(5 if lost else 4)]}, drain=True)
        return h
    return build


def _unknown(r: Any) -> None:
    assert r.stats["unknown_share"] == 1
    assert any("share group" in u for u in r.unknown)


def _leader_changed(r: Any) -> None:
    assert r.stats["unknown_share_counts"] == 1
    assert any("leader may have changed" in u for u in r.unknown)


def _expired(r: Any, offset: int = 1) -> None:
    (w,) = r.anomalies["share-not-redelivered"]["witnesses"]
    assert w["why"] == "lock expired" and w["offsets"] == [offset]


CASES: dict[str, Case] = {
    "valid": Case(share(), {}, True),
    "lost-share-record": Case(share(lost=True), {"lost-share-record": 1}, False),
    "lost-unjudged": Case(share(lost=True, incomplete=True), {}, "unknown", verify=_unknown),
    "accepted-redelivered": Case(share(redeliver_accepted=True), {"share-accepted-redelivered": 1}, False),
    "released-same-count": Case(share(same_count=True), {"share-not-redelivered": 1}, False),
    "expired-same-count": Case(share(expired=True), {"share-not-redelivered": 1}, False, verify=_expired),
    # held past the lock, but Kafka answered the marks ok: the lock had not run out in Kafka's view
    # (a paused leader runs no timers), so the accepted offset 0 is rightly never delivered again
    "held-answered-ok": Case(share(held="ok"), {}, True),
    # the same answered INVALID_RECORD_STATE: the lock did run out, and offset 0 never came back
    # an ok answer may also be Kafka skipping a record already settled: a next delivery, when one
    # comes, must still carry a higher count
    "held-answered-ok-taken-over": Case(share(held="ok", taken_over=True), {"share-not-redelivered": 1}, False,
                                        verify=lambda r: _expired(r, 0)),
    "held-answered-fail": Case(share(held="fail"), {"share-not-redelivered": 1, "lost-share-record": 1}, False,
                               verify=lambda r: _expired(r, 0)),
    "double-delivery": Case(share(double=True), {"share-double-delivery": 1}, False),
    "count-decrease": Case(share(decrease=True), {"share-count-decrease": 1}, False),
    # a leader change may lie between the two deliveries: Kafka's count is best-effort there
    "released-same-count-leader-change": Case(share(same_count=True, leader_change=True), {}, "unknown",
                                              verify=_leader_changed),
    "count-decrease-leader-change": Case(share(decrease=True, leader_change=True), {}, "unknown",
                                         verify=_leader_changed),
    "accepted-redelivered-leader-change": Case(share(redeliver_accepted=True, leader_change=True),
                                               {"share-accepted-redelivered": 1}, False),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "share")
