"""Share-group checks (KIP-932): the definitions, as plain loops (the reference
engine's; ``spark_share.py`` computes the same on Spark). docs/design.md,
"Share groups", defines each type and its witness.

Terms (the ops are the history contract's: ``history.ops``, share-group ops):

* delivery: a record of an ok ``share-poll``: (member process, partition,
  offset, value, delivery count) and its poll op.
* sending op of a member: its ``share-poll`` and ``share-commit`` ops: only
  these (and its close, after its last op) carry its marks to Kafka.
* lock window of a delivery: the record is certainly locked to its member from
  the poll's completion until the earlier of the member's next sending op's
  invocation (or, when it has none, its last op's completion, of any kind but
  the events: it closed after)
  and ``lock_ms`` after the invocation of the member's previous share-poll
  (or of this one when it has none): acquisition happened after that.
* an ok answer (an ok ``share-acked``) answers the member's last mark of that
  kind of the record before it, and that mark the member's last delivery of the
  record before the mark (the answer often comes after the poll that carried
  the mark, which may have delivered the record again).
* held past the lock: a delivery whose member's next sending op was invoked at
  least ``lock_ms + EXPIRY_MARGIN_NS`` after the poll completed (none: its last
  op completed that late). Its lock *certainly expired* (``expired_at``) when
  no ok answer answers a mark of it: nothing could have answered for the record
  before its lock ran out, so Kafka made it available again. Kafka answers a
  mark ok only when it applied it, which needs the lock still held (a paused
  leader runs no timers), or when the record was already settled (every offset
  of the acknowledgement below the share-partition's start offset is skipped):
  such a delivery (``held_answered``) owes no next delivery, but a next one
  must still carry a higher count.
* possibly settled: a record (partition, offset) marked accept or reject by an
  ok ``share-ack`` of a member that no ``share-acked`` fail of that member
  answered afterwards, or answered ok/info as accept or reject, or delivered
  with a count at or above ``delivery_count_limit`` (archived after the limit).

``lock_ms`` and ``delivery_count_limit`` come from the first ok
``share-subscribe``; without one the checks that need them find nothing.
The run's end (``share-end``) says whether unsettled records are lost; when
it is absent or says not complete they are counted in stats ``unknown_share``.

A delivery count is Kafka's promise only while the share-partition leader
stays: acquisition is never written to the share coordinator, so a new leader
starts every record from its last persisted count (docs/design.md, "Share
groups", what Kafka promises). A count that does not go up between two
deliveries across a time when the leader may have changed (a fault in force,
or healed less than ``LEADER_REBALANCE_NS`` before) is counted in stats
``unknown_share_counts`` instead of as an anomaly.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from history.fault_intervals import NemesisOp, fault_intervals
from history.ops import (ACCEPT, REJECT, RELEASE, SEND, SHARE_ACK, SHARE_ACKED, SHARE_COMMIT, SHARE_END,
                         SHARE_POLL, SHARE_SUBSCRIBE)
from history.op_values import send_messages, share_deliveries, share_marks
from history.paired import PairedOp

from .common import Finding, Settings, Witness

SHARE_TYPES = ("lost-share-record", "share-accepted-redelivered", "share-not-redelivered",
               "share-double-delivery", "share-count-decrease")
UNKNOWN_SHARE_STAT = "unknown_share"        # stats: unsettled records the run's end cannot judge
EXPIRY_MARGIN_NS = 2_000_000_000            # the broker's lock timer runs late by up to this much
UNKNOWN_COUNT_STAT = "unknown_share_counts"  # stats: counts that did not go up across a possible leader change
# After a fault heals, the controller's preferred-leader election (leader.imbalance.check.interval.seconds,
# 300 s by default) may move a partition's leadership back to the returned broker: a leader change no
# nemesis op marks.
LEADER_REBALANCE_NS = 300 * 1_000_000_000
SENDING = (SHARE_POLL, SHARE_COMMIT)
# Completions without an invoke: a member's answers (written after the op, or after its close) and
# the share drain's end do not bound when the member closed.
EVENTS = (SHARE_ACKED, SHARE_END)


@dataclass(frozen=True)
class Delivery:
    process: int
    partition: int
    offset: int
    value: int
    count: int
    poll: PairedOp


@dataclass(frozen=True)
class ShareFacts:
    """Everything the share checks read from a run, gathered once."""

    deliveries: list[Delivery]
    lock_ns: int | None
    limit: int | None
    complete: bool | None                   # the share-end's verdict; None: no share-end
    end_why: str | None
    hold_end: dict[int, int]                # id(delivery index) -> end of its lock window (ns)
    expired_at: dict[int, int]              # delivery index -> time its lock certainly ran out
    held_answered: set[int]                 # held past the lock, but an ok answer answers a mark of it
    settled: set[tuple[int, int]]
    answers: list[tuple[PairedOp, str, int, int]]   # share-acked events: (op, kind, partition, offset)
    marks: list[tuple[PairedOp, str, int, int]]     # ok share-acks: (op, kind, partition, offset)
    answered: list[tuple[int, PairedOp, str]]       # (delivery index, its ok answer, kind): answered_deliveries
    acked_sends: list[tuple[int, int, int, PairedOp]]   # (partition, offset, value, send op)
    leader_windows: list[tuple[int, int | None]]        # leader_change_windows of the run's faults


def leader_change_windows(nemesis: list[NemesisOp]) -> list[tuple[int, int | None]]:
    """(from, until) ns: the times a share-partition leader may have changed, one per fault
    interval, from its start until ``LEADER_REBALANCE_NS`` after its end (None: never ended)."""
    return [(iv.start_time, None if iv.end_time is None else iv.end_time + LEADER_REBALANCE_NS)
            for iv in fault_intervals(nemesis)]


def leader_may_change(windows: list[tuple[int, int | None]], lo: int, hi: int) -> bool:
    """Whether a leader change may lie between ``lo`` and ``hi`` (ns)."""
    return any(start <= hi and (until is None or until >= lo) for start, until in windows)


def answered_deliveries(deliveries: list[Delivery], marks: list[tuple[PairedOp, str, int, int]],
                        answers: list[tuple[PairedOp, str, int, int]]) -> list[tuple[int, PairedOp, str]]:
    """(delivery index, answer, kind) for each ok answer and the delivery it answers: the member's
    last mark of that kind of the record before the answer, and that mark's delivery the member's
    last of the record whose poll was invoked before the mark (the answer often comes after the
    poll that carried the mark, which may have delivered the record again)."""
    mark_ids: dict[tuple[int, str, int, int], list[int]] = defaultdict(list)
    for m, k, p, off in marks:
        mark_ids[(m.process, k, p, off)].append(m.invoke_index)
    polls: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)
    for i, d in enumerate(deliveries):
        polls[(d.process, d.partition, d.offset)].append((d.poll.invoke_index, i))
    out = []
    for ans, k, p, off in answers:
        if ans.type != "ok":
            continue
        marked = [m for m in mark_ids.get((ans.process, k, p, off), ()) if m < ans.invoke_index]
        mine = [(pid, i) for pid, i in polls.get((ans.process, p, off), ()) if marked and pid < max(marked)]
        if mine:
            out.append((max(mine)[1], ans, k))
    return out


def _ns(x: Any) -> int:
    return int(x) if x is not None else 0


def gather(ops: list[PairedOp]) -> ShareFacts | None:
    """The share facts of a run, or None when it has no share-group op."""
    share = [o for o in ops if o.client and o.f.startswith("share-")]
    if not share:
        return None
    by_inv = sorted(ops, key=lambda o: o.invoke_index)
    nemesis = [NemesisOp(index=o.invoke_index, invoke_time=o.invoke_time, time=o.time, f=o.f, value=o.value,
                         error=o.error) for o in by_inv if o.role == "nemesis"]
    lock_ns = limit = None
    complete, why = None, None
    deliveries: list[Delivery] = []
    sending: dict[int, list[int]] = defaultdict(list)     # process -> invoke times of sending ops
    polls: dict[int, list[PairedOp]] = defaultdict(list)
    last_done: dict[int, int] = {}
    marks: list[tuple[PairedOp, str, int, int]] = []
    answers: list[tuple[PairedOp, str, int, int]] = []
    acked_sends: list[tuple[int, int, int, PairedOp]] = []
    for o in by_inv:
        if not o.client:
            continue
        where = f"op index {o.invoke_index}"
        if o.process is not None and o.f not in EVENTS:     # the close came after its last op of any kind
            last_done[o.process] = max(last_done.get(o.process, 0), _ns(o.time if o.time is not None
                                                                       else o.invoke_time))
        if o.f == SEND:
            acked_sends += [(p, off, v, o) for p, off, v in send_messages(o.value, where) if off is not None]
        elif o.f == SHARE_SUBSCRIBE and o.type == "ok" and lock_ns is None and isinstance(o.value, dict):
            lock_ns = int(o.value.get("lock_ms")) * 1_000_000 if o.value.get("lock_ms") is not None else None
            limit = o.value.get("delivery_count_limit")
        elif o.f in SENDING:
            sending[o.process].append(o.invoke_time)
            if o.f == SHARE_POLL:
                polls[o.process].append(o)
                if o.type == "ok":
                    deliveries += [Delivery(o.process, p, off, v, c, o)
                                   for p, off, v, c in share_deliveries(o.value, where)]
        elif o.f == SHARE_ACK and o.type == "ok":
            marks += [(o, k, p, off) for k, p, off in share_marks(o.value, where)]
        elif o.f == SHARE_ACKED:
            answers += [(o, k, p, off) for k, p, off in share_marks(o.value, where)]
        elif o.f == SHARE_END and isinstance(o.value, dict):
            complete, why = bool(o.value.get("complete")), o.value.get("why")
    answered = answered_deliveries(deliveries, marks, answers)
    answered_ok = {i for i, _, _ in answered}
    hold_end: dict[int, int] = {}
    expired_at: dict[int, int] = {}
    held_answered: set[int] = set()
    for i, d in enumerate(deliveries):
        times = sending[d.process]
        nxt = next((t for t in times if t > d.poll.invoke_time), None)
        before = [p for p in polls[d.process] if p.invoke_index < d.poll.invoke_index]
        acq_lo = before[-1].invoke_time if before else d.poll.invoke_time
        quiet_until = nxt if nxt is not None else last_done.get(d.process, _ns(d.poll.time))
        if lock_ns is not None:
            hold_end[i] = min(quiet_until, acq_lo + lock_ns)
            if quiet_until >= _ns(d.poll.time) + lock_ns + EXPIRY_MARGIN_NS and i in answered_ok:
                held_answered.add(i)
            elif quiet_until >= _ns(d.poll.time) + lock_ns + EXPIRY_MARGIN_NS:
                expired_at[i] = _ns(d.poll.time) + lock_ns + EXPIRY_MARGIN_NS
    failed = {(o.process, p, off, o.invoke_index) for o, _, p, off in answers if o.type == "fail"}
    fail_times: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for proc, p, off, idx in failed:
        fail_times[(proc, p, off)].append(idx)
    settled = {(p, off) for o, k, p, off in marks if k in (ACCEPT, REJECT)
               and not any(i > o.invoke_index for i in fail_times.get((o.process, p, off), ()))}
    settled |= {(p, off) for o, k, p, off in answers if k in (ACCEPT, REJECT) and o.type in ("ok", "info")}
    if limit is not None:
        settled |= {(d.partition, d.offset) for d in deliveries if d.count >= limit}
    return ShareFacts(deliveries, lock_ns, limit, complete, why, hold_end, expired_at, held_answered, settled,
                      answers, marks, answered, acked_sends, leader_change_windows(nemesis))


def _first(items: list[tuple[tuple, Witness]], k: int) -> Finding:
    items.sort(key=lambda kw: kw[0])
    return Finding(count=len(items), witnesses=[w for _, w in items[:k]])


def _w(p: int, o: int, v: int, ops: list[PairedOp], **extra: Any) -> Witness:
    return Witness(p, [o], [v], [x.invoke_index for x in ops], extra)


def check_share(ops: list[PairedOp], settings: Settings) -> tuple[dict[str, Finding], dict[str, Any]]:
    """Findings of every share type, and the share stats (empty without share ops)."""
    facts = gather(ops)
    if facts is None:
        return {t: Finding() for t in SHARE_TYPES}, {}
    k = settings.max_witnesses
    found: dict[str, list[tuple[tuple, Witness]]] = {t: [] for t in SHARE_TYPES}
    ds = facts.deliveries
    of: dict[tuple[int, int], list[int]] = defaultdict(list)     # record -> its deliveries, by poll invoke
    for i in sorted(range(len(ds)), key=lambda i: (ds[i].poll.invoke_index, ds[i].offset)):
        of[(ds[i].partition, ds[i].offset)].append(i)
    # lost-share-record: an acknowledged send never possibly settled
    unjudged = 0
    for p, o, v, send in facts.acked_sends:
        if (p, o) in facts.settled:
            continue
        if facts.complete:
            polls = [ds[i].poll for i in of.get((p, o), [])]
            found["lost-share-record"].append(((p, o, send.invoke_index), _w(p, o, v, [send, *polls])))
        else:
            unjudged += 1
    # share-accepted-redelivered: delivered by a poll invoked after an ok accept answer
    for ans, kind, p, o in facts.answers:
        if ans.type != "ok" or kind != ACCEPT:
            continue
        later = [i for i in of.get((p, o), []) if ds[i].poll.invoke_time > _ns(ans.time)]
        if later:
            d = ds[later[0]]
            found["share-accepted-redelivered"].append(
                ((p, o, ans.invoke_index), _w(p, o, d.value, [ans, d.poll], delivery_count=d.count)))
    # share-not-redelivered: released (ok answer) or lock-expired below the limit, and the next
    # delivery after it is missing (judged at a complete end) or has no higher count
    # (delivery index, evidence op, whether a missing next delivery is an anomaly): a delivery held
    # past its lock whose mark Kafka answered ok owes no next delivery, but one that comes must
    # still carry a higher count (docs/design.md, "Share groups": lock expiry)
    released = [(i, ans, True) for i, ans, kind in facts.answered if kind == RELEASE]
    released += [(i, ds[i].poll, True) for i in facts.expired_at]
    released += [(i, ds[i].poll, False) for i in facts.held_answered]
    seen: set[int] = set()
    uncertain_counts = 0        # counts that did not go up across a possible leader change
    for i, evidence, owed in sorted(released, key=lambda r: (r[0], r[1].invoke_index)):
        d = ds[i]
        if i in seen or (facts.limit is not None and d.count >= facts.limit):
            continue
        # the next delivery: the first (by completion) whose poll completed after this one's; a
        # poll invoked earlier may still be the redelivery (it waits up to its timeout)
        after = sorted((j for j in of[(d.partition, d.offset)] if _ns(ds[j].poll.time) > _ns(d.poll.time)),
                       key=lambda j: _ns(ds[j].poll.index))
        if not after and not owed:      # judged by its release answer, if it has one
            continue
        seen.add(i)
        if after and ds[after[0]].count > d.count:
            continue
        if after and leader_may_change(facts.leader_windows, d.poll.invoke_time, _ns(ds[after[0]].poll.time)):
            uncertain_counts += 1
            continue
        if not after and not facts.complete:
            continue
        nxt = [ds[after[0]].poll] if after else []
        ops_ = [d.poll] + ([evidence] if evidence is not d.poll else []) + nxt
        found["share-not-redelivered"].append(
            ((d.partition, d.offset, d.poll.invoke_index),
             _w(d.partition, d.offset, d.value, ops_, delivery_count=d.count,
                why="released" if evidence is not d.poll else "lock expired")))
    # share-double-delivery and share-count-decrease: pairs of deliveries of one record
    for (p, o), idx in of.items():
        flagged_double: set[int] = set()
        flagged_down: set[int] = set()
        excused_down: set[int] = set()
        for a in idx:
            da = ds[a]
            for b in idx:
                db = ds[b]
                if db.poll.invoke_time < _ns(da.poll.time) or a == b:
                    continue
                if (db.process != da.process and a in facts.hold_end and b not in flagged_double
                        and _ns(db.poll.time) <= facts.hold_end[a]):
                    flagged_double.add(b)
                    found["share-double-delivery"].append(
                        ((p, o, db.poll.invoke_index), _w(p, o, db.value, [da.poll, db.poll],
                                                          delivery_counts=[da.count, db.count])))
                if db.count < da.count and b not in flagged_down and leader_may_change(
                        facts.leader_windows, da.poll.invoke_time, _ns(db.poll.time)):
                    excused_down.add(b)
                elif db.count < da.count and b not in flagged_down:
                    flagged_down.add(b)
                    found["share-count-decrease"].append(
                        ((p, o, db.poll.invoke_index), _w(p, o, db.value, [da.poll, db.poll],
                                                          delivery_counts=[da.count, db.count])))
        uncertain_counts += len(excused_down - flagged_down)
    stats: dict[str, Any] = {"share": {"deliveries": len(ds), "records": len(of), "settled": len(facts.settled),
                                       "end_complete": facts.complete}}
    if unjudged:
        stats[UNKNOWN_SHARE_STAT] = unjudged
        stats["share"]["end_why"] = facts.end_why
    if uncertain_counts:
        stats[UNKNOWN_COUNT_STAT] = uncertain_counts
    return {t: _first(found[t], k) for t in SHARE_TYPES}, stats
