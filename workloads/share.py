"""The share-group workload client (KIP-932): a ``ShareConsumer`` member plus a
producer for its sends (``send`` is ``workloads.queue``'s).

One logical process is one member of share group ``ClientContext.group_id``.
Its ops and their value shapes are the history contract's (``history.ops``,
share-group ops); every share op carries ``group``. What this client decides:

``share-subscribe``  subscribes to the run's topic; ok names the group's lock
    duration and delivery-attempt limit as the run set them (workloads/share_plan.py
    sets them on the group before the workload starts).
``share-poll``  one ``poll(poll_timeout_s)``: every record returned, with its
    ``delivery_count()``. Error messages in the batch go to ``error``; a poll
    that returned only errors is ``fail`` (nothing was acquired that the
    member saw), an exception is ``info``.
``share-ack``  marks the records of the member's last share-poll. Explicit
    acknowledgement mode: ``acknowledge(message, type)`` per record, the type
    drawn from the member's own seeded RNG (release and reject with their
    probabilities, else accept); a record the call refuses is left out.
    Implicit mode: nothing is called (the next poll, commit or close accepts
    them all) and every record is marked accept. Marks go to Kafka later; the
    client keeps them until an answer names them, in order per record: a
    record released and delivered again may be marked a second time before
    the first mark is answered, and each answer takes the oldest mark still
    pending on its record. An answer naming a record with no mark pending is
    an accept in implicit mode (the next poll accepted it) and is left out in
    explicit mode (no mark of this member to answer; logged).
``share-commit``  ``commit_sync(op_timeout_s)``: ok when every partition
    answered without error, fail when every error is certain, else info.
``share-hold``  sleeps the planned seconds without calling the consumer: the
    records it acquired stay locked to it until their locks run out. ``fail``
    at once when the last share-poll delivered nothing (there is nothing to hold).

Answers: the acknowledgement commit callback runs inside the consumer's calls;
each call becomes a ``share-acked`` event (ok; fail for INVALID_RECORD_STATE,
the record no longer acquired by this member, so the mark was not applied;
info otherwise). Partitions a ``commit_sync`` result answered and no callback
did are answered from the result. At close, marks no answer named become one
``share-acked`` info event: close sent them, the outcome was not seen.

A crash closes the consumer as well (librdkafka's share consumer cannot be
dropped without leaving the group): Kafka releases what it held unmarked.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, ShareConsumer

from history.ops import (ACCEPT, REJECT, RELEASE, SHARE_ACK, SHARE_ACKED, SHARE_COMMIT, SHARE_HOLD, SHARE_POLL,
                         SHARE_SUBSCRIBE)
from workloads.classify import error_name
from workloads.client import FAIL, INFO, OK, ClientContext, Op, completion, librdkafka_logger
from workloads.queue import QueueClient, decode_value, errors_text

log = logging.getLogger(__name__)

ACK_TYPES = {ACCEPT: AcknowledgeType.ACCEPT, RELEASE: AcknowledgeType.RELEASE, REJECT: AcknowledgeType.REJECT}
# An acknowledgement answer with this error certainly was not applied: Kafka checks
# that the member holds the record's acquisition lock before it changes its state.
CERTAIN_NOT_APPLIED = frozenset({KafkaError.INVALID_RECORD_STATE})
_SHARE_OPS = (SHARE_SUBSCRIBE, SHARE_POLL, SHARE_ACK, SHARE_COMMIT, SHARE_HOLD)


def share_consumer_settings(ctx: ClientContext, ack_mode: str) -> dict[str, Any]:
    """The share consumer's settings: kchaos's own (a share consumer refuses most
    of the classic consumer's, so ``[consumer]`` is not applied)."""
    return {"bootstrap.servers": ctx.bootstrap, "client.id": f"kchaos-s{ctx.process}", "group.id": ctx.group_id,
            "share.acknowledgement.mode": ack_mode, "max.poll.records": ctx.poll_max_messages,
            "socket.connection.setup.timeout.ms": max(1000, int(ctx.op_timeout_s * 1000)),
            "logger": librdkafka_logger()}


def marks_value(marks: dict[tuple[int, int], str]) -> dict[str, dict[str, list[int]]]:
    """``{(partition, offset): kind}`` as a share-ack value ``{kind: {"<partition>": [offsets]}}``."""
    out: dict[str, dict[str, list[int]]] = {}
    for (p, o), kind in sorted(marks.items()):
        out.setdefault(kind, {}).setdefault(str(p), []).append(o)
    return out


class ShareClient(QueueClient):
    """A share-group member: sends, and the share ops of the module docstring."""

    def __init__(self, ack_mode: str, lock_ms: int, delivery_limit: int, release_p: float, reject_p: float,
                 rng: random.Random, drain: bool = False):
        super().__init__()
        self.ack_mode, self.lock_ms, self.delivery_limit = ack_mode, lock_ms, delivery_limit
        self.release_p, self.reject_p, self.rng, self.drain = release_p, reject_p, rng, drain
        self._share: ShareConsumer | None = None
        self._last: list = []                                 # the last share-poll's messages
        self._marks: dict[tuple[int, int], list[str]] = {}    # marks not yet answered, oldest first
        self._events: list[Op] = []

    def open(self, ctx: ClientContext) -> None:
        super().open(ctx)
        self._group = ctx.group_id

    def op_fields(self, f: str) -> dict[str, Any]:
        fields: dict[str, Any] = {"group": self._group} if f in _SHARE_OPS else {}
        if self.drain and f in _SHARE_OPS:
            fields["drain"] = True
        return fields

    def take_events(self) -> list[Op]:
        events, self._events = self._events, []
        return events

    def invoke(self, op: Op) -> Op:
        f = op["f"]
        if f == "send":
            return super().invoke(op)
        handler = {SHARE_SUBSCRIBE: self._subscribe_share, SHARE_POLL: self._share_poll, SHARE_ACK: self._ack,
                   SHARE_COMMIT: self._commit, SHARE_HOLD: self._hold}.get(f)
        if handler is None:
            raise ValueError(f"share workload has no op {f!r}")
        out = handler(op)
        out.update(self.op_fields(f))
        events = self.take_events()
        if events:
            out["events"] = events
        return out

    def close(self) -> None:
        share, self._share = self._share, None
        if share is not None:
            try:
                share.close()        # sends the marks still pending; the callback may answer them
            except Exception as exc:
                log.debug("process %s: share consumer close: %s", self.ctx and self.ctx.process, exc)
        self._answer_pending(list(self._marks), INFO, "closed with these marks sent; no answer seen")
        super().close()

    # -- the consumer -------------------------------------------------------------
    def _consumer_share(self) -> ShareConsumer:
        if self._share is None:
            self._share = ShareConsumer(share_consumer_settings(self.ctx, self.ack_mode))
            self._share.set_acknowledgement_commit_callback(self._on_acknowledged)
        return self._share

    def _on_acknowledged(self, offsets: dict, exc: Any) -> None:
        # Runs inside the consumer's calls: never raise.
        try:
            answered = {}
            for tp, offs in (offsets or {}).items():
                for o in offs or ():
                    key = (tp.partition, int(o))
                    kind = self._take_mark(key) or (ACCEPT if self.ack_mode == "implicit" else None)
                    if kind is None:
                        log.warning("process %s: an answer for %s/%s, which has no mark pending",
                                    self.ctx and self.ctx.process, *key)
                        continue
                    answered[key] = kind
            if not answered:
                return
            if exc is None:
                self._answer_done(answered, OK, None)
            else:
                err = exc.args[0] if getattr(exc, "args", None) else exc
                code = err.code() if isinstance(err, KafkaError) else None
                text = f"{error_name(err)}: {err.str()}" if isinstance(err, KafkaError) else str(err)
                self._answer_done(answered, FAIL if code in CERTAIN_NOT_APPLIED else INFO, text)
        except Exception as e:  # noqa: BLE001
            log.warning("process %s: acknowledgement callback: %r", self.ctx and self.ctx.process, e)

    def _take_mark(self, key: tuple[int, int]) -> str | None:
        """The oldest mark still pending on ``key`` (now answered), or None."""
        kinds = self._marks.get(key)
        if not kinds:
            return None
        kind = kinds.pop(0)
        if not kinds:
            del self._marks[key]
        return kind

    def _answer_pending(self, keys: list[tuple[int, int]], typ: str, error: str | None) -> None:
        """Every mark still pending on ``keys`` answered, oldest first: one event
        per round, so that no event names a record twice."""
        while True:
            marks = {key: kind for key in keys if (kind := self._take_mark(key)) is not None}
            if not marks:
                return
            self._answer_done(marks, typ, error)

    def _answer_done(self, marks: dict[tuple[int, int], str], typ: str, error: str | None) -> None:
        event: Op = {"type": typ, "f": SHARE_ACKED, "value": marks_value(marks), **self.op_fields(SHARE_POLL)}
        if error:
            event["error"] = error
        self._events.append(event)

    # -- ops ------------------------------------------------------------------------
    def _subscribe_share(self, op: Op) -> Op:
        value = {"topic": self._topic, "lock_ms": self.lock_ms, "delivery_count_limit": self.delivery_limit}
        try:
            self._consumer_share().subscribe([self._topic])
        except KafkaException as exc:
            return completion(op, FAIL, value, f"{error_name(exc.args[0])}: {exc.args[0].str()}", self._node)
        return completion(op, OK, value, node=self._node)

    def _share_poll(self, op: Op) -> Op:
        batch = self._consumer_share().poll(self.ctx.poll_timeout_s)
        out: dict[str, list[list[int]]] = {}
        errors: list[Any] = []
        self._last = []
        for m in batch:
            if m.error() is not None:
                errors.append(m.error())
                continue
            v = decode_value(m.value())
            if v is None:
                errors.append(f"partition {m.partition()} offset {m.offset()}: value is not an int")
                continue
            self._last.append(m)
            out.setdefault(str(m.partition()), []).append([m.offset(), v, m.delivery_count() or 0])
        if errors and not out:
            return completion(op, FAIL, None, errors_text(errors), self._node)
        return completion(op, OK, out, errors_text(errors) if errors else None, self._node)

    def _draw(self) -> str:
        if self.drain:
            return ACCEPT
        x = self.rng.random()
        return RELEASE if x < self.release_p else REJECT if x < self.release_p + self.reject_p else ACCEPT

    def _ack(self, op: Op) -> Op:
        marked: dict[tuple[int, int], str] = {}
        refused: list[str] = []
        last, self._last = self._last, []
        for m in last:
            key = (m.partition(), m.offset())
            if self.ack_mode == "implicit":
                marked[key] = ACCEPT
                continue
            kind = self._draw()
            try:
                self._consumer_share().acknowledge(m, ACK_TYPES[kind])
            except Exception as exc:  # IllegalStateException: no longer in flight
                refused.append(f"{key[0]}/{key[1]}: {exc}")
                continue
            marked[key] = kind
        for key, kind in marked.items():
            self._marks.setdefault(key, []).append(kind)
        return completion(op, OK, marks_value(marked), "; ".join(refused) or None, self._node)

    def _commit(self, op: Op) -> Op:
        sent = list(self._marks)
        try:
            result = self._consumer_share().commit_sync(self.ctx.op_timeout_s)
        except KafkaException as exc:
            return completion(op, INFO, None, f"{error_name(exc.args[0])}: {exc.args[0].str()}", self._node)
        value: dict[str, str | None] = {}
        certain = True
        for tp, err in (result or {}).items():
            e = err.args[0] if isinstance(err, KafkaException) else err
            sure = isinstance(e, KafkaError) and e.code() in CERTAIN_NOT_APPLIED
            value[str(tp.partition)] = None if e is None else (
                f"{error_name(e)}: {e.str()}" if isinstance(e, KafkaError) else str(e))
            certain = certain and (e is None or sure)
            pending = [k for k in sent if k[0] == tp.partition]
            # what no callback named: the result answers for it
            self._answer_pending(pending, OK if e is None else FAIL if sure else INFO, value[str(tp.partition)])
        errors = [v for v in value.values() if v is not None]
        typ = OK if not errors else FAIL if certain else INFO
        return completion(op, typ, value, "; ".join(errors) or None, self._node)

    def _hold(self, op: Op) -> Op:
        if not self._last:
            return completion(op, FAIL, op.get("value"), "the last share-poll delivered nothing to hold", self._node)
        time.sleep(float(op.get("value") or 0))
        return completion(op, OK, op.get("value"), node=self._node)

