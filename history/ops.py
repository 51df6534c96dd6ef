"""The history format: the one spec of what a run records, and its reader.

Everything that reads a history (checkers, reports, the runner's progress
line, benchmarks) reads it through this module; the harness only writes it
(``history.writer.HistoryWriter``). Standard library only, so that it sits
below every package that uses it. See docs/design.md, "The history".

File: ``history.jsonl``, one JSON object per line, appended and flushed as it
happens (a crash loses at most the line being written). The first line is a
header ``{"kchaos-history": FORMAT_VERSION, "wall_ns_at_zero": ns}``; a history without one is
format 1 (written before the header existed) and reads the same way, except
that its nemesis ops name no ``action`` (see ``fault_boundary``).

Op fields:

==========  ==================================================================
index       position in the history (0, 1, 2, ...), assigned by the writer
time        nanoseconds since the run started (harness monotonic clock)
process     int for a logical client (a crashed client's successor gets a
            new int); "nemesis" for faults; "sampler" for
            metadata samples; "offset-sampler" for a group's committed
            offsets; "proxy" for what the protocol proxy
            (nemesis/kafka_proxy.py) did to one request: an ``info`` event
            standing alone, ``f`` "proxy-<event>" (delay-request,
            delay-response, late-response, late-delivered, hold, release,
            discard, release-failed, held-answered, drop-response, close),
            ``value`` the event with ``nodes`` (the broker), ``api``,
            ``api_version``, ``correlation_id``, ``client_id``, the request's
            transaction fields and the ``rule`` that matched; the
            ``proxy-arm`` and ``proxy-heal`` nemesis ops bound the rules'
            time in effect.
type        "invoke", then exactly one completion: "ok" | "fail" | "info"
            (events, below, are a completion alone)
f           "send" | "poll" | "assign" | "subscribe" | "txn" | "commit" |
            "rebalance" | "sample" | "offsets" | the share-group ops below |
            nemesis op
value       see below
error       client error text on fail/info (optional)
node        the node the client talked to (optional)
producer    on the ops of a pipelined producer's sends (optional): the name of
            the producer instance (``"p3"``) the message was handed to, unique
            in the run. Several processes (one per in-flight message) share
            one producer; sends without it each had a producer of their own
            process. Old readers that ignore it only check order per process
isolation   on ops that read (poll, txn; optional): the consumer's
            ``isolation.level``, "read_committed" | "read_uncommitted".
            Absent: read_committed, librdkafka's default and what every
            consumer of a history without the field used
group       on the ops of a consumer-group member (subscribe, poll, commit,
            rebalance; optional): the group id
abort       on a txn the schedule chose to abort (optional): true on the
            invoke (the plan) and on the completion when the workload did
            abort it by choice
async       on a commit made with an asynchronous commit (optional): true;
            its completion is the commit callback's report
worker      on a client op's invoke (optional): the worker (0 .. concurrency-1)
            whose schedule it came from; its processes follow one another.
            kchaos replay places ops on workers by it
drain       true on the final phase's reads of each partition (optional)
watermarks  on drain poll completions (optional): the partition's
            ``{"log_start": int|null, "high": int|null, "stable": int|null,
            "max_acked": int|null}`` at drain start: log start offset, high
            watermark and last stable offset (null when they could not be
            had; ``stable`` is absent from runs stored before it was
            recorded) and the highest offset any client saw acknowledged on
            it (null: none)
end         on drain poll completions (optional): the offset the drain had read
            the partition up to, exclusive, when the op completed (null when
            nothing could be read). The partition's last drain op is ``ok``
            only if the drain reached ``watermarks.high``; otherwise it is
            ``info`` with the reason in ``error``
wait        on drain poll completions (optional): the wait before the drain,
            ``{"waited_s": float, "reached": bool, "why": str}``; reached when
            every partition had a leader, no open transaction (last stable
            offset = high watermark) and a high watermark >= 1 + max_acked
            or all replicas in ISR; ``why`` says which, or on a
            timeout which partition was not ready
==========  ==================================================================

Each process has at most one op outstanding: an invoke pairs with the next
completion of the same process; a completion with no outstanding invoke is an
event that stands alone (sampler ops, rebalances). A pipelined producer (``workloads.pipelined``)
keeps several sends outstanding, each on a process of its own, all naming
the same ``producer``; each of its sends is one message.

Values, with one topic per run and the key of a message equal to its partition:

* ``send`` invoke: ``[[partition, value, null], ...]``; ok: the same list with
  the acknowledged offset in place of null; fail: as invoked; info (a mixed
  or unknown outcome): the acknowledged messages keep their offsets, the rest
  null, and ``outcomes`` lists "ok" | "fail" | "info" per message.
  ``value`` is an int, unique per partition (a counter), so it identifies a send.
* ``poll`` invoke: null; ok: ``{"<partition>": [[offset, value], ...], ...}``.
* ``assign``: the list of partitions; ``subscribe``: the topic.
* ``txn`` (a transaction of one transactional producer, which is also a
  consumer): invoke ``[["send", partition, value], ["poll"], ...]``, up to a
  few micro-ops in order; completion the same list with what happened:
  ``["send", partition, value, offset|null]`` (the offset of the delivery
  report, which Kafka gives before the commit) and ``["poll", {"<partition>":
  [[offset, value], ...]}]``. The op's type is the transaction's outcome:
  ``ok`` committed (commit returned), ``fail`` certainly not committed
  (aborted; ``abort`` true when the workload chose to abort), ``info``
  unknown (the commit's outcome was not learned). Reads of every type
  happened; writes with an offset are acknowledged only when the op is ok.
* ``commit`` (offsets of a group member): invoke null (commit the consumer's
  positions) or ``{"<partition>": offset}``; ok: ``{"<partition>": offset}``,
  the offsets committed (Kafka's convention: the next offset to consume);
  fail / info: the offsets it tried to commit, or null when not known.
* ``rebalance`` (an event: a completion of type "ok" with no invoke, written
  by the member's process right after the completion of the op during which
  librdkafka called the rebalance callback, so its time is an upper bound):
  ``{"assigned": [partitions], "revoked": [partitions], "generation":
  int|null, "member": str|null, "protocol": "classic"|"consumer"}``
  (``protocol``, optional: the rebalance protocol the member's client runs,
  its ``group.protocol``, KIP-848's "consumer" or "classic"). ``assigned`` lists the partitions the
  member holds from then on that it did not hold before; under the
  cooperative protocol only the changes are listed, under eager ones
  ``revoked`` lists every partition it held. ``"lost": true`` (optional)
  marks librdkafka's on_lost: the revoked partitions were lost (session
  timeout, fenced) rather than given up. The revoke librdkafka runs inside
  the consumer's close is written after the process's last op.
* ``sample`` (process "sampler", type "ok" only, no invoke):
  ``{"controller": broker_id|null, "partitions": {"<p>": {"leader": id|null,
  "isr": [ids], "epoch": int|null}}}``. Broker id k runs on node "nk".
* share-group ops (a ``ShareConsumer`` of KIP-932: workloads/share.py; every op
  names its ``group``; docs/design.md, "Share groups"):

  - ``share-subscribe``: invoke the topic; ok ``{"topic": str, "lock_ms": int,
    "delivery_count_limit": int}``, the group's record lock duration and
    delivery-attempt limit as the run set them.
  - ``share-poll``: invoke null; ok ``{"<partition>": [[offset, value,
    delivery_count], ...]}``: the records the member acquired (each locked to
    it from some moment within the op, or within its previous share-poll when
    the client buffered it, until acknowledged or ``lock_ms`` later) and
    Kafka's delivery count of each (1 on the first acquisition).
  - ``share-ack``: the member marks records it was delivered. Invoke null (the
    schedule's plan: the records of the member's last share-poll); completion
    ``{"accept" | "release" | "reject": {"<partition>": [offset, ...]}}`` (kinds
    with none left out), ok when marked. Marks are sent to Kafka with the
    member's next share-poll or share-commit, or its close; in implicit
    acknowledgement mode the client marks every record accept itself.
  - ``share-acked`` (an event: a completion alone, from the acknowledgement
    commit callback, or written at close for marks no callback answered):
    the same shape; ``ok`` Kafka applied them, ``fail`` it certainly did not,
    ``info`` unknown (``error`` says why).
  - ``share-commit``: invoke null; sends the marks and waits; completion value
    ``{"<partition>": null | error text}``; the outcome of each mark is its
    ``share-acked`` event.
  - ``share-hold``: invoke the seconds to hold; ok after the member held what
    it had acquired that long without sending anything (lock expiry); fail
    when its last share-poll delivered nothing to hold.
  - ``share-end`` (an event of the share drain's process): ``{"complete": bool,
    "why": str}``; complete when the drain saw the group deliver nothing more
    for longer than a record lock, every broker up: the run's end says whether
    a share record never accepted is lost.

* ``offsets`` (process "offset-sampler"; the group's committed offsets, read
  by Kafka's OffsetFetch: ``harness/samplers.py``): invoke ``{"group":
  g}`` when the request is sent, then one completion: ``ok`` with
  ``{"<partition>": offset|null}`` (Kafka's committed offset, the next offset
  to consume; null: the group has none for the partition; a partition the
  answer gave an error for is left out), or ``info`` with the error (no
  answer: nothing read). Both carry ``group``; the read happened somewhere
  between the invoke and the completion. The last one of a run, after the
  final drain, has ``"final": true``.
* nemesis ops (process "nemesis"): an invoke with the planned value, then an
  "info" completion whose value names what was done: ``action`` ("start" |
  "stop" | "heal", or absent for bookkeeping such as waits), ``fault`` (the
  fault kind: "partition", "kill", "pause", "clock", ...; a heal without it
  heals every kind), ``nodes`` (the node names affected) and whatever else
  describes the fault.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Iterator

log = logging.getLogger(__name__)

Op = dict[str, Any]

FORMAT_VERSION = 2
HEADER_KEY = "kchaos-history"

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
COMPLETIONS = (OK, FAIL, INFO)
NEMESIS, SAMPLER, OFFSET_SAMPLER = "nemesis", "sampler", "offset-sampler"
PROXY = "proxy"                # the process of the protocol proxy's events (above)
SEND, POLL, ASSIGN, SUBSCRIBE, SAMPLE = "send", "poll", "assign", "subscribe", "sample"
TXN, COMMIT, REBALANCE = "txn", "commit", "rebalance"
SHARE_SUBSCRIBE, SHARE_POLL, SHARE_ACK, SHARE_ACKED = "share-subscribe", "share-poll", "share-ack", "share-acked"
SHARE_COMMIT, SHARE_HOLD, SHARE_END = "share-commit", "share-hold", "share-end"
SHARE_OPS = (SHARE_SUBSCRIBE, SHARE_POLL, SHARE_ACK, SHARE_ACKED, SHARE_COMMIT, SHARE_HOLD, SHARE_END)
ACCEPT, RELEASE, REJECT = "accept", "release", "reject"       # a share-ack's kinds of mark
ACK_KINDS = (ACCEPT, RELEASE, REJECT)
TXN, COMMIT, REBALANCE, OFFSETS = "txn", "commit", "rebalance", "offsets"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)

# a nemesis completion's value["action"]: what the op did to its fault (not an op's f)
ACTION_START, ACTION_STOP, ACTION_HEAL = "start", "stop", "heal"
ACTIONS = (ACTION_START, ACTION_STOP, ACTION_HEAL)

Message = tuple[int, int | None, int]                   # (partition, offset, value)
PartitionSample = tuple[int, int | None, list[int], int | None]  # (partition, leader, isr, epoch)


class HistoryFormatError(Exception):
    """A history line that cannot be read (not the truncated last line)."""

    exit_code = 3


def header(wall_ns_at_zero: int | None = None) -> dict[str, Any]:
    """The first line of every history this version writes. ``wall_ns_at_zero``
    is the wall clock (ns since the epoch) at history time 0: it places records
    Kafka timestamps with its own clock (the controller's metadata log) on the
    history's time axis."""
    out: dict[str, Any] = {HEADER_KEY: FORMAT_VERSION}
    if wall_ns_at_zero is not None:
        out["wall_ns_at_zero"] = int(wall_ns_at_zero)
    return out


def history_header(path: Path) -> dict[str, Any]:
    """The header of a history file ({} for a format-1 history without one)."""
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return {}
    return dict(obj) if _is_header(obj) else {}


def _is_header(obj: Any) -> bool:
    return isinstance(obj, dict) and HEADER_KEY in obj


def history_format(path: Path) -> int:
    """The format version of a history file: its header's, or 1 without one."""
    return int(history_header(path).get(HEADER_KEY, 1))


def read_history(path: Path) -> Iterator[Op]:
    """Yield the ops of a JSONL history (not its header).

    A truncated last line (a crash mid-write) is skipped with a warning; a
    corrupt line anywhere else raises HistoryFormatError naming the line, and
    so does a header of a newer format than this reader knows.
    """
    path = Path(path)
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        pending: tuple[int, str] | None = None
        for lineno, line in enumerate(fh, start=1):
            if pending is not None:
                raise HistoryFormatError(f"{path}:{pending[0]}: corrupt history line: {pending[1][:80]!r}")
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except json.JSONDecodeError:
                pending = (lineno, line)
                continue
            if _is_header(op):
                version = op[HEADER_KEY]
                if not isinstance(version, int) or version > FORMAT_VERSION:
                    raise HistoryFormatError(f"{path}:{lineno}: history format {version!r} is newer than "
                                             f"this kchaos reads ({FORMAT_VERSION})")
                continue
            if not isinstance(op, dict) or "type" not in op or "f" not in op:
                raise HistoryFormatError(f"{path}:{lineno}: not a history op: {line[:80]!r}")
            yield op
        if pending is not None:
            if pending[1].endswith("\n"):
                raise HistoryFormatError(f"{path}:{pending[0]}: corrupt history line: {pending[1][:80]!r}")
            log.warning("%s:%d: ignoring truncated last line (the run was interrupted mid-write)",
                        path, pending[0])


# -- ops by process and time -----------------------------------------------------
def is_client_op(op: Op) -> bool:
    """An op of a logical client (an int process: not the nemesis, the sampler or the proxy)."""
    process = op.get("process")
    return isinstance(process, int) and not isinstance(process, bool)


def workload_start_ns(ops: Iterable[Op]) -> int:
    """The history time the workload started at: its first client op (the
    history clock starts before the cluster is up); 0 when there is none."""
    times = [op["time"] for op in ops if is_client_op(op) and isinstance(op.get("time"), (int, float))]
    return int(min(times)) if times else 0
