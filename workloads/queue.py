"""The queue workload client (after Jepsen's Kafka queue test).

One topic of P partitions. A message's key is its partition (as a string),
it is produced explicitly to that partition, and its value is an int unique
per partition, written as ASCII decimal (right-padded with spaces to
``ClientContext.message_bytes``, which ``int()`` ignores when reading).

Ops and completions follow the history contract (``history.ops``: the
value shapes are specified there, not here); ``process``/``index``/``time``
are added by the runner. What this client decides:

``send``  1..batch messages. Every message is produced, then the producer is
    flushed until the op deadline (``op_timeout_s``); messages without a
    delivery report by then are purged and their reports collected. Per
    message the outcome is ``ok`` (report without error: it has an offset),
    ``fail`` (never entered the producer's queue, or an error
    ``classify_delivery_error`` calls certain) or ``info`` (anything else,
    including no report at all). The op is ok when all are, fail when all
    are, and info otherwise, with ``outcomes`` per message; ``error`` is
    ``"<n>/<total> <ERROR_NAME>: <text>; ..."``, one entry per distinct error.

``poll``  consumes up to ``poll_max_messages`` within ``poll_timeout_s``.
    Messages returned are always reported ok, with consumer errors seen in
    the same call in ``error``. A call that returned only errors is ``fail``
    if the consumer's positions are where the previous polls left them
    (nothing was consumed), else ``info``.

``assign`` (assign mode): partitions kept from the previous assignment
    continue at their position, new ones start at the earliest offset.
``subscribe`` (subscribe mode): joins group ``group_id``; rebalances happen
    inside polls. Both are ok, or fail if librdkafka rejected them.

Completions carry ``"node": ctx.node`` when the context names one.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from functools import partial
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from workloads.classify import classify_delivery_error, error_name
from workloads.client import (FAIL, INFO, OK, Client, ClientContext, Op, completion, consumer_settings,
                            producer_settings)

log = logging.getLogger(__name__)

# Time kept back at the end of a send op to purge and collect the purged reports.
_PURGE_GRACE_S = 0.25


def encode_value(v: int, width: int = 0) -> bytes:
    s = str(v)
    return (s.ljust(width) if width > len(s) else s).encode()


def decode_value(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def shape_poll(messages) -> tuple[dict[str, list[list[int]]], list[Any]]:
    """Split consumed messages into the poll value ``{"<p>": [[offset, value],
    ...]}`` (in the order received) and the list of errors seen
    (_PARTITION_EOF events are not errors). A message whose value is not an
    int was not written by kchaos: it is listed among the errors instead."""
    out: dict[str, list[list[int]]] = {}
    errors: list[Any] = []
    for m in messages:
        err = m.error()
        if err is not None:
            if err.code() != KafkaError._PARTITION_EOF:
                errors.append(err)
            continue
        v = decode_value(m.value())
        if v is None:
            errors.append(f"partition {m.partition()} offset {m.offset()}: value {m.value()[:40]!r} is not an int")
            continue
        key = str(m.partition())
        pairs = out.get(key)
        if pairs is None:
            out[key] = pairs = []
        pairs.append([m.offset(), v])
    return out, errors


def errors_text(errors: list[Any]) -> str:
    parts = []
    for e in errors:
        if isinstance(e, KafkaError):
            parts.append(f"{error_name(e)}: {e.str()}")
        else:
            parts.append(str(e))
    return "; ".join(f"{n}x {t}" if n > 1 else t for t, n in Counter(parts).items())


def send_completion(op: Op, msgs: list, results: list, never_queued: list, node: str | None = None) -> Op:
    """The completion of a send from each message's end: ``results[i]`` is its
    offset (acknowledged), the KafkaError of its delivery report or of a
    refused ``produce()`` (``never_queued[i]``), a BufferError (never queued)
    or None (no delivery report by the deadline)."""
    if all(type(r) is int for r in results):
        out = {"type": OK, "f": op["f"], "value": [[m[0], m[1], r] for m, r in zip(msgs, results)]}
        if node is not None:
            out["node"] = node
        return out
    outcomes: list[str] = []
    reasons: list[str] = []
    for r, nq in zip(results, never_queued):
        if type(r) is int:
            outcomes.append(OK)
            continue
        if r is None:
            outcomes.append(INFO)
            reasons.append("no delivery report by the op deadline")
        elif isinstance(r, KafkaError):
            outcomes.append(FAIL if nq else classify_delivery_error(r))
            reasons.append(f"{error_name(r)}: {r.str()}" + (" (refused by produce())" if nq else ""))
        else:  # BufferError: the local queue stayed full, never queued
            outcomes.append(FAIL)
            reasons.append(f"{type(r).__name__}: {r}")
    value = [[m[0], m[1], r if type(r) is int else None] for m, r in zip(msgs, results)]
    typ = FAIL if all(o == FAIL for o in outcomes) else INFO
    total = len(outcomes)
    text = "; ".join(f"{c}/{total} {t}" for t, c in Counter(reasons).items())
    out = completion(op, typ, value, text, node)
    out["outcomes"] = outcomes
    return out


def abandon_producer(producer: Producer) -> None:
    """Drop a producer without flushing (a crash, or a close): queued and
    in-flight messages are purged and their reports served at once. Never
    raises: closing must not fail the runner."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(0)
    except Exception as exc:
        log.debug("abandoning producer: %s", exc)


