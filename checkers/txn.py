"""Transaction checks: their definitions (the reference engine runs them as
written) and the dependency-cycle search both engines share.

Terms (docs/design.md, "What the checkers decide", transactions):

* a txn's writes are the ``send`` micro-ops of a ``txn`` op (the paired op's
  ``messages``), its reads what its ``poll`` micro-ops returned (``reads``),
  each in micro-op order. A txn is committed when ``ok``, aborted when
  ``fail``, unknown when ``info``; its reads happened whatever its type.
* a committed txn's writes are acknowledged (acks, at the txn's completion),
  like an ok send's messages; an aborted or info txn's are not.
* a read is read_committed when its op's ``isolation`` is null or
  "read_committed" (``read_committed``).
* a partition's versions are its known (offset, value) pairs, by offset.

Cycles: nodes are committed txns; edges are ww (consecutive versions of a
partition, among the values committed txns wrote, by different txns), wr (a
committed txn's read_committed read of a value another committed txn wrote),
process (a txn to the next committed txn of its process) and realtime (a txn
completed before the other was invoked, transitively reduced). ``CYCLE_TYPES``
says which edges each cycle type may use; see ``cycle_findings``.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable


from .common import SKIPPED_LIMIT, Finding, Settings, Witness
from history.ops import READ_UNCOMMITTED, REBALANCE, SEND, TXN
from history.paired import PairedOp

if TYPE_CHECKING:
    from .run_index import RunIndex

Result = dict[str, Finding]
# (from txn id, to txn id, kind, partition | None, offset | None)
Edge = tuple[int, int, str, int | None, int | None]

WW, WR, PROCESS, REALTIME = "ww", "wr", "process", "realtime"
# type -> (edge kinds it may use, the kind a cycle must contain, if any)
CYCLE_TYPES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "G0": ((WW,), None),
    "G0-process": ((WW, PROCESS), PROCESS),
    "G0-realtime": ((WW, PROCESS, REALTIME), REALTIME),
    "G1c": ((WR,), None),
    "G1c-process": ((WR, PROCESS), PROCESS),
    "G1c-realtime": ((WR, PROCESS, REALTIME), REALTIME),
}
READ_TYPES = ("aborted-read", "precommitted-read")
INTERNAL_TYPES = ("int-poll-skip", "int-nonmonotonic-poll", "int-nonmonotonic-send", "int-send-skip")
TXN_TYPES = READ_TYPES + ("torn-transaction", "lost-txn-write") + INTERNAL_TYPES + tuple(CYCLE_TYPES)

# Allowed by default: checkers.common.DEFAULT_ALLOWED (int-send-skip and the G0 types).


def read_committed(isolation: str | None) -> bool:
    """Whether a read of this isolation may only see committed values (null: the default, read_committed)."""
    return isolation != READ_UNCOMMITTED


def acknowledged(op: PairedOp, offset: int | None) -> bool:
    """Whether a message of a client send or txn is an acknowledged write: every
    message of an ok send, the ones with an offset of a mixed info send, every
    write of a committed (ok) txn."""
    if op.f == SEND:
        return op.type == "ok" or offset is not None
    return op.f == TXN and op.type == "ok"


def _finding(items: list[tuple[Any, Witness]], settings: Settings) -> Finding:
    items.sort(key=lambda kw: kw[0])
    return Finding(count=len(items), witnesses=[w for _, w in items[: settings.max_witnesses]])


def check_txn_reads(run: "RunIndex", settings: Settings) -> Result:
    """Per txn write, the read_committed reads of its value (polls and txn reads):

    * aborted-read (G1a): the txn is ``fail`` and some such read saw the value;
    * precommitted-read: the txn is ``ok`` or ``info`` and some such read saw
      the value before the txn could have committed: the read is the txn's own
      (Kafka hides a transaction's writes from every read_committed consumer
      until it commits, its own included), or the reading op completed before
      the txn was invoked.

    Like phantom-write, one per written message: the witness names the txn, the
    first such reader and the lowest offset read. Order (partition, value, txn id, position).
    """
    rc_reads: dict[tuple[int, int], list] = defaultdict(list)
    for m in run.reads:
        if read_committed(m.op.isolation):
            rc_reads[(m.partition, m.value)].append(m)
    aborted, pre = [], []
    for op in run.txns:
        for i, (p, _, v) in enumerate(op.messages):
            hits = rc_reads.get((p, v), [])
            if op.type != "fail":
                hits = [m for m in hits if m.op.id == op.id
                        or (m.op.time is not None and m.op.time < op.invoke_time)]
            if hits:
                w = Witness(p, [min(m.offset for m in hits)], [v], [op.id, min(m.op.id for m in hits)])
                (aborted if op.type == "fail" else pre).append(((p, v, op.id, i), w))
    return {"aborted-read": _finding(aborted, settings), "precommitted-read": _finding(pre, settings)}


def check_torn(run: "RunIndex", settings: Settings) -> Result:
    """torn-transaction: a committed txn some of whose writes are in the final
    drain of their (completed) partitions while others are not; or an info txn
    the same way, when the drain completed for every partition it wrote (all or
    nothing must hold for it too). ``present``/``absent`` list [partition,
    offset, value] in micro-op order. Order (txn id)."""
    items = []
    for op in run.txns:
        if op.type not in ("ok", "info") or not op.messages:
            continue
        judged = [m for m in op.messages if run.drain_complete(m[0])]
        if op.type == "info" and len(judged) < len(op.messages):
            continue
        present = [list(m) for m in judged if (m[0], m[2]) in run.drained]
        absent = [list(m) for m in judged if (m[0], m[2]) not in run.drained]
        if present and absent:
            items.append(((op.id,), Witness(absent[0][0], [o for _, o, _ in absent if o is not None],
                                            [v for _, _, v in absent], [op.id],
                                            extra={"present": present, "absent": absent})))
    return {"torn-transaction": _finding(items, settings)}


def rebalanced(ops: Iterable[PairedOp]) -> dict[int, set[int]]:
    """Op id -> partitions a rebalance event named (assigned or revoked) right
    after it: the process's last op before the event (by invoke index), during
    which librdkafka ran the rebalance callback."""
    last: dict[Any, int] = {}
    out: dict[int, set[int]] = defaultdict(set)
    for op in ops:
        if not op.client:
            continue
        if op.f == REBALANCE:
            if op.process in last:
                out[last[op.process]] |= set(op.partitions or ()) | set(op.revoked or ())
        else:
            last[op.process] = op.id
    return out


def check_internal(run: "RunIndex", settings: Settings) -> Result:
    """Within one txn, per partition, successive reads (all its polls, in
    micro-op order) and successive writes with offsets:

    * int-nonmonotonic-poll / int-nonmonotonic-send: the offset did not increase;
    * int-poll-skip / int-send-skip: known offsets lie strictly between the two
      (for a read_committed txn's reads, offsets known only from values of
      aborted or info txns do not count: such a consumer skips them).

    Reads of a partition a rebalance named right after the txn are not judged
    (its position may have moved). Order (partition, txn id, position of the second).
    """
    excluded = rebalanced(run.ops)
    out: dict[str, list] = {t: [] for t in INTERNAL_TYPES}
    for op in run.txns:
        for seq, back, skip, rc in ((op.reads or [], "int-nonmonotonic-poll", "int-poll-skip",
                                     read_committed(op.isolation)),
                                    (op.messages, "int-nonmonotonic-send", "int-send-skip", False)):
            last: dict[int, tuple[int | None, int]] = {}
            for i, (p, o, v) in enumerate(seq):
                prev = last.get(p)
                last[p] = (o, v)
                if prev is None or prev[0] is None or o is None:
                    continue
                if seq is not op.messages and p in excluded.get(op.id, ()):
                    continue
                w = Witness(p, [prev[0], o], [prev[1], v], [op.id])
                if o <= prev[0]:
                    out[back].append(((p, op.id, i), w))
                    continue
                gap, skipped = run.between(p, prev[0], o, rc)
                if gap > 0:
                    w.extra = {"skipped": skipped, "skipped_count": gap}
                    out[skip].append(((p, op.id, i), w))
    return {t: _finding(items, settings) for t, items in out.items()}


# -- dependency cycles ---------------------------------------------------------------
def txn_writers(txns: Iterable[PairedOp]) -> dict[tuple[int, int], int]:
    """(partition, value) -> the committed txn that wrote it (the lowest id, if several)."""
    writer: dict[tuple[int, int], int] = {}
    for op in sorted(txns, key=lambda o: o.id):
        if op.type == "ok":
            for p, _, v in op.messages:
                writer.setdefault((p, v), op.id)
    return writer


def data_edges(run: "RunIndex") -> list[Edge]:
    """ww and wr edges (module docstring)."""
    writer = txn_writers(run.txns)
    edges: list[Edge] = []
    versions = sorted(k for k in run.pov if (k[0], k[2]) in writer)
    for (p1, _, v1), (p2, o2, v2) in zip(versions, versions[1:]):
        a, b = writer[(p1, v1)], writer[(p2, v2)]
        if p1 == p2 and a != b:
            edges.append((a, b, WW, p2, o2))
    for m in run.reads:
        if m.op.f == TXN and m.op.type == "ok" and read_committed(m.op.isolation):
            a = writer.get((m.partition, m.value))
            if a is not None and a != m.op.id:
                edges.append((a, m.op.id, WR, m.partition, m.offset))
    return edges


Node = tuple[int, Any, int, int]     # committed txn: (id, process, invoke time, completion time)


def order_edges(nodes: Iterable[Node]) -> list[Edge]:
    """process: each committed txn to the next one of its process; realtime: A
    to B when A completed strictly before B was invoked, transitively reduced
    (B's predecessors are the txns completed before its invocation that no
    other such txn followed)."""
    nodes = sorted(nodes)
    edges: list[Edge] = []
    last: dict[Any, int] = {}
    for i, proc, _, _ in nodes:
        if proc in last:
            edges.append((last[proc], i, PROCESS, None, None))
        last[proc] = i
    events = sorted([(t0, 0, i) for i, _, t0, _ in nodes] + [(t1, 1, i) for i, _, _, t1 in nodes])
    frontier: set[int] = set()
    preds: dict[int, frozenset[int]] = {}
    for _, kind, i in events:          # at equal times invocations first: "before" is strict
        if kind == 0:
            preds[i] = frozenset(frontier)
        else:
            frontier -= preds.get(i, frozenset())
            frontier.add(i)
    edges += [(a, b, REALTIME, None, None) for b, ps in preds.items() for a in sorted(ps)]
    return edges


def cycle_findings(edges: Iterable[Edge], nodes: Iterable[Node], settings: Settings) -> Result:
    """G0, G1c and their -process and -realtime variants over ``edges`` (ww,
    wr) and the order edges of ``nodes``.

    Per type, the graph of the edge kinds it may use (``CYCLE_TYPES``); each of
    its strongly connected components (networkx) with a cycle of that type
    counts once: for a type that needs an edge kind, a component holding such an
    edge, its witness the shortest cycle through the first such edge (by ids);
    else any component of two or more txns, its witness the shortest cycle
    through its lowest id. The witness's ``cycle`` lists the edges, each
    explained by its lowest (partition, offset). Order (lowest id in the component).
    """
    best: dict[tuple[int, int], dict[str, tuple[int, int]]] = defaultdict(dict)
    for a, b, kind, p, o in list(edges) + order_edges(nodes):
        key = (-1 if p is None else p, -1 if o is None else o)
        cur = best[(a, b)].get(kind)
        if cur is None or key < cur:
            best[(a, b)][kind] = key
    import networkx as nx      # here: the per-partition workers import this module, and need no graphs
    pairs = sorted(best)
    out = {}
    for typ, (kinds, need) in CYCLE_TYPES.items():
        g = nx.DiGraph()
        g.add_edges_from(pair for pair in pairs if any(k in best[pair] for k in kinds))
        items = []
        for comp in nx.strongly_connected_components(g):
            if len(comp) < 2:
                continue
            sub = g.subgraph(comp)
            if need is not None:
                req = sorted(pair for pair in sub.edges if need in best[pair])
                if not req:
                    continue
                a, b = req[0]
                cycle = [a] + nx.shortest_path(sub, b, a)
            else:
                s = min(comp)
                paths = nx.single_source_shortest_path(sub, s)
                _, q = min((len(paths[q]), q) for q in sub.predecessors(s))
                cycle = paths[q] + [s]
            items.append(((min(comp),), _cycle_witness(cycle, best, kinds, need)))
        out[typ] = _finding(items, settings)
    return out


def _cycle_witness(cycle: list[int], best: dict[tuple[int, int], dict[str, tuple[int, int]]],
                   kinds: tuple[str, ...], need: str | None) -> Witness:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        have = best[(a, b)]
        kind = need if need in have else next(k for k in kinds if k in have)
        p, o = have[kind]
        steps.append({"from": a, "to": b, "kind": kind, "partition": None if p < 0 else p,
                      "offset": None if o < 0 else o})
    data = [s for s in steps if s["partition"] is not None]
    return Witness(data[0]["partition"] if data else None, [s["offset"] for s in data], [], cycle[:-1],
                   extra={"cycle": steps})


def committed_nodes(txns: Iterable[PairedOp]) -> list[Node]:
    return [(o.id, o.process, o.invoke_time, o.time) for o in txns if o.type == "ok" and o.time is not None]


def check_cycles(run: "RunIndex", settings: Settings) -> Result:
    """Settled-committed info txns join the ww and wr edges (they committed), but
    not the process and realtime ones: their commit may have completed after
    the client gave up, so only txns the client saw commit are ordered by time."""
    return cycle_findings(data_edges(run), committed_nodes(o for o in run.txns if o.id not in run.settled), settings)


def between(known: list[int], lo: int, hi: int) -> tuple[int, list[int]]:
    """How many of the sorted ``known`` offsets lie strictly between lo and hi, and the first few."""
    a, b = bisect.bisect_right(known, lo), bisect.bisect_left(known, hi)
    return max(0, b - a), known[a: a + min(max(0, b - a), SKIPPED_LIMIT)]


CHECKS = {"txn-reads": check_txn_reads, "torn": check_torn, "txn-internal": check_internal,
          "cycles": check_cycles}
TYPES_OF = {"txn-reads": READ_TYPES, "torn": ("torn-transaction",), "txn-internal": INTERNAL_TYPES,
            "cycles": tuple(CYCLE_TYPES)}
