"""Pipelined producers: up to N messages in flight, each its own op.

The batch producer (``workloads.queue``) flushes every send op, so at most one
batch is ever in flight: Kafka's ordering promises between requests in flight
(an idempotent producer keeps up to 5 per connection, in order) are never
exercised. Here one confluent-kafka producer instance keeps up to ``in_flight``
messages outstanding (``produce`` with a delivery callback, no flush per op).

History (docs/design.md, "The history"): each message is one ``send`` op
of one message. The invoke is recorded just before the message is handed to
``produce``; the completion at its delivery report: ``ok`` with its offset,
``fail`` when ``classify_delivery_error`` (or a refused ``produce``) says it
certainly was not written, ``info`` otherwise, including the messages purged
when the producer is closed and those with no report ``expire_s`` after
their invoke. A process has one op outstanding at a time, so each in-flight
slot is a logical process of its own; every op of a slot's process carries
``"producer": <name>``, the instance it was handed to, so the checkers can
check order per producer. A slot whose op ended ``info`` retires its process
(the message may still land) and takes a new number from ``new_process``.

A fatal producer error (an idempotent producer's lost sequence state) makes
the instance unusable: it is closed (its outstanding messages end ``info``) and
a new instance, under a new name, takes over.

Delivery callbacks run inside ``serve``/``send``/``close`` (librdkafka calls
them from ``Producer.poll``), on the caller's thread: the owner calls ``serve``
while it waits, so completions are recorded promptly.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from checkers.history import FAIL, INFO, INVOKE, OK, SEND, Op
from workloads.classify import classify_delivery_error, error_name
from workloads.core import ClientContext, producer_settings
from workloads.queue import encode_value

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    process: int
    partition: int
    value: int
    deadline: float
    done: bool = False


class PipelinedProducer:
    """Up to ``in_flight`` sends outstanding on one producer instance at a time.

    ``record(op)`` appends a history op (the runner's recorder: it adds index
    and time); ``new_process()`` draws a fresh process number; ``new_name()``
    names a new producer instance (unique in the run, e.g. ``"p3"``).
    """

    def __init__(self, ctx: ClientContext, in_flight: int, record: Callable[[Op], Any],
                 new_process: Callable[[], int], new_name: Callable[[], str], expire_s: float | None = None):
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self.ctx = ctx
        self.in_flight = in_flight
        self._record = record
        self._new_process = new_process
        self._new_name = new_name
        # A message whose report has not come by then is recorded info: librdkafka
        # times messages out itself at message.timeout.ms (below op_timeout).
        self.expire_s = expire_s if expire_s is not None else ctx.op_timeout_s + 5.0
        self._free: list[int] = [new_process() for _ in range(in_flight)]
        self._busy: dict[int, _Slot] = {}
        self._conf = producer_settings(ctx)
        self._conf["error_cb"] = self._on_error
        self._keys = {p: str(p).encode() for p in range(ctx.partitions)}
        self._fatal: KafkaError | None = None
        self._producer: Producer | None = None
        self.name = ""

    # -- the instance -----------------------------------------------------------
    def _get(self) -> Producer:
        if self._fatal is not None and self._producer is not None:
            log.info("producer %s: fatal error %s, replacing it", self.name, self._fatal)
            self._close_instance("producer replaced after a fatal error")
        self._fatal = None
        if self._producer is None:
            self.name = self._new_name()
            conf = dict(self._conf)
            conf["client.id"] = f"kchaos-{self.name}"
            self._producer = Producer(conf)
        return self._producer

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err
            log.warning("producer %s fatal error: %s", self.name, err)
        else:
            log.debug("producer %s: %s", self.name, err)

    @property
    def outstanding(self) -> int:
        return len(self._busy)

    # -- ops ----------------------------------------------------------------------
    def wait_for_slot(self, stop: Callable[[], bool], step_s: float = 0.01) -> bool:
        """Serve delivery reports until a slot is free (True) or ``stop()``."""
        while not self._free:
            if stop():
                return False
            self.serve(step_s)
        return True

    def send(self, partition: int, value: int) -> int:
        """Record the invoke of a one-message send on a free slot's process and
        hand the message to the producer. Returns the process. Needs a free slot
        (``wait_for_slot``)."""
        producer = self._get()
        process = self._free.pop()
        msg = [partition, value, None]
        self._record({"process": process, "type": INVOKE, "f": SEND, "value": [msg], "producer": self.name})
        slot = _Slot(process, partition, value, time.monotonic() + self.expire_s)
        self._busy[process] = slot
        name = self.name
        key = self._keys.get(partition) or str(partition).encode()
        give_up = time.monotonic() + self.ctx.op_timeout_s
        while True:
            try:
                producer.produce(self.ctx.topic, encode_value(value, self.ctx.message_bytes), key, partition,
                                 on_delivery=lambda err, m, s=slot, n=name: self._delivered(s, n, err, m))
                return process
            except BufferError as exc:     # the local queue is full: serve reports, then retry
                if time.monotonic() >= give_up:
                    self._complete(slot, name, FAIL, None, f"{type(exc).__name__}: {exc} (never queued)")
                    return process
                producer.poll(0.01)
            except KafkaException as exc:  # refused by produce(): never queued
                err = exc.args[0]
                self._complete(slot, name, FAIL, None, f"{error_name(err)}: {err.str()} (refused by produce())")
                return process

    def serve(self, timeout_s: float = 0.0) -> None:
        """Deliver reports for up to ``timeout_s``, then expire overdue messages."""
        if self._producer is not None:
            self._producer.poll(timeout_s)
        elif timeout_s > 0:
            time.sleep(timeout_s)
        now = time.monotonic()
        for slot in [s for s in self._busy.values() if s.deadline <= now]:
            self._complete(slot, self.name, INFO, None, "no delivery report by the op deadline")

    def close(self, flush_s: float = 0.0, abandon: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``flush_s`` (until ``abandon()``) for outstanding reports,
        then purge the rest (their purge reports complete them info) and
        complete anything still without a report as info."""
        if self._producer is not None and self._busy and flush_s > 0:
            end = time.monotonic() + flush_s
            while self._busy and time.monotonic() < end and not abandon():
                self._producer.poll(min(0.05, max(0.0, end - time.monotonic())))
        self._close_instance("no delivery report when the producer was closed")

    def _close_instance(self, why: str) -> None:
        p, name = self._producer, self.name
        if p is not None:
            try:
                p.purge(in_queue=True, in_flight=True, blocking=False)
                p.flush(1.0)               # serves the purge reports
            except Exception as exc:      # closing must not fail the runner
                log.debug("closing producer %s: %s", name, exc)
        self._producer = None
        for slot in list(self._busy.values()):
            self._complete(slot, name, INFO, None, why)

    # -- completions --------------------------------------------------------------
    def _delivered(self, slot: _Slot, name: str, err: KafkaError | None, msg: Any) -> None:
        if slot.done:                       # already completed info (expired): too late to tell
            return
        if err is None:
            self._complete(slot, name, OK, msg.offset(), None)
            return
        if err.fatal():
            self._fatal = err
        self._complete(slot, name, classify_delivery_error(err), None, f"{error_name(err)}: {err.str()}")

    def _complete(self, slot: _Slot, name: str, typ: str, offset: int | None, error: str | None) -> None:
        if slot.done:
            return
        slot.done = True
        self._busy.pop(slot.process, None)
        op: Op = {"process": slot.process, "type": typ, "f": SEND,
                  "value": [[slot.partition, slot.value, offset]], "producer": name}
        if error is not None:
            op["error"] = error
        if self.ctx.node is not None:
            op["node"] = self.ctx.node
        self._record(op)
        # An info op may still take effect: its process retires.
        self._free.append(self._new_process() if typ == INFO else slot.process)