def close_consumer(consumer: Consumer) -> None:
    """Close a consumer; never raises."""
    try:
        consumer.close()
    except Exception as exc:
        log.debug("closing consumer: %s", exc)


class QueueClient(Client):
    """One logical process: a producer (made on the first send) and a consumer
    (made on the first assign/subscribe/poll), reused for every op."""

    def __init__(self) -> None:
        self.ctx: ClientContext | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._pconf: dict[str, Any] = {}
        self._cconf: dict[str, Any] = {}
        self._assigned: list[int] = []
        self._next: dict[int, int] = {}          # partition -> offset after the last one read
        self._producer_fatal: KafkaError | None = None

    # -- lifecycle ---------------------------------------------------------
    def open(self, ctx: ClientContext) -> None:
        self.ctx = ctx
        self._topic = ctx.topic
        self._node = ctx.node
        self._width = ctx.message_bytes
        self._keys = {p: str(p).encode() for p in range(ctx.partitions)}
        self._pconf = producer_settings(ctx)
        self._pconf["error_cb"] = self._on_producer_error
        mt = self._pconf.get("message.timeout.ms", self._pconf.get("delivery.timeout.ms"))
        if mt is not None and int(mt) >= ctx.op_timeout_s * 1000:
            log.warning("message.timeout.ms %s is not below the op timeout (%.1fs): sends that do not "
                        "complete in time are purged and recorded info", mt, ctx.op_timeout_s)
        self._cconf = consumer_settings(ctx)
        self._cconf["error_cb"] = self._on_consumer_error

    def close(self) -> None:
        p, self._producer = self._producer, None
        if p is not None:
            abandon_producer(p)
        c, self._consumer = self._consumer, None
        if c is not None:
            close_consumer(c)

    def _on_producer_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._producer_fatal = err
            log.warning("process %s producer fatal error: %s", self.ctx and self.ctx.process, err)
        else:
            log.debug("process %s producer: %s", self.ctx and self.ctx.process, err)

    def _on_consumer_error(self, err: KafkaError) -> None:
        log.debug("process %s consumer: %s", self.ctx and self.ctx.process, err)

    # -- ops -----------------------------------------------------------------
    def invoke(self, op: Op) -> Op:
        f = op["f"]
        if f == "send":
            return self._send(op)
        if f == "poll":
            return self._poll(op)
        if f == "assign":
            return self._assign(op)
        if f == "subscribe":
            return self._subscribe(op)
        raise ValueError(f"queue workload has no op {f!r}")

    # send ------------------------------------------------------------------
    def _get_producer(self) -> Producer:
        if self._producer_fatal is not None and self._producer is not None:
            # A fatal error (idempotence state lost) leaves the producer
            # unusable: start a new one (new producer id) for the next op.
            log.info("process %s: replacing producer after fatal error %s",
                     self.ctx and self.ctx.process, self._producer_fatal)
            old, self._producer = self._producer, None
            try:
                old.purge(in_queue=True, in_flight=True, blocking=False)
                old.flush(0)
            except Exception:
                pass
        self._producer_fatal = None
        if self._producer is None:
            self._producer = Producer(self._pconf)
        return self._producer

    def _send(self, op: Op) -> Op:
        deadline = time.monotonic() + self.ctx.op_timeout_s
        msgs = op["value"]
        n = len(msgs)
        producer = self._get_producer()
        # results[i]: None (no report yet), an int offset (acknowledged), or
        # the KafkaError / exception that ended message i.
        results: list[Any] = [None] * n
        never_queued = [False] * n
        pending = [n]

        def on_delivery(i: int, err: KafkaError | None, msg) -> None:
            if results[i] is None:
                pending[0] -= 1
            results[i] = msg.offset() if err is None else err

        topic, width, keys, produce = self._topic, self._width, self._keys, producer.produce
        for i, m in enumerate(msgs):
            p = m[0]
            key = keys.get(p) or str(p).encode()
            while True:
                try:
                    produce(topic, encode_value(m[1], width), key, p, on_delivery=partial(on_delivery, i))
                    break
                except BufferError as exc:   # local queue full: wait for room
                    if time.monotonic() >= deadline - _PURGE_GRACE_S:
                        results[i], never_queued[i] = exc, True
                        pending[0] -= 1
                        break
                    producer.poll(0.01)
                except KafkaException as exc:  # refused by produce(): never queued
                    results[i], never_queued[i] = exc.args[0], True
                    pending[0] -= 1
                    break

        if pending[0]:
            producer.flush(max(0.0, deadline - _PURGE_GRACE_S - time.monotonic()))
        if pending[0]:
            # Deadline: take the rest out of librdkafka and collect their reports.
            try:
                producer.purge(in_queue=True, in_flight=True, blocking=True)
            except KafkaException as exc:
                log.debug("purge: %s", exc)
            while pending[0] and time.monotonic() < deadline:
                producer.poll(0.02)
        out = send_completion(op, msgs, results, never_queued, self._node)
        if out["type"] != OK:
            for r in results:
                if isinstance(r, KafkaError) and r.fatal():
                    self._producer_fatal = r
        return out

    # consumer ----------------------------------------------------------------
    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._cconf)
        return self._consumer

    def _assign(self, op: Op) -> Op:
        parts = [int(p) for p in (op.get("value") or [])]
        consumer = self._get_consumer()
        keep = set(parts) & set(self._assigned)
        positions: dict[int, int] = {}
        if keep:
            try:
                for tp in consumer.position([TopicPartition(self._topic, p) for p in sorted(keep)]):
                    if tp.offset >= 0:
                        positions[tp.partition] = tp.offset
            except KafkaException as exc:
                log.debug("position: %s", exc)
        tps = [TopicPartition(self._topic, p, positions.get(p, self._next.get(p, OFFSET_BEGINNING))
                              if p in keep else OFFSET_BEGINNING) for p in parts]
        try:
            consumer.assign(tps)
        except KafkaException as exc:
            return completion(op, FAIL, parts, f"{error_name(exc.args[0])}: {exc.args[0].str()}", self._node)
        self._assigned = parts
        self._next = {p: o for p, o in self._next.items() if p in keep}
        return completion(op, OK, parts, node=self._node)

    def _subscribe(self, op: Op) -> Op:
        consumer = self._get_consumer()
        topic = op.get("value") or self._topic
        try:
            consumer.subscribe([topic])
        except KafkaException as exc:
            return completion(op, FAIL, topic, f"{error_name(exc.args[0])}: {exc.args[0].str()}", self._node)
        return completion(op, OK, topic, node=self._node)

    def _poll(self, op: Op) -> Op:
        consumer = self._get_consumer()
        errors: list[Any]
        try:
            msgs = self._consume(consumer)
        except KafkaException as exc:
            msgs, errors = [], [exc.args[0]]
        else:
            value, errors = shape_poll(msgs)
            if value:
                nxt = self._next
                for key, pairs in value.items():
                    nxt[int(key)] = pairs[-1][0] + 1
                return completion(op, OK, value, errors_text(errors) if errors else None, self._node)
            if not errors:
                return completion(op, OK, value, node=self._node)
        return completion(op, FAIL if self._positions_unchanged(consumer) else INFO, None,
                          errors_text(errors), self._node)

    def _consume(self, consumer: Consumer) -> list:
        """The messages (and error events) one poll op hands to the history."""
        return consumer.consume(self.ctx.poll_max_messages, self.ctx.poll_timeout_s)

    def _positions_unchanged(self, consumer: Consumer) -> bool:
        """After a poll that returned only errors: is every assigned
        partition's position still where the last read left it (or unset if
        nothing was read from it)?"""
        try:
            assignment = consumer.assignment()
            if not assignment:
                return True
            for tp in consumer.position(assignment):
                expected = self._next.get(tp.partition)
                if expected is None:
                    if tp.offset >= 0:
                        return False
                elif tp.offset != expected:
                    return False
            return True
        except Exception as exc:  # cannot tell
            log.debug("position after failed poll: %s", exc)
            return False
