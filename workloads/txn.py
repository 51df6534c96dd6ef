"""The transactions workload client (after Jepsen's Kafka txn test).

One logical process: a transactional producer plus a consumer in assign mode
(``enable.auto.commit`` off, ``isolation.level`` from ``[consumer]``,
read_committed by default). Ops and value shapes are the history contract's
(``history.ops``: ``txn``); values are encoded as in ``workloads.queue``.

``transactional.id`` is stable per runner *worker* (``kchaos-<seed>-w<n>``),
not per process: when a worker retires a process (an ``info`` op) or crashes
its client, the successor's ``init_transactions`` fences the old instance and
aborts whatever transaction it left open.

``assign``  the consumer reads the named partitions from their beginning.

``txn``  ``begin_transaction``; the micro-ops in order (``send``: produce to
    the partition, no flush; ``poll``: consume up to ``poll_max_messages``
    within ``poll_timeout_s``); a flush, so every send has the offset of its
    delivery report; with ``send_offsets`` the consumer's positions go to
    ``send_offsets_to_transaction``; then ``commit_transaction``, or
    ``abort_transaction`` when the op says ``abort``. The whole op has
    ``op_timeout_s``; retriable errors of commit/abort are retried within it.
    The outcome:

    * ``ok``: ``commit_transaction`` returned.
    * ``fail``: certainly not committed. Aborted by choice (``abort: true``);
      an abortable error (``txn_requires_abort``) followed by an
      ``abort_transaction`` that returned; ``begin_transaction`` refused; or
      any failure before ``commit_transaction`` was ever called (a produce
      refused, an abort that did not return, a fatal error): without an
      EndTxn(commit) request the coordinator never commits a transaction, it
      aborts it (on its timeout, or when the successor fences this producer).
    * ``info``: ``commit_transaction`` was called and its outcome was not
      learned (timed out, retriable error until the deadline, fatal error,
      abortable error whose abort did not return). The runner retires the
      process.

    Micro-ops after a refused send are not performed: they are reported as
    ``["send", p, v, null]`` and ``["poll"]`` (no reads).

    A fatal error (fenced, idempotence state lost) makes the producer unusable:
    the next txn of the same process recreates it (same transactional id, a
    new instance name). Completions name the instance in ``producer``
    (``t<process>.<k>``, unique in the run) so per-producer send order can be
    checked, and carry the consumer's ``isolation``.

    After an abort (``fail``), the consumer seeks each partition this
    transaction read back to the first offset the transaction read there, so
    the next transaction reads those messages again, as Jepsen's client does
    (KAFKA-17582 is about consumers that do not rewind after an abort).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from history.ops import POLL, READ_COMMITTED, SEND
from workloads.classify import error_name
from workloads.client import (FAIL, INFO, OK, Client, ClientContext, Op, completion, consumer_settings,
                              producer_settings)
from workloads.queue import abandon_producer, close_consumer, encode_value, errors_text, shape_poll

log = logging.getLogger(__name__)

#: transaction.timeout.ms unless [producer] sets it. Small on purpose: a
#: transaction left open by a crashed or retired producer holds the
#: partition's last stable offset (so every read_committed read, the final
#: drain included) until the coordinator aborts it on this timeout, unless a
#: successor with the same transactional id fences it first. Kafka's client
#: default (60 s) would stall the drain for a minute.
TRANSACTION_TIMEOUT_MS = 10_000


def transactional_id(seed: int | None, worker: int) -> str:
    """The transactional id of one runner worker: stable across its processes."""
    return f"kchaos-{seed}-w{worker}"


def txn_producer_settings(ctx: ClientContext, txn_id: str) -> dict[str, Any]:
    """The queue producer's settings plus the transactional id and a short
    transaction timeout (never below message.timeout.ms, which librdkafka
    requires)."""
    conf = producer_settings(ctx)
    conf["transactional.id"] = txn_id
    if "transaction.timeout.ms" not in ctx.producer_config:
        mt = conf.get("message.timeout.ms", conf.get("delivery.timeout.ms", 0))
        conf["transaction.timeout.ms"] = max(TRANSACTION_TIMEOUT_MS, int(mt or 0))
    return conf


def wait_for_coordinator(ctx: ClientContext, seed: int | None, timeout_s: float = 60.0) -> float:
    """Before the workload: initialise one transactional producer until the
    coordinator answers, so the run's clock does not start while Kafka creates
    and loads ``__transaction_state`` (its first ``init_transactions`` answers
    COORDINATOR_LOAD_IN_PROGRESS for seconds). Seconds waited; raises the last
    KafkaException if it never answered."""
    t0 = time.monotonic()
    conf = txn_producer_settings(ctx, f"kchaos-{seed}-warmup")
    while True:
        producer = Producer(conf)
        try:
            producer.init_transactions(max(1.0, min(10.0, t0 + timeout_s - time.monotonic())))
            return time.monotonic() - t0
        except KafkaException:
            if time.monotonic() - t0 >= timeout_s:
                raise
            time.sleep(0.5)
        finally:
            producer.flush(0)


def txn_consumer_settings(ctx: ClientContext, group_id: str) -> dict[str, Any]:
    """The queue consumer's settings with the worker's own group id (the group
    ``send_offsets_to_transaction`` commits to) and auto-commit off."""
    conf = consumer_settings(dataclasses.replace(ctx, group_id=group_id, mode="assign"))
    conf["enable.auto.commit"] = False
    return conf


def check_txn_settings(ctx: ClientContext) -> None:
    """Build the transactional producer offline (no bootstrap servers, nothing
    polled) so librdkafka judges its settings now. Raises ValueError, one line."""
    conf = txn_producer_settings(ctx, transactional_id(0, 0))
    for name in ("bootstrap.servers", "metadata.broker.list", "logger"):
        conf.pop(name, None)
    try:
        Producer(conf)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        raise ValueError(f"transactional producer: {err.str() if hasattr(err, 'str') else err}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"transactional producer: {exc}") from None


def _kafka_error(exc: BaseException) -> KafkaError | None:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return err if isinstance(err, KafkaError) else None


def _text(exc: BaseException) -> str:
    err = _kafka_error(exc)
    return f"{error_name(err)}: {err.str()}" if err is not None else f"{type(exc).__name__}: {exc}"


class _Broken(Exception):
    """The producer hit a fatal error; the message says where."""


class TxnClient(Client):
    """One logical process of the transactions workload (module docstring)."""

    def __init__(self, txn_id: str, send_offsets: bool = False) -> None:
        self.txn_id = txn_id
        self.send_offsets = send_offsets
        self.ctx: ClientContext | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._made = 0                      # producers this process made (instance names)
        self.producer_name: str | None = None
        self._broken = False                # the producer must be recreated before the next txn
        self._assigned: list[int] = []

    # -- lifecycle -------------------------------------------------------------------
    def open(self, ctx: ClientContext) -> None:
        self.ctx = ctx
        self._node = ctx.node
        self._pconf = txn_producer_settings(ctx, self.txn_id)
        self._cconf = txn_consumer_settings(ctx, self.txn_id)
        self.isolation = str(self._cconf.get("isolation.level", READ_COMMITTED))
        self._new_producer()

    def _new_producer(self) -> None:
        """A fresh producer with this worker's transactional id; its
        ``init_transactions`` fences any earlier instance. Raises KafkaException."""
        self._drop_producer()
        self.producer_name = f"t{self.ctx.process}.{self._made}"
        self._made += 1
        producer = Producer(self._pconf)
        try:
            producer.init_transactions(self.ctx.op_timeout_s)
        except Exception:
            abandon_producer(producer)   # an open transaction is left to the coordinator
            raise
        self._producer, self._broken = producer, False

    def _drop_producer(self) -> None:
        p, self._producer = self._producer, None
        if p is not None:
            abandon_producer(p)

    def close(self) -> None:
        """No flush, no abort: ops never leave a transaction open on purpose,
        and one left open (an ``info`` commit) is the successor's to fence."""
        self._drop_producer()
        c, self._consumer = self._consumer, None
        if c is not None:
            close_consumer(c)

    def _get_consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._cconf)
        return self._consumer

    # -- ops ---------------------------------------------------------------------------
    def invoke(self, op: Op) -> Op:
        if op["f"] == "assign":
            return self._assign(op)
        if op["f"] == "txn":
            return self._txn(op)
        raise ValueError(f"transactions workload has no op {op['f']!r}")

    def _assign(self, op: Op) -> Op:
        parts = [int(p) for p in (op.get("value") or [])]
        try:
            self._get_consumer().assign([TopicPartition(self.ctx.topic, p, OFFSET_BEGINNING) for p in parts])
        except KafkaException as exc:
            return completion(op, FAIL, parts, _text(exc), self._node)
        self._assigned = parts
        return completion(op, OK, parts, node=self._node)

    def _txn(self, op: Op) -> Op:
        ctx = self.ctx
        deadline = time.monotonic() + ctx.op_timeout_s
        planned = op.get("value") or []
        chose_abort = bool(op.get("abort"))
        done: list[list] = []              # the micro-ops as they happened
        offsets: list[Any] = []            # per send done: offset, KafkaError, or None (no report yet)
        errors: list[str] = []
        first_read: dict[int, int] = {}    # partition -> first offset this txn read there
        producer = self._producer

        def finish(typ: str, rewind: bool = False, by_choice: bool = False) -> Op:
            if producer is not None:
                try:
                    producer.poll(0)       # serve delivery reports still queued
                except KafkaException as exc:     # a fatal error surfacing here: the instance is done
                    self._note_fatal(exc)
            sends = iter(offsets)
            for entry in done:
                if entry[0] == SEND:
                    r = next(sends)
                    if type(r) is int:
                        entry[3] = r
                    elif isinstance(r, KafkaError):
                        errors.append(f"send {entry[1]}/{entry[2]}: {error_name(r)}: {r.str()}")
            # Micro-ops never reached: a send without an offset, a poll without reads.
            value = done + [[SEND, m[1], m[2], None] if m[0] == SEND else [POLL] for m in planned[len(done):]]
            out = completion(op, typ, value, "; ".join(errors) or None, self._node)
            out["producer"] = self.producer_name
            out["isolation"] = self.isolation
            if by_choice:
                out["abort"] = True
            if rewind and first_read:
                self._rewind(first_read)
            return out

        if self._broken or producer is None:
            try:
                self._new_producer()
            except Exception as exc:
                errors.append(f"init_transactions: {_text(exc)}")
                return finish(FAIL)
            producer = self._producer
        try:
            producer.begin_transaction()
        except Exception as exc:
            self._note_fatal(exc)
            errors.append(f"begin_transaction: {_text(exc)}")
            return finish(FAIL)

        must_abort = False
        for mop in planned:
            if mop[0] == SEND:
                p, v = int(mop[1]), int(mop[2])
                offsets.append(None)
                done.append([SEND, p, v, None])
                if not self._produce(producer, p, v, len(offsets) - 1, offsets, deadline, errors):
                    must_abort = True
                    break
            else:
                done.append([POLL, self._poll(first_read, errors)])

        if not must_abort:
            try:
                producer.flush(max(0.0, deadline - time.monotonic()))
            except KafkaException as exc:   # a fatal error (fenced, ...) raised here: commit never called
                self._note_fatal(exc)
                errors.append(f"flush: {_text(exc)}")
                must_abort = True
            if not chose_abort and self.send_offsets:
                try:
                    self._send_offsets(producer, deadline)
                except Exception as exc:
                    errors.append(f"send_offsets_to_transaction: {_text(exc)}")
                    must_abort = True

        if must_abort or chose_abort:
            # commit_transaction is never called on this path: not committed, whatever follows.
            if not self._abort(producer, deadline, errors):
                self._broken = True
            return finish(FAIL, rewind=True, by_choice=not must_abort)

        outcome = self._commit(producer, deadline, errors)
        return finish(outcome, rewind=outcome == FAIL)

    def _produce(self, producer: Producer, p: int, v: int, i: int, offsets: list, deadline: float,
                 errors: list[str]) -> bool:
        """Hand one message to the producer; False when it was refused."""
        def on_delivery(err: KafkaError | None, msg) -> None:
            offsets[i] = msg.offset() if err is None else err

        while True:
            try:
                producer.produce(self.ctx.topic, encode_value(v, self.ctx.message_bytes), str(p).encode(), p,
                                 on_delivery=on_delivery)
                return True
            except BufferError as exc:
                if time.monotonic() >= deadline:
                    errors.append(f"send {p}/{v}: {type(exc).__name__}: {exc}")
                    return False
                producer.poll(0.01)
            except KafkaException as exc:
                self._note_fatal(exc)
                errors.append(f"send {p}/{v} refused: {_text(exc)}")
                return False

    def _poll(self, first_read: dict[int, int], errors: list[str]) -> dict[str, list[list[int]]]:
        ctx = self.ctx
        try:
            msgs = self._get_consumer().consume(ctx.poll_max_messages, ctx.poll_timeout_s)
        except KafkaException as exc:
            errors.append(f"poll: {_text(exc)}")
            return {}
        value, errs = shape_poll(msgs)
        if errs:
            errors.append(f"poll: {errors_text(errs)}")
        for key, pairs in value.items():
            first_read.setdefault(int(key), pairs[0][0])
        return value

    def _send_offsets(self, producer: Producer, deadline: float) -> None:
        consumer = self._get_consumer()
        assignment = consumer.assignment()
        if not assignment:
            return
        positions = [tp for tp in consumer.position(assignment) if tp.offset >= 0]
        if not positions:
            return
        self._retry(lambda t: producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), t),
                    deadline)

    def _retry(self, call: Callable[[float], None], deadline: float) -> None:
        """``call(timeout)`` again on retriable errors until ``deadline``;
        raises the last error. A fatal one marks the producer broken."""
        while True:
            try:
                call(max(0.5, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                self._note_fatal(exc)
                err = _kafka_error(exc)
                if err is None or not err.retriable() or err.fatal() or time.monotonic() >= deadline:
                    raise

    def _abort(self, producer: Producer, deadline: float, errors: list[str]) -> bool:
        try:
            self._retry(producer.abort_transaction, deadline)
            return True
        except Exception as exc:
            errors.append(f"abort_transaction: {_text(exc)}")
            return False

    def _commit(self, producer: Producer, deadline: float, errors: list[str]) -> str:
        """ok (committed), fail (an abortable error, then an abort that
        returned) or info (unknown)."""
        try:
            self._retry(producer.commit_transaction, deadline)
            return OK
        except Exception as exc:
            errors.append(f"commit_transaction: {_text(exc)}")
            err = _kafka_error(exc)
            if err is not None and err.txn_requires_abort() and not err.fatal():
                return FAIL if self._abort(producer, deadline, errors) else INFO
            return INFO

    def _note_fatal(self, exc: BaseException) -> None:
        err = _kafka_error(exc)
        if err is not None and err.fatal():
            if not self._broken:
                log.info("process %s producer %s: fatal error %s; the next txn recreates it",
                         self.ctx.process, self.producer_name, err)
            self._broken = True

    def _rewind(self, first_read: dict[int, int]) -> None:
        """After an abort: each partition this txn read goes back to where the
        txn's reads of it started."""
        consumer = self._get_consumer()
        for p, offset in sorted(first_read.items()):
            try:
                consumer.seek(TopicPartition(self.ctx.topic, p, offset))
            except KafkaException as exc:
                log.warning("process %s: rewinding partition %d to %d after an abort failed: %s",
                            self.ctx.process, p, offset, _text(exc))
