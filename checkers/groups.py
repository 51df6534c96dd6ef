"""Consumer-group checks: the definitions, as plain loops (the reference engine's;
``spark_groups.py`` computes the same on Spark). docs/design.md, "What the checkers decide".

Terms, besides reference.py's:

* member: a client process whose ops name a ``group``. Its ``rebalance`` events
  say which partitions it gains (``assigned``) and loses (``revoked``).
* the op a rebalance follows: the last op of its process before the event that is
  not itself a rebalance. librdkafka ran the rebalance callback during that op, so
  the event happened somewhere inside it: after its invocation (the lower bound the
  checks use) and before the event's own index (the upper bound). A process with
  no op before the event follows nothing.
* held: the partitions a member holds, from its events: revoked ones leave,
  assigned ones join. An assignment of p is an event assigning p; it is "new" when
  the member did not hold p as the op it follows began (then that op's reads of p
  are the assignment's; else they may be the previous one's).
* commits of (g, p): ``commit`` ops of group g naming partition p. An ok commit
  committed its ``committed`` offsets (the next offset to consume); an info
  commit may have committed what it was asked (its invoke value), or, asked for
  the consumer's positions (no value), anything of any partition; a fail commit
  committed nothing.
* delivery to g: a read of an ok poll or of a txn (any outcome: its reads
  happened) whose op names group g.
* visible values of a partition for g: offsets known to hold a value g's members
  would be delivered. For a read_committed group (some member op names
  read_committed or no isolation): acks of plain sends, writes of ok txns, and
  reads by read_committed consumers (drains included), less offsets written by a
  failed (aborted) txn. For a read_uncommitted group (every member op says so):
  every ack, every txn write with an offset, every read.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from .common import Finding, Settings, Witness
from history.ops import COMMIT, POLL, READ_UNCOMMITTED, REBALANCE, SEND, TXN
from history.paired import PairedOp

GROUP_TYPES = ("commit-backwards", "lost-consumption", "redelivery")
# stats key: values a group may have skipped, undecidable because a member poll ended info
UNKNOWN_STAT = "unknown_consumption"


@dataclass(frozen=True)
class Rebalance:
    event: PairedOp
    after: PairedOp | None           # the op it follows (the callback ran during it)
    held_before: frozenset[int]      # what its process held as ``after`` began

    @property
    def ends(self) -> frozenset[int]:
        """Partitions whose poll chains it ends: revoked or newly assigned."""
        return frozenset(self.event.partitions or ()) | frozenset(self.event.revoked or ())

    @property
    def lo(self) -> int:
        """Op id from which it may have happened."""
        return self.after.id if self.after is not None else self.event.id

    @property
    def start_time(self) -> int:
        """Its assignments began after this time (-1: nothing before it to bound it)."""
        return self.after.invoke_time if self.after is not None else -1

    def key(self, p: int) -> int:
        """The first op id whose reads of p belong to this assignment of p."""
        return self.lo if p not in self.held_before else self.event.id


def rebalances(ops: list[PairedOp]) -> list[Rebalance]:
    """Every client rebalance event, in history order, with the op it follows."""
    last: dict[int, PairedOp] = {}
    held: dict[int, frozenset[int]] = defaultdict(frozenset)
    held_at: dict[int, frozenset[int]] = {}          # process -> held when its last op began
    out = []
    for op in sorted(ops, key=lambda o: o.invoke_index):
        if not op.client:
            continue
        if op.f == REBALANCE:
            after = last.get(op.process)
            out.append(Rebalance(op, after, held_at[op.process] if after is not None else held[op.process]))
            held[op.process] = (held[op.process] - set(op.revoked or ())) | set(op.partitions or ())
        else:
            last[op.process] = op
            held_at[op.process] = held[op.process]
    return out


def chain_cuts(rbs: list[Rebalance]) -> dict[int, frozenset[int]]:
    """Op id -> partitions whose reads in that op belong to no poll chain: a
    rebalance revoking or assigning them ran during the op, so its reads of them
    may fall on either side."""
    cuts: dict[int, frozenset[int]] = {}
    for rb in rbs:
        if rb.after is not None and rb.ends:
            cuts[rb.after.id] = cuts.get(rb.after.id, frozenset()) | rb.ends
    return cuts


def commit_offsets(type: str, committed: list[tuple[int, int]] | None, value: Any) -> dict[int, int] | None:
    """What a commit may have committed: an ok one its offsets, an info one what it
    was asked (None: the consumer's positions, anything), a fail one nothing."""
    if type == "ok":
        return dict(committed or [])
    if type == "fail":
        return {}
    if isinstance(value, dict):
        try:
            return {int(k): int(v) for k, v in value.items()}
        except (TypeError, ValueError):
            return None
    return None


def _finding(items: list[tuple[Any, Witness]], settings: Settings) -> Finding:
    items.sort(key=lambda kw: kw[0])
    return Finding(count=len(items), witnesses=[w for _, w in items[: settings.max_witnesses]])


def _ok_commits(ops: list[PairedOp]) -> dict[tuple[str, int], list[tuple[PairedOp, int]]]:
    out: dict[tuple[str, int], list[tuple[PairedOp, int]]] = defaultdict(list)
    for op in ops:
        if op.client and op.f == COMMIT and op.type == "ok" and op.group is not None:
            for p, off in op.committed or []:
                out[(op.group, p)].append((op, off))
    return out


def _info_commits(ops: list[PairedOp]) -> tuple[dict[tuple[str, int], list[tuple[int, int]]], dict[str, int]]:
    """The info commits, which may take effect at any time after their invoke:
    ({(group, partition): [(invoke time, asked offset)] by invoke time}, {group:
    the first invoke time of one that asked for unknown offsets (the positions)})."""
    asked: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    anyp: dict[str, int] = {}
    for op in ops:
        if op.client and op.f == COMMIT and op.type == "info" and op.group is not None:
            offs = commit_offsets(op.type, op.committed, op.value)
            if offs is None:
                anyp[op.group] = min(anyp.get(op.group, op.invoke_time), op.invoke_time)
            for p, off in (offs or {}).items():
                asked[(op.group, p)].append((op.invoke_time, off))
    for lst in asked.values():
        lst.sort()
    return asked, anyp


def check_commit_backwards(ops: list[PairedOp], settings: Settings) -> Finding:
    """Per group and partition, an ok commit B invoked after an ok commit A
    completed, with offset(B) < offset(A), unless an info commit of the group
    invoked before B asked for offset(B) or less, or for unknown offsets: Kafka
    orders no two commits sent on different connections, so that one may have
    landed after A, and B's member resumed from it (as redelivery allows). The
    witness A: the highest such offset, then the earliest completion, then the
    least id. Order (partition, B id)."""
    info, anyp = _info_commits(ops)
    items = []
    for (g, p), commits in _ok_commits(ops).items():
        done = sorted(commits, key=lambda c: (c[0].time, c[0].id))      # by completion
        times = [a.time for a, _ in done]
        best: list[tuple[int, int, int]] = []       # best[i]: least (-offset, time, id) of done[:i+1]
        for a, oa in done:
            best.append(min(best[-1], (-oa, a.time, a.id)) if best else (-oa, a.time, a.id))
        late = info.get((g, p), [])
        for b, ob in commits:
            i = bisect.bisect_left(times, b.invoke_time)     # done[:i] completed before b was invoked
            if not i or -best[i - 1][0] <= ob:
                continue
            if anyp.get(g, b.invoke_time) < b.invoke_time or any(
                    t < b.invoke_time and o <= ob for t, o in late):
                continue
            noa, _, aid = best[i - 1]
            items.append(((p, b.id), Witness(p, [-noa, ob], [], [aid, b.id], extra={"group": g})))
    return _finding(items, settings)


def _lost_consumption(ops: list[PairedOp]) -> tuple[list[tuple[Any, Witness]], int]:
    """(lost-consumption items, how many are undecidable): per group g and
    partition p with an ok commit, the visible values at offsets from the lowest
    delivered to g up to (not including) g's highest committed offset that no
    member of g was delivered. A group with a member poll that ended info may have
    been delivered what the history does not show: its values count as undecidable."""
    commits = _ok_commits(ops)
    delivered: dict[tuple[str, int], set[int]] = defaultdict(set)
    tainted: set[str] = set()
    rc_groups: set[str] = set()
    member_groups: set[str] = set()
    rc_obs: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)   # p -> offset -> least (op id, value)
    ru_obs: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    aborted: dict[int, set[int]] = defaultdict(set)

    def seen(obs: dict[int, dict[int, tuple[int, int]]], p: int, o: int, op: PairedOp, v: int) -> None:
        cur = obs[p].get(o)
        obs[p][o] = (op.id, v) if cur is None else min(cur, (op.id, v))

    for op in ops:
        if not op.client:
            continue
        ru = op.isolation == READ_UNCOMMITTED
        if op.group is not None and op.f in (POLL, TXN):
            member_groups.add(op.group)
            if not ru:
                rc_groups.add(op.group)
            if op.f == POLL and op.type == "info":
                tainted.add(op.group)
        reads = op.messages if op.f == POLL and op.type == "ok" else op.reads or [] if op.f == TXN else []
        for p, o, v in reads:
            seen(ru_obs, p, o, op, v)
            if not ru:
                seen(rc_obs, p, o, op, v)
            if op.group is not None:
                delivered[(op.group, p)].add(o)
        if op.f in (SEND, TXN):
            for p, o, v in op.messages:
                if o is None:
                    continue
                seen(ru_obs, p, o, op, v)
                if op.f == SEND or op.type == "ok":
                    seen(rc_obs, p, o, op, v)
                if op.f == TXN and op.type == "fail":
                    aborted[p].add(o)
    items, unknown = [], 0
    for (g, p), cs in commits.items():
        got = delivered.get((g, p))
        if not got:
            continue
        start, top = min(got), max(o for _, o in cs)
        rc = g in rc_groups or g not in member_groups
        obs = rc_obs[p] if rc else ru_obs[p]
        for o, (oid, v) in obs.items():
            if not start <= o < top or o in got or (rc and o in aborted[p]):
                continue
            if g in tainted:
                unknown += 1
                continue
            _, cid, c = min((c.time, c.id, oc) for c, oc in cs if oc > o)
            items.append(((p, g, o), Witness(p, [o, c], [v], [cid, oid],
                                             extra={"group": g, "delivered_from": start})))
    return items, unknown


