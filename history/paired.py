"""Paired operations: the one shape both checker engines reason about.

The history has an invoke line and a completion line per op. Each process has
at most one op outstanding, so pairing is by process. A paired op keeps both
indexes and both times (the checkers need "A completed before B was invoked")
and flattens the value into typed columns: ``messages`` (sends: what was sent
and, when ok, at which offset; polls: what was read; txns: what they wrote),
``reads`` (txns: what their polls read), ``partitions`` (the partitions a send
or txn wrote to, a poll reported, an assign named or a rebalance assigned),
``revoked``/``generation`` (rebalances), ``committed`` (commits), ``sample``
(the sampler's leader/ISR view) and ``fault`` (a nemesis fault id). The raw completion value
is kept as JSON for witnesses.

The Parquet file has exactly these columns (``PARQUET_SCHEMA``), one row per
paired op; Spark reads it, the reference engine reads either the history or
the same rows.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import pyarrow as pa

from history.ops import (ASSIGN, COMMIT, COMPLETIONS, INVOKE, POLL, REBALANCE, SAMPLE, SEND, SUBSCRIBE, TXN,
                         HistoryFormatError, Message, Op, PartitionSample)
from history.op_values import (offsets_map, poll_reads, rebalance_view, require_int, sample_view, send_messages,
                               txn_micro_ops)

log = logging.getLogger(__name__)

CLIENT = "client"

MESSAGE_TYPE = pa.struct([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.int64())])
COMMITTED_TYPE = pa.struct([("partition", pa.int32()), ("offset", pa.int64())])
SAMPLE_TYPE = pa.struct([("partition", pa.int32()), ("leader", pa.int32()),
                         ("isr", pa.list_(pa.int32())), ("epoch", pa.int64())])

PARQUET_SCHEMA = pa.schema([
    ("invoke_index", pa.int64()),   # op id: index of the invoke (of the op itself if it has none)
    ("index", pa.int64()),          # index of the completion; null if it never completed
    ("invoke_time", pa.int64()),
    ("time", pa.int64()),           # completion time (ns); null if it never completed
    ("process", pa.int64()),        # client process; null for nemesis/sampler
    ("role", pa.string()),          # "client", "nemesis", "sampler", or the raw process string
    ("type", pa.string()),          # ok | fail | info (never-completed ops are info)
    ("f", pa.string()),
    ("drain", pa.bool_()),
    ("error", pa.string()),
    ("node", pa.string()),
    ("producer", pa.string()),      # a pipelined producer's name (sends keep order per producer)
    ("isolation", pa.string()),     # reads: the consumer's isolation.level (null: read_committed)
    ("group", pa.string()),         # a consumer-group member's group id
    ("messages", pa.list_(MESSAGE_TYPE)),   # send: what was sent; poll: what was read; txn: its writes
    ("partitions", pa.list_(pa.int32())),   # send: partitions written; poll: reported; assign: named
    ("partition_starts", pa.list_(pa.int32())),  # where each partition's run of messages starts, when
                                                 # the messages are grouped by partition (else null)
    ("reads", pa.list_(MESSAGE_TYPE)),      # txn: what its polls read, in order
    ("committed", pa.list_(COMMITTED_TYPE)),  # commit: the offsets committed (next offset to consume)
    ("revoked", pa.list_(pa.int32())),      # rebalance: partitions revoked (``partitions``: assigned)
    ("generation", pa.int64()),             # rebalance: the group generation, when known
    ("sample", pa.list_(SAMPLE_TYPE)),
    ("controller", pa.int32()),
    ("fault", pa.string()),
    ("value", pa.string()),         # completion value as JSON (invoke value if none)
])

Sample = PartitionSample


@dataclass
class PairedOp:
    invoke_index: int
    index: int | None
    invoke_time: int
    time: int | None
    process: int | None
    role: str
    type: str
    f: str
    drain: bool = False
    error: str | None = None
    node: str | None = None
    producer: str | None = None
    isolation: str | None = None
    group: str | None = None
    messages: list[Message] = field(default_factory=list)
    partitions: list[int] | None = None
    partition_starts: list[int] | None = None
    reads: list[Message] | None = None
    committed: list[tuple[int, int]] | None = None
    revoked: list[int] | None = None
    generation: int | None = None
    sample: list[Sample] | None = None
    controller: int | None = None
    fault: str | None = None
    value: Any = None

    @property
    def id(self) -> int:
        return self.invoke_index

    @property
    def client(self) -> bool:
        return self.role == CLIENT

    def to_row(self) -> dict[str, Any]:
        return {
            "invoke_index": self.invoke_index, "index": self.index,
            "invoke_time": self.invoke_time, "time": self.time,
            "process": self.process, "role": self.role, "type": self.type, "f": self.f,
            "drain": self.drain, "error": self.error, "node": self.node, "producer": self.producer,
            "isolation": self.isolation, "group": self.group,
            "messages": [{"partition": p, "offset": o, "value": v} for p, o, v in self.messages],
            "partitions": self.partitions, "partition_starts": self.partition_starts,
            "reads": None if self.reads is None else [
                {"partition": p, "offset": o, "value": v} for p, o, v in self.reads],
            "committed": None if self.committed is None else [
                {"partition": p, "offset": o} for p, o in self.committed],
            "revoked": self.revoked, "generation": self.generation,
            "sample": None if self.sample is None else [
                {"partition": p, "leader": ld, "isr": isr, "epoch": e} for p, ld, isr, e in self.sample],
            "controller": self.controller, "fault": self.fault,
            "value": json.dumps(self.value, separators=(",", ":")),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "PairedOp":
        return cls(
            invoke_index=row["invoke_index"], index=row["index"],
            invoke_time=row["invoke_time"], time=row["time"],
            process=row["process"], role=row["role"], type=row["type"], f=row["f"],
            drain=bool(row["drain"]), error=row["error"], node=row["node"], producer=row.get("producer"),
            isolation=row.get("isolation"), group=row.get("group"),
            messages=[(m["partition"], m["offset"], m["value"]) for m in row["messages"] or []],
            partitions=row["partitions"], partition_starts=row.get("partition_starts"),
            reads=None if row.get("reads") is None else [
                (m["partition"], m["offset"], m["value"]) for m in row["reads"]],
            committed=None if row.get("committed") is None else [
                (c["partition"], c["offset"]) for c in row["committed"]],
            revoked=row.get("revoked"), generation=row.get("generation"),
            sample=None if row["sample"] is None else [
                (s["partition"], s["leader"], list(s["isr"] or []), s["epoch"]) for s in row["sample"]],
            controller=row["controller"], fault=row["fault"],
            value=None if row["value"] is None else json.loads(row["value"]),
        )


def witness_op(row: dict[str, Any]) -> dict[str, Any]:
    """A history-like op for a witness, from a Parquet row or ``to_row()``."""
    op = {
        "index": row["index"], "time": row["time"],
        "invoke_index": row["invoke_index"], "invoke_time": row["invoke_time"],
        "process": row["process"] if row["role"] == CLIENT else row["role"],
        "type": row["type"], "f": row["f"],
        "value": None if row["value"] is None else json.loads(row["value"]),
        "error": row["error"], "node": row["node"],
    }
    for key in ("producer", "isolation", "group"):
        if row.get(key) is not None:
            op[key] = row[key]
    if row["drain"]:
        op["drain"] = True
    return op


def _starts(msgs: list[Message], parts: list[int]) -> list[int] | None:
    """Start index of each partition's messages, if each partition's messages
    are one contiguous run in ``parts`` order (polls always; sends usually)."""
    starts, i = [], 0
    for p in parts:
        starts.append(i)
        while i < len(msgs) and msgs[i][0] == p:
            i += 1
    return starts if i == len(msgs) else None


def _build(inv: Op | None, comp: Op | None) -> PairedOp:
    first = inv if inv is not None else comp
    assert first is not None
    where = f"op index {first.get('index')}"
    proc = first.get("process")
    is_client = isinstance(proc, int) and not isinstance(proc, bool)
    if comp is None:
        typ, value, error = "info", first.get("value"), "incomplete: no completion in the history"
    else:
        typ, value, error = comp["type"], comp.get("value"), comp.get("error")
        if value is None and inv is not None and comp["f"] in (SEND, ASSIGN, SUBSCRIBE, TXN, COMMIT):
            value = inv.get("value")
    op = PairedOp(
        invoke_index=require_int(first.get("index"), "index", where),
        index=None if comp is None else require_int(comp.get("index"), "index", where),
        invoke_time=require_int(first.get("time"), "time", where),
        time=None if comp is None else require_int(comp.get("time"), "time", where),
        process=proc if is_client else None,
        role=CLIENT if is_client else str(proc),
        type=typ, f=str(first["f"]),
        drain=bool((inv or {}).get("drain") or (comp or {}).get("drain")),
        error=error, node=(comp or {}).get("node") or (inv or {}).get("node"),
        producer=(comp or {}).get("producer") or (inv or {}).get("producer"),
        isolation=(comp or {}).get("isolation") or (inv or {}).get("isolation"),
        group=(comp or {}).get("group") or (inv or {}).get("group"),
        value=value,
    )
    if op.f == SEND and is_client:
        op.messages = send_messages(value, where)
        op.partitions = list(dict.fromkeys(p for p, _, _ in op.messages))
        op.partition_starts = _starts(op.messages, op.partitions)
    elif op.f == POLL and is_client and typ == "ok":
        op.messages, op.partitions = poll_reads(value, where)
        op.partition_starts = _starts(op.messages, op.partitions)
    elif op.f == TXN and is_client:
        op.messages, op.reads = txn_micro_ops(value, where)
        op.partitions = list(dict.fromkeys(p for p, _, _ in op.messages))
    elif op.f == COMMIT and is_client and typ == "ok":
        op.committed = offsets_map(value, where)
    elif op.f == REBALANCE and is_client:
        op.partitions, op.revoked, op.generation = rebalance_view(value, where)
    elif op.f == ASSIGN and isinstance(value, list):
        op.partitions = [require_int(p, "partition", where) for p in value]
    elif op.f == SAMPLE and typ == "ok":
        op.sample, op.controller = sample_view(value, where)
    if isinstance(value, dict) and value.get("fault") is not None:
        op.fault = str(value["fault"])
    return op


class Pairer:
    """Pairs invokes with completions by process as ops arrive, so a writer can
    pair while it records and a reader after the fact, with one definition.

    ``add`` returns the paired ops an op completes (in completion order),
    ``finish`` the invokes left outstanding, as ``info`` ops, by index.
    """

    def __init__(self) -> None:
        self.pending: dict[Any, Op] = {}

    def add(self, op: Op) -> list[PairedOp]:
        typ, proc = op.get("type"), op.get("process")
        key = proc if not isinstance(proc, list | dict) else json.dumps(proc)
        if typ == INVOKE:
            out = []
            if key in self.pending:
                log.warning("op index %s: process %r invoked again with an op outstanding",
                            op.get("index"), proc)
                out.append(_build(self.pending.pop(key), None))
            self.pending[key] = op
            return out
        if typ in COMPLETIONS:
            inv = self.pending.pop(key, None)
            if inv is not None and inv.get("f") != op.get("f"):
                log.warning("op index %s: completion f %r does not match invoke f %r",
                            op.get("index"), op.get("f"), inv.get("f"))
            return [_build(inv, op)]
        raise HistoryFormatError(f"op index {op.get('index')}: unknown type {typ!r}")

    def finish(self) -> list[PairedOp]:
        out = [_build(inv, None) for inv in sorted(self.pending.values(), key=lambda o: o.get("index", 0))]
        self.pending.clear()
        return out


def pair_ops(ops: Iterable[Op]) -> Iterator[PairedOp]:
    """Pair invokes with completions by process, yielding in completion order.

    A completion with no outstanding invoke (sampler ops) stands alone; an
    invoke left outstanding at the end (or superseded by another invoke of the
    same process) becomes an ``info`` op: it may or may not have happened.
    """
    pairer = Pairer()
    for op in ops:
        yield from pairer.add(op)
    yield from pairer.finish()
