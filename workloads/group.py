"""The consumer-group workload client: subscribe mode with explicit commits.

One logical process is one group member: a consumer that subscribes to the
run's topic in group ``ClientContext.group_id`` (``[workload] group_id``, or
``[consumer] "group.id"``), plus a producer for its sends (``send`` and
``poll`` are ``workloads.queue``'s). Auto-commit is off; the member commits
only in ``commit`` ops. Ops and value shapes are the history contract's
(``history.ops``: ``commit``, ``rebalance``); every op of the member but
its sends carries ``group`` and ``isolation`` (``op_fields``).

``enable.auto.offset.store`` is off too: after a poll the client stores, per
partition, the offset after the last message it *recorded*, so a commit
(which commits the stored offsets) never covers a message the history does
not show the member reading.

``subscribe``  joins the group with rebalance callbacks. librdkafka calls
    them inside a poll (or a commit's wait, or ``close``); they only record,
    and the binding applies the change itself (incrementally under
    cooperative-sticky: a member that revoked one partition kept the others). Each call becomes a ``rebalance`` event: ``assigned``
    (on_assign's partitions; the cooperative protocol passes only the
    added ones), ``revoked`` (on_revoke's; the eager protocol revokes every
    partition before each assignment), ``lost: true`` on on_lost's (the
    assignment was lost: session timeout or fenced; librdkafka could not
    commit for it). ``generation`` is the group generation librdkafka holds
    when the callback runs, read from ``consumer_group_metadata()`` (librdkafka's
    serialised form, ``"CGMDv2:"`` then the int32 generation in host byte
    order, written by ``rd_kafka_consumer_group_metadata_write``; null when
    the form is not that one or the member has none, -1); ``member`` is
    ``memberid()``. The events of an op go back to the runner in the
    completion's ``events`` list; the runner writes each right after the
    completion (``harness/worker_loops.py``), and those of ``close`` right
    after closing.

``commit``  commits the stored offsets of the current assignment.

    * sync (``commit(asynchronous=False)``): blocks until the coordinator
      answered (librdkafka has no deadline for it but its request timeouts).
    * async (``async: true`` on the op): ``commit(asynchronous=True)``, then
      the op waits for the commit callback (``on_commit``) until
      ``op_timeout_s``. Callbacks are served only by ``poll``, which also
      returns messages: those are held, not recorded, and the next poll op
      hands them to the history before it asks librdkafka for more (a
      rebalance that takes their partition away drops them). The assignment
      is not paused for the wait: a pause, a seek back and a resume once left
      a member reading its partition again from offset 0 with no rebalance
      (a fault-free run, seed 515, librdkafka 2.16.0), and a harness must not
      make Kafka look as if it lost a consumer's position.

    The outcome: ``ok`` with ``{"<partition>": offset}`` (the partitions
    librdkafka committed without error; partitions with no stored offset
    are not committed and not listed) when no error came back; ``fail`` when
    the commit was certainly not stored (``CERTAIN_NOT_COMMITTED``, or nothing
    to commit); ``info`` otherwise, including no callback by the deadline.
    ``fail`` and ``info`` list the offsets it tried, when known (null when the
    sync call raised without them).

The rebalance protocol (KIP-848): ``[consumer] "group.protocol"``, the
key both clients (librdkafka and the Java client) read: "classic" (the
default: JoinGroup/SyncGroup, the members assign) or "consumer" (the broker
assigns, by heartbeats; Kafka 4.0 and later). The consumer protocol moves
the classic session, heartbeat and assignor settings to the broker; the
client settings it refuses (``CLASSIC_ONLY_SETTINGS``, librdkafka 2.16's
list) are refused before any cluster starts. ``[workload] group_protocols``
runs a migration instead: each worker's first process takes the first
protocol, and each successor (after a crash, or an info op that retired its
predecessor) the next one in turn, so members move between the protocols
one at a time while faults run (Kafka converts the group between classic
and consumer as they do: KIP-848's online migration). ``ProtocolMember``
wraps each member's client (either library's) with its protocol and stamps
``protocol`` on its rebalance events.

Why those errors are certain: Kafka's group coordinator checks the member,
generation and group state (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH), authorization
and metadata size before it appends the offsets to ``__consumer_offsets``,
and librdkafka marks those errors permanent (no retry:
``rd_kafka_handle_OffsetCommit_error``). _NO_OFFSET means no request was
sent. The one case this cannot see: librdkafka retries an OffsetCommit to
the same broker after a transport error or a local timeout, so a rejected
retry may follow an earlier attempt that was delayed (a paused coordinator)
and stored later. Coordinator errors (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE: Kafka maps a failed or timed-out append to them),
timeouts and transport errors are ``info``.
"""
from __future__ import annotations

