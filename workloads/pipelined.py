"""Pipelined producers: up to N messages in flight, each its own op.

The batch producer (``workloads.queue``) flushes every send op, so at most one
batch is ever in flight: Kafka's ordering promises between requests in flight
(an idempotent producer keeps up to 5 per connection, in order) are never
exercised. Here one confluent-kafka producer instance keeps up to ``in_flight``
messages outstanding (``produce`` with a delivery callback, no flush per op).

History (docs/design.md, "The history"): each message is one ``send`` op
of one message. The invoke is recorded before the message is handed to
``produce`` (``send_many`` records the invokes of all the messages it is given
in one write, then produces them); the completion at its delivery report (the
completions of the reports one ``poll`` serves are recorded together when it
returns, before any new invoke): ``ok`` with its offset,
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

Ops are made as rows, ``(process, type, partition, value, offset, producer,
error)`` (``SendRow``), and recorded a list at a time by ``record_sends(rows,
node)`` (the runner's recorder writes them as lines without making op dicts:
``history.writer.HistoryWriter.append_sends``); without one, ``send_op``
makes each row the op it stands for and ``record_many`` records those.

Delivery callbacks run inside ``serve``/``send``/``close`` (librdkafka calls
them from ``Producer.poll``), on the caller's thread: the owner calls ``serve``
while it waits, so completions are recorded promptly. ``pump`` is the loop a
sender runs (the runner's pipelined worker, bench/workload_overhead.py);
``pump_at`` the loop of a replay, which sends each message at its recorded time.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from itertools import islice
from typing import Any, Callable, Iterator

from confluent_kafka import KafkaError, KafkaException, Producer

from history.ops import FAIL, INFO, INVOKE, OK, Op
from history.writer import SendRow, send_op
from workloads.classify import classify_delivery_error, error_name
from workloads.client import ClientContext, SendPump, producer_settings
from workloads.queue import encode_value

log = logging.getLogger(__name__)

class _Slot:
    """One message in flight, on its process, handed to producer instance
    ``name``; also its delivery callback (no closure made per message)."""
    __slots__ = ("owner", "name", "process", "partition", "value", "deadline", "done")

    def __init__(self, owner: "PipelinedProducer", name: str, process: int, partition: int, value: int,
                 deadline: float):
        self.owner, self.name, self.process = owner, name, process
        self.partition, self.value, self.deadline, self.done = partition, value, deadline, False

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if self.done:                       # already completed info (expired): too late to tell
            return
        if err is None:
            self.owner._complete(self, OK, msg.offset(), None)
        else:
            self.owner._failed(self, err)


class PipelinedProducer(SendPump):
    """Up to ``in_flight`` sends outstanding on one producer instance at a time.

    ``record(op)`` appends a history op (the runner's recorder: it adds index
    and time), ``record_many(ops)`` several at once (one write; by default
    ``record`` each); ``record_sends(rows, node)`` records ``SendRow``s in one
    write (by default ``record_many`` of their ``send_op``s); ``new_process()`` draws a fresh process number;
    ``new_name()`` names a new producer instance (unique in the run, e.g. ``"p3"``).
    """

    def __init__(self, ctx: ClientContext, in_flight: int, record: Callable[[Op], Any],
                 new_process: Callable[[], int], new_name: Callable[[], str], expire_s: float | None = None,
                 record_many: Callable[[list[Op]], Any] | None = None,
                 record_sends: Callable[[list[SendRow], str | None], Any] | None = None):
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {in_flight}")
        self.ctx = ctx
        self.in_flight = in_flight
        record_many = record_many or (lambda ops: [record(op) for op in ops])
        self._record_sends = record_sends or (lambda rows, node: record_many([send_op(r, node) for r in rows]))
        self._buffer: list[SendRow] | None = None    # completions of the reports being served
        self._new_process = new_process
        self._new_name = new_name
        # A message whose report has not come by then is recorded info: librdkafka
        # times messages out itself at message.timeout.ms (below op_timeout).
        self.expire_s = expire_s if expire_s is not None else ctx.op_timeout_s + 5.0
        self._free: list[int] = [new_process() for _ in range(in_flight)]
        # Every slot not completed yet, in invoke order, so in deadline order
        # (expiry looks at the oldest only); completed ones leave from the left.
        self._by_deadline: deque[_Slot] = deque()
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
        return self.in_flight - len(self._free)

    # -- ops ----------------------------------------------------------------------
    def pump(self, messages: Iterator[tuple[int, int]], stop: Callable[[], bool]) -> None:
        """Send ``(partition, value)`` messages as fast as slots free up, until
        they run out or ``stop()``: each round takes as many messages as there
        are free slots, records their invokes together, hands them to the
        producer, then serves the reports that came in."""
        while not stop() and self.wait_for_slot(stop):
            batch = list(islice(messages, len(self._free)))
            if not batch:
                return
            self.send_many(batch)
            self.serve(0)

    def pump_at(self, messages: Iterator[tuple[float, int, int]],
                stop: Callable[[], bool]) -> tuple[float, int, int] | None:
        """A replay's pump (harness/replay.py): send each ``(at, partition,
        value)`` at monotonic time ``at``, or as soon after as a slot frees up,
        serving reports while it waits, until they run out or ``stop()``. The
        messages due by then go together, as many as slots are free (as
        ``pump`` hands them over). Returns the message taken but not sent when
        stopped (the caller hands it back for the next round), else None."""
        held = next(messages, None)
        while held is not None:
            while (wait := held[0] - time.monotonic()) > 0:
                if stop():
                    return held
                self.serve(min(0.01, wait))
            if stop() or not self.wait_for_slot(stop):
                return held
            batch, now = [], time.monotonic()
            while held is not None and held[0] <= now and len(batch) < len(self._free):
                batch.append((held[1], held[2]))
                held = next(messages, None)
            self.send_many(batch)
            self.serve(0)
        return None

    def wait_for_slot(self, stop: Callable[[], bool], step_s: float = 0.01) -> bool:
        """Serve delivery reports until a slot is free (True) or ``stop()``."""
        while not self._free:
            if stop():
                return False
            self.serve(step_s)
        return True

    def send(self, partition: int, value: int) -> int:
        """``send_many`` of one message; returns its process."""
        return self.send_many([(partition, value)])[0]

    def send_many(self, messages: list[tuple[int, int]]) -> list[int]:
        """Record the invokes of one-message sends, each on a free slot's
        process (one ``record_many`` call), then hand the messages to the
        producer. Returns the processes. Needs as many free slots
        (``wait_for_slot``)."""
        if len(messages) > len(self._free):
            raise ValueError(f"{len(messages)} messages for {len(self._free)} free slots")
        producer = self._get()
        name = self.name
        deadline = time.monotonic() + self.expire_s
        free, pending = self._free, self._by_deadline
        slots, invokes = [], []
        for partition, value in messages:
            process = free.pop()
            slot = _Slot(self, name, process, partition, value, deadline)
            pending.append(slot)
            slots.append(slot)
            invokes.append((process, INVOKE, partition, value, None, name, None))
        self._record_sends(invokes, None)            # an invoke names no node
        topic, width, keys = self.ctx.topic, self.ctx.message_bytes, self._keys
        for slot in slots:
            partition = slot.partition
            key = keys.get(partition) or str(partition).encode()
            try:        # the value's bytes are workloads.queue.encode_value's, inlined
                producer.produce(topic, str(slot.value).ljust(width).encode(), key, partition, on_delivery=slot)
            except (BufferError, KafkaException) as exc:
                self._produce_again(producer, slot, key, exc)
        return [slot.process for slot in slots]

    def _produce_again(self, producer: Producer, slot: _Slot, key: bytes, exc: Exception) -> None:
        """``produce`` raised ``exc``: while the local queue is full, serve
        reports and try again (up to the op timeout); a refusal by
        ``produce`` fails the message (never queued)."""
        give_up = time.monotonic() + self.ctx.op_timeout_s
        while True:
            if isinstance(exc, KafkaException):
                err = exc.args[0]
                self._complete(slot, FAIL, None, f"{error_name(err)}: {err.str()} (refused by produce())")
                return
            if time.monotonic() >= give_up:
                self._complete(slot, FAIL, None, f"{type(exc).__name__}: {exc} (never queued)")
                return
            self._serve_reports(producer.poll, 0.01)
            try:
                producer.produce(self.ctx.topic, encode_value(slot.value, self.ctx.message_bytes), key,
                                 slot.partition, on_delivery=slot)
                return
            except (BufferError, KafkaException) as again:
                exc = again

    def _serve_reports(self, call: Callable[[float], Any], timeout_s: float) -> None:
        """``call(timeout_s)`` (the producer's poll or flush) runs delivery
        callbacks; the completions they make are recorded together when it
        returns, before any new invoke (a slot's process may be reused)."""
        self._buffer = []
        try:
            call(timeout_s)
        finally:
            done, self._buffer = self._buffer, None
            if done:
                self._record_sends(done, self.ctx.node)

    def serve(self, timeout_s: float = 0.0) -> None:
        """Deliver reports for up to ``timeout_s``, then expire overdue messages."""
        if self._producer is not None:
            self._serve_reports(self._producer.poll, timeout_s)
        elif timeout_s > 0:
            time.sleep(timeout_s)
        q = self._by_deadline
        while q and q[0].done:
            q.popleft()
        if q and q[0].deadline <= time.monotonic():
            now = time.monotonic()
            while q and (q[0].done or q[0].deadline <= now):
                slot = q.popleft()
                self._complete(slot, INFO, None, "no delivery report by the op deadline")

    def close(self, flush_s: float = 0.0, abandon: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``flush_s`` (until ``abandon()``) for outstanding reports,
        then purge the rest (their purge reports complete them info) and
        complete anything still without a report as info."""
        if self._producer is not None and self.outstanding and flush_s > 0:
            end = time.monotonic() + flush_s
            while self.outstanding and time.monotonic() < end and not abandon():
                self._serve_reports(self._producer.poll, min(0.05, max(0.0, end - time.monotonic())))
        self._close_instance("no delivery report when the producer was closed")

    def crash(self) -> None:
        """A client crash (``crash_interval``): the instance is dropped without
        flushing. Its messages in flight end info (they may still be
        appended), its queued ones as librdkafka's purge classifies them; the
        next send opens a new instance, under a new name."""
        self._close_instance("crash: producer dropped without flush")

    def _close_instance(self, why: str) -> None:
        p, name = self._producer, self.name
        if p is not None:
            try:
                p.purge(in_queue=True, in_flight=True, blocking=False)
                self._serve_reports(p.flush, 1.0)      # serves the purge reports
            except Exception as exc:      # closing must not fail the runner
                log.debug("closing producer %s: %s", name, exc)
        self._producer = None
        for slot in self._by_deadline:
            self._complete(slot, INFO, None, why)
        self._by_deadline.clear()

    # -- completions --------------------------------------------------------------
    def _failed(self, slot: _Slot, err: KafkaError) -> None:
        """A delivery report with an error (``_Slot.__call__``)."""
        if err.fatal():
            self._fatal = err
        self._complete(slot, classify_delivery_error(err), None, f"{error_name(err)}: {err.str()}")

    def _complete(self, slot: _Slot, typ: str, offset: int | None, error: str | None) -> None:
        if slot.done:
            return
        slot.done = True
        row = (slot.process, typ, slot.partition, slot.value, offset, slot.name, error)
        if self._buffer is not None:
            self._buffer.append(row)     # recorded when the poll serving it returns
        else:
            self._record_sends([row], self.ctx.node)
        # An info op may still take effect: its process retires.
        self._free.append(self._new_process() if typ == INFO else slot.process)