def check_lost_consumption(ops: list[PairedOp], settings: Settings) -> Finding:
    """Witness: the offset and the earliest-completing ok commit past it (its
    offset), the value and the first op that shows it. Order (partition, group, offset)."""
    return _finding(_lost_consumption(ops)[0], settings)


def unknown_consumption(ops: list[PairedOp]) -> int:
    return _lost_consumption(ops)[1]


def check_redelivery(ops: list[PairedOp], rbs: list[Rebalance], settings: Settings) -> Finding:
    """Per member process and assignment of partition p to it (group g): its
    first read of p (ok non-drain polls, in op then position order) at offset o.
    Redelivery when some ok commit of (g, p) above o completed before the
    assignment began, and no commit could have brought the group's offset back
    to o or below before that read completed: no other non-fail commit of (g, p)
    asked for an offset <= o or an unknown one, invoked before the read
    completed, that is info or completed after the last-invoked such ok commit
    (C) was invoked. Witness: the read, C, the rebalance. Order (partition,
    read op id, position)."""
    commits: dict[tuple[str, int], list[tuple[PairedOp, int | None]]] = defaultdict(list)
    anyp: dict[str, list[PairedOp]] = defaultdict(list)
    for op in ops:
        if op.client and op.f == COMMIT and op.group is not None:
            offs = commit_offsets(op.type, op.committed, op.value)
            if offs is None:
                anyp[op.group].append(op)
            for p, off in (offs or {}).items():
                commits[(op.group, p)].append((op, off))
    assigns: dict[tuple[int, int], list[tuple[int, int, Rebalance]]] = defaultdict(list)
    for rb in rbs:
        if rb.event.group is None:
            continue
        for p in rb.event.partitions or ():
            assigns[(rb.event.process, p)].append((rb.key(p), rb.event.id, rb))
    for lst in assigns.values():
        lst.sort(key=lambda x: (x[0], x[1]))
    keys = {k: [key for key, _, _ in lst] for k, lst in assigns.items()}
    seen: set[tuple[int, int, int]] = set()
    items = []
    for op in sorted(ops, key=lambda o: o.invoke_index):
        if not (op.client and op.f == POLL and op.type == "ok" and not op.drain):
            continue
        for i, (p, o, v) in enumerate(op.messages):
            lst = assigns.get((op.process, p))
            if not lst:
                continue
            j = bisect.bisect_right(keys[(op.process, p)], op.id) - 1
            if j < 0 or (op.process, p, j) in seen:
                continue
            seen.add((op.process, p, j))
            rb = lst[j][2]
            g = rb.event.group
            above = [(c, oc) for c, oc in commits[(g, p)]
                     if c.type == "ok" and c.time < rb.start_time and oc is not None and oc > o]
            if not above:
                continue
            last, oc = max(above, key=lambda x: (x[0].invoke_time, x[0].id))
            lower = [d for d, od in commits[(g, p)] if od is None or od <= o] + anyp[g]
            if any(d is not last and d.invoke_time < op.time and (d.type != "ok" or d.time >= last.invoke_time)
                   for d in lower):
                continue
            items.append(((p, op.id, i), Witness(p, [o, oc], [v], [op.id, last.id, rb.event.id],
                                                 extra={"group": g, "committed": oc})))
    return _finding(items, settings)


def check_groups(ops: list[PairedOp], settings: Settings) -> dict[str, Finding]:
    return {"commit-backwards": check_commit_backwards(ops, settings),
            "lost-consumption": check_lost_consumption(ops, settings),
            "redelivery": check_redelivery(ops, rebalances(ops), settings)}