import dataclasses
import logging
import struct
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Mapping, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from history.ops import COMMIT, POLL, READ_COMMITTED, REBALANCE, SUBSCRIBE
from workloads.classify import error_name
from workloads.client import FAIL, INFO, OK, Client, ClientContext, Op, completion
from workloads.queue import QueueClient

log = logging.getLogger(__name__)

CERTAIN_NOT_COMMITTED: frozenset[int] = frozenset({
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError.STALE_MEMBER_EPOCH,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.OFFSET_METADATA_TOO_LARGE,
    KafkaError.INVALID_COMMIT_OFFSET_SIZE,
    KafkaError._NO_OFFSET,
})

CLASSIC, CONSUMER = "classic", "consumer"
GROUP_PROTOCOLS = (CLASSIC, CONSUMER)
CONSUMER_PROTOCOL_SINCE = (4, 0, 0)      # KIP-848's consumer group protocol: GA on the broker in 4.0
#: Client settings of the classic protocol that the consumer protocol refuses, and where they went.
CLASSIC_ONLY_SETTINGS: dict[str, str] = {
    "session.timeout.ms": "the broker's group.consumer.session.timeout.ms sets it",
    "heartbeat.interval.ms": "the broker's group.consumer.heartbeat.interval.ms sets it",
    "partition.assignment.strategy": "the broker assigns; group.remote.assignor names its assignor",
    "group.protocol.type": "the consumer protocol has no protocol type",
}

_CGMD_MAGIC = b"CGMDv2:"
_MEMBER_OPS = (SUBSCRIBE, POLL, COMMIT, REBALANCE)


def classify_commit_error(err: KafkaError) -> str:
    """``"fail"`` if a commit that ended with ``err`` was certainly not
    stored, else ``"info"`` (see the module docstring)."""
    return FAIL if err.code() in CERTAIN_NOT_COMMITTED else INFO


def generation_of(metadata: Any) -> int | None:
    """The group generation in librdkafka's serialised consumer group metadata
    (``Consumer.consumer_group_metadata()``), or None when unknown."""
    if not isinstance(metadata, (bytes, bytearray)) or not metadata.startswith(_CGMD_MAGIC) \
            or len(metadata) < len(_CGMD_MAGIC) + 4:
        return None
    (generation,) = struct.unpack_from("=i", metadata, len(_CGMD_MAGIC))
    return generation if generation >= 0 else None


def commit_outcome(op: Op, err: KafkaError | None, tps: list | None, node: str | None = None) -> Op:
    """The completion of a commit from its result: the error (sync: the
    exception's; async: the callback's) and the partitions with their offsets
    and per-partition errors."""
    tried = {str(tp.partition): tp.offset for tp in tps or () if tp.offset >= 0}
    errors = [tp.error for tp in tps or () if tp.error is not None]
    if err is not None and not errors:
        errors = [err]
    if not errors:
        done = {str(tp.partition): tp.offset for tp in tps or () if tp.offset >= 0 and tp.error is None}
        return completion(op, OK, done, node=node)
    typ = FAIL if all(classify_commit_error(e) == FAIL for e in errors) else INFO
    text = "; ".join(dict.fromkeys(f"{error_name(e)}: {e.str()}" for e in errors))
    return completion(op, typ, tried or None, text, node)


class GroupClient(QueueClient):
    """A group member: ``QueueClient``'s sends and polls, plus subscribe with
    rebalance callbacks, commits, and rebalance events."""

    def __init__(self) -> None:
        super().__init__()
        self._events: list[Op] = []
        self._commit_reports: list[tuple[KafkaError | None, list]] = []
        self._awaiting_commit = False
        self._held: list = []  # messages an async commit's wait polled, for the next poll op
        self.process: int | None = None

    def open(self, ctx: ClientContext) -> None:
        super().open(ctx)
        self.process = ctx.process
        self._cconf["on_commit"] = self._on_commit
        self._group = str(self._cconf.get("group.id"))
        self._isolation = str(self._cconf.get("isolation.level") or READ_COMMITTED)

    def op_fields(self, f: str) -> dict[str, Any]:
        """Fields every op ``f`` of this member records (invoke and completion)."""
        return {"group": self._group, "isolation": self._isolation} if f in _MEMBER_OPS else {}

    def take_events(self) -> list[Op]:
        """The rebalance events collected since the last call, in order."""
        events, self._events = self._events, []
        return events

    def invoke(self, op: Op) -> Op:
        f = op["f"]
        if f == COMMIT:
            out = self._commit(op)
        elif f in ("send", POLL, SUBSCRIBE):
            out = super().invoke(op)
        else:
            raise ValueError(f"consumer-group workload has no op {f!r}")
        out.update(self.op_fields(f))
        if f == COMMIT and op.get("async"):
            out["async"] = True
        events = self.take_events()
        if events:
            out["events"] = events
        return out

    # -- rebalances ---------------------------------------------------------
    def _subscribe(self, op: Op) -> Op:
        consumer = self._get_consumer()
        topic = op.get("value") or self._topic
        try:
            consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                               on_lost=self._on_lost)
        except KafkaException as exc:
            return completion(op, FAIL, topic, f"{error_name(exc.args[0])}: {exc.args[0].str()}", self._node)
        return completion(op, OK, topic, node=self._node)

    def _on_assign(self, consumer: Consumer, partitions: list) -> None:
        self._event(consumer, [tp.partition for tp in partitions], [])

    def _on_revoke(self, consumer: Consumer, partitions: list) -> None:
        self._event(consumer, [], [tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list) -> None:
        self._event(consumer, [], [tp.partition for tp in partitions], lost=True)

    def _event(self, consumer: Consumer, assigned: list[int], revoked: list[int], lost: bool = False) -> None:
        # Runs inside librdkafka's callback: never raise.
        try:
            generation = generation_of(consumer.consumer_group_metadata())
        except Exception as exc:
            log.debug("consumer_group_metadata: %s", exc)
            generation = None
        try:
            member = consumer.memberid() or None
        except Exception:
            member = None
        value: dict[str, Any] = {"assigned": sorted(assigned), "revoked": sorted(revoked),
                                 "generation": generation, "member": member}
        if lost:
            value["lost"] = True
        self._events.append({"type": OK, "f": REBALANCE, "value": value, **self.op_fields(REBALANCE)})
        for p in revoked:
            self._next.pop(p, None)
        if revoked and self._held:
            gone = set(revoked)
            self._held = [m for m in self._held if m.partition() not in gone]

    # -- polls: store what was recorded --------------------------------------
    def _consume(self, consumer: Consumer) -> list:
        if not self._held:
            return super()._consume(consumer)
        n = self.ctx.poll_max_messages
        batch, self._held = self._held[:n], self._held[n:]
        return batch

    def _poll(self, op: Op) -> Op:
        out = super()._poll(op)
        value = out.get("value")
        if out["type"] == OK and value:
            offsets = [TopicPartition(self._topic, int(p), pairs[-1][0] + 1) for p, pairs in value.items()]
            try:
                self._consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:
                # Partitions revoked within the same poll cannot be stored: their
                # next owner reads them again from the group's committed offset.
                log.debug("process %s store_offsets: %s", self.process, exc)
        return out

    # -- commits -------------------------------------------------------------
    def _on_commit(self, err: KafkaError | None, partitions: list) -> None:
        if self._awaiting_commit:
            self._commit_reports.append((err, list(partitions)))
        else:  # a late report of a commit whose op ended info: the runner retired this process
            log.debug("process %s: late commit report %s %s", self.process, err, partitions)

    def _commit(self, op: Op) -> Op:
        consumer = self._get_consumer()
        if not op.get("async"):
            try:
                tps = consumer.commit(asynchronous=False)
            except KafkaException as exc:
                return commit_outcome(op, exc.args[0], None, self._node)
            return commit_outcome(op, None, tps, self._node)
        deadline = time.monotonic() + self.ctx.op_timeout_s
        self._commit_reports.clear()
        self._awaiting_commit = True
        try:
            try:
                consumer.commit(asynchronous=True)
            except KafkaException as exc:
                return commit_outcome(op, exc.args[0], None, self._node)
            while not self._commit_reports and (left := deadline - time.monotonic()) > 0:
                msg = consumer.poll(min(0.05, left))
                if msg is not None and msg.error() is None:
                    self._held.append(msg)
        finally:
            self._awaiting_commit = False
        if not self._commit_reports:
            return completion(op, INFO, None, "no commit callback by the op deadline", self._node)
        err, tps = self._commit_reports[0]
        return commit_outcome(op, err, tps, self._node)


# -- the rebalance protocol (KIP-848) ----------------------------------------------------
def group_protocol(consumer_config: Mapping[str, Any]) -> str:
    """The rebalance protocol a consumer with these settings runs."""
    return str(consumer_config.get("group.protocol", CLASSIC)).strip().lower()


def group_protocol_problem(consumer_config: Mapping[str, Any], protocols: Sequence[str], mode: str,
                           kafka_version: tuple[int, ...]) -> str | None:
    """Why ``[consumer]`` with ``[workload] group_protocols`` cannot run on
    Kafka ``kafka_version`` (one line), or None. The value of
    ``group.protocol`` itself is the client library's to check."""
    for name in protocols:
        if name not in GROUP_PROTOCOLS:
            return f"group_protocols: unknown protocol {name!r}; protocols: {', '.join(GROUP_PROTOCOLS)}"
    if protocols and mode != "subscribe":
        return 'group_protocols needs mode = "subscribe": assigned consumers are no group members'
    if protocols and "group.protocol" in consumer_config:
        return ('[workload] group_protocols and consumer."group.protocol" both choose the protocol; set one '
                "(group_protocols: each worker's processes take its protocols in turn)")
    if CONSUMER not in protocols and group_protocol(consumer_config) != CONSUMER:
        return None
    if tuple(kafka_version) < CONSUMER_PROTOCOL_SINCE:
        return (f"the consumer group protocol (KIP-848) needs Kafka 4.0 or later; Kafka "
                f"{'.'.join(map(str, kafka_version))} has only the classic one")
    for key, why in CLASSIC_ONLY_SETTINGS.items():
        if key in consumer_config:
            return (f'consumer."{key}" is not a setting of the consumer group protocol (KIP-848): {why}; '
                    "leave it unset")
    return None


class ProtocolMember(Client):
    """A group member's client (either library's) with its rebalance protocol:
    ``protocol`` over the run's ``[consumer]`` table when given (a migration),
    else the table's own. Its rebalance events say which protocol it ran."""

    def __init__(self, inner: Client, protocol: str | None = None):
        self.inner = inner
        self.protocol = protocol

    def open(self, ctx: ClientContext) -> None:
        if self.protocol is not None:
            ctx = dataclasses.replace(ctx, consumer_config={**ctx.consumer_config, "group.protocol": self.protocol})
        self.protocol = group_protocol(ctx.consumer_config)
        self.inner.open(ctx)

    def invoke(self, op: Op) -> Op:
        out = self.inner.invoke(op)
        for event in out.get("events") or ():
            self._stamp(event)
        return out

    def take_events(self) -> list[Op]:
        return [self._stamp(event) for event in self.inner.take_events()]

    def _stamp(self, event: Op) -> Op:
        if event.get("f") == REBALANCE and isinstance(event.get("value"), dict):
            event["value"]["protocol"] = self.protocol
        return event

    def op_fields(self, f: str) -> dict[str, Any]:
        return self.inner.op_fields(f)

    def close(self) -> None:
        self.inner.close()

    def crash(self) -> None:
        self.inner.crash()


def member_clients(make: Callable[[Any, int, int], Client],
                   protocols: Sequence[str]) -> Callable[[Any, int, int], Client]:
    """A kind's ``make_client`` (workloads/kinds.py) for group members: each
    client a ``ProtocolMember``; with ``protocols`` (a migration), worker w's
    n-th client takes ``protocols[n % len(protocols)]``. Counts per call: one
    per run (the runner asks for its kind once)."""
    opened: dict[int, int] = defaultdict(int)
    lock = threading.Lock()

    def make_member(workload: Any, seed: int, worker: int) -> Client:
        protocol = None
        if protocols:
            with lock:
                protocol = protocols[opened[worker] % len(protocols)]
                opened[worker] += 1
        return ProtocolMember(make(workload, seed, worker), protocol)
    return make_member
