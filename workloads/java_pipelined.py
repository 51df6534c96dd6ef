"""Pipelined sends through a driver (the Java client's): the pipelined
producer of workloads/pipelined.py with its producer instance in a driver
process, spoken to over the client protocol's asynchronous requests
(docs/design.md, "The client protocol": pipelined sends).

Everything the history sees is the librdkafka pipelined producer's: one
``send`` op of one message per in-flight slot, each on a process of its own,
invokes recorded before the messages are handed over, completions recorded a
batch at a time before any new invoke, ``producer`` naming the instance, an
``info`` slot retiring its process (``PipelinedProducer`` does the
bookkeeping; this class only replaces how messages travel). The checkers
cannot tell the clients apart but by ``client_settings`` in config.json.

The travel: ``send_many`` gives each message an op id (unique in the pump)
and writes one ``send-async`` request with all of them; the driver answers
nothing to it, and its ``sent`` lines carry the completions, each matched to
its slot by the id. ``serve`` reads those lines. A producer instance is one
name on the driver: a new name (after a fatal error) makes the driver close
its instance without flushing and open another. A crash kills the driver
process, as a crashed client's process would die; the next send starts a new
one, under a new name. Completions of ids already completed (a replaced
instance's late callbacks) are dropped.
"""
from __future__ import annotations

import itertools
import json
import logging
import time
from typing import Any, Callable

from history.ops import FAIL, INFO, INVOKE, OK, Op
from history.writer import SendRow
from workloads.client import ClientContext, SendPump
from workloads.driver_protocol import ANSWER_GRACE_S, DriverError, DriverProcess
from workloads.java_client import java_producer_settings
from workloads.pipelined import PipelinedProducer, _Slot

log = logging.getLogger(__name__)

#: Seconds to wait before a new driver after one could not open (no spinning on a dead cluster).
REOPEN_PAUSE_S = 1.0


def pipelined_open_config(ctx: ClientContext) -> dict[str, Any]:
    """The ``open`` request's config of a pipelined driver: the producer's settings only."""
    return {"topic": ctx.topic, "partitions": ctx.partitions, "process": ctx.process,
            "op_timeout_ms": int(ctx.op_timeout_s * 1000), "poll_timeout_ms": int(ctx.poll_timeout_s * 1000),
            "message_bytes": ctx.message_bytes, "transactional_id": None, "send_offsets": False,
            "producer": java_producer_settings(ctx), "consumer": {}}


class DriverPipelinedProducer(PipelinedProducer):
    """``PipelinedProducer`` whose instance is a driver process's (the module
    docstring); the arguments are ``PipelinedProducer``'s, plus the ``open``
    request's config builder."""

    def __init__(self, ctx: ClientContext, in_flight: int, record: Callable[[Op], Any],
                 new_process: Callable[[], int], new_name: Callable[[], str], expire_s: float | None = None,
                 record_many: Callable[[list[Op]], Any] | None = None,
                 record_sends: Callable[[list[SendRow], str | None], Any] | None = None,
                 open_config: Callable[[ClientContext], dict[str, Any]] = pipelined_open_config):
        if not ctx.driver:
            raise ValueError("no driver command line in the client context")
        super().__init__(ctx, in_flight, record, new_process, new_name, expire_s, record_many, record_sends)
        self._open_config = open_config
        self._driver: DriverProcess | None = None
        self._ids = itertools.count()
        # op id -> its slot, until the driver's completion of it comes (a slot completed
        # otherwise, expired, stays until then; a lost driver's all go at once).
        self._by_id: dict[int, _Slot] = {}
        self.identity: dict[str, Any] = {}

    # -- the instance -----------------------------------------------------------
    def _driver_for_send(self) -> DriverProcess | None:
        """The driver, started and opened if there is none; a fatal error renames the instance."""
        if self._fatal is not None and self._driver is not None:
            log.info("producer %s: fatal error %s, replacing it", self.name, self._fatal)
            self._drop_outstanding("producer replaced after a fatal error")
            self.name = self._new_name()
        self._fatal = None
        if self._driver is None:
            self.name = self._new_name()
            driver = DriverProcess(list(self.ctx.driver), f"driver-pipelined-{self.name}")
            try:
                answer = driver.request({"f": "open", "config": self._open_config(self.ctx)},
                                        self.ctx.op_timeout_s + ANSWER_GRACE_S)
            except DriverError as exc:
                answer = {"type": FAIL, "error": str(exc)}
            if answer.get("type") != OK:
                driver.kill()
                log.warning("pipelined driver could not open: %s", answer.get("error"))
                return None
            self.identity = dict(answer.get("value") or {})
            self._driver = driver
        return self._driver

    # -- ops ----------------------------------------------------------------------
    def send_many(self, messages: list[tuple[int, int]]) -> list[int]:
        """``PipelinedProducer.send_many``: the invokes recorded in one write,
        then one ``send-async`` request carries the messages and their op ids."""
        if len(messages) > len(self._free):
            raise ValueError(f"{len(messages)} messages for {len(self._free)} free slots")
        driver = self._driver_for_send()
        name = self.name
        deadline = time.monotonic() + self.expire_s
        slots, invokes, sends = [], [], []
        for partition, value in messages:
            process = self._free.pop()
            slot = _Slot(self, name, process, partition, value, deadline)
            op_id = next(self._ids)
            self._by_id[op_id] = slot
            self._by_deadline.append(slot)
            slots.append(slot)
            invokes.append((process, INVOKE, partition, value, None, name, None))
            sends.append((op_id, partition, value))
        self._record_sends(invokes, None)            # an invoke names no node
        if driver is None:                           # no producer: nothing was handed over
            for slot in slots:
                self._complete(slot, FAIL, None, "the driver could not open (never queued)")
            time.sleep(REOPEN_PAUSE_S)
            return [slot.process for slot in slots]
        try:
            driver.write({"f": "send-async", "producer": name, "sends": sends})
        except DriverError as exc:                   # the driver died: what it had may be sent
            self._lose_driver(f"the driver is gone: {exc}")
        return [slot.process for slot in slots]

    def serve(self, timeout_s: float = 0.0) -> None:
        """Record the completions the driver's ``sent`` lines carry (waiting up
        to ``timeout_s`` for the first), then expire overdue messages."""
        driver = self._driver
        if driver is None:
            if timeout_s > 0:
                time.sleep(timeout_s)
        else:
            lines = driver.lines(timeout_s)
            if lines:
                self._buffer = []
                try:
                    for line in lines:
                        self._take_line(line)
                finally:
                    done, self._buffer = self._buffer, None
                    if done:
                        self._record_sends(done, self.ctx.node)
            if driver.exited:
                self._lose_driver(f"the driver exited ({driver.proc.poll()})")
        super().serve(0)        # no librdkafka instance: only the expiry of overdue messages

    def _take_line(self, line: str) -> None:
        """One ``sent`` line: ``{"f": "sent", "done": [[id, type, offset, error?, fatal?], ...]}``."""
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            log.warning("pipelined driver wrote no JSON: %r", line[:200])
            return
        for entry in message.get("done") or ():
            slot = self._by_id.pop(entry[0], None)
            if slot is None or slot.done:
                continue                         # completed already (expired, replaced, crashed)
            error = entry[3] if len(entry) > 3 else None
            if len(entry) > 4 and entry[4]:
                self._fatal = error or "fatal"
            typ = entry[1] if entry[1] in (OK, FAIL) else INFO
            self._complete(slot, typ, entry[2] if typ == OK else None, error)

    def close(self, flush_s: float = 0.0, abandon: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``flush_s`` (until ``abandon()``) for outstanding reports,
        then end the driver; what is still outstanding ends info."""
        if self._driver is not None and self.outstanding and flush_s > 0:
            end = time.monotonic() + flush_s
            while self.outstanding and self._driver is not None and time.monotonic() < end and not abandon():
                self.serve(min(0.05, max(0.0, end - time.monotonic())))
        self._close_instance("no delivery report when the producer was closed")

    def crash(self) -> None:
        """A client crash: the driver process is killed with the instance in it;
        its messages in flight end info, and the next send starts a new driver."""
        self._close_instance("crash: producer dropped without flush")

    def _close_instance(self, why: str) -> None:
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.kill()
        self._drop_outstanding(why)

    def _lose_driver(self, why: str) -> None:
        log.warning("producer %s: %s", self.name, why)
        self._close_instance(why)

    def _drop_outstanding(self, why: str) -> None:
        """Every message without a completion ends info (it may still be appended)."""
        self._buffer = []
        try:
            for slot in list(self._by_deadline):
                self._complete(slot, INFO, None, why)
        finally:
            done, self._buffer = self._buffer, None
            if done:
                self._record_sends(done, self.ctx.node)
        self._by_deadline.clear()
        self._by_id.clear()            # every slot is complete: no later completion may match


def driver_pump(ctx: ClientContext, workload: Any, hooks: Any) -> SendPump:
    """A pipelined kind's pump with a driver's producer (``WorkloadKind.make_pump``'s signature)."""
    return DriverPipelinedProducer(ctx, workload.in_flight, hooks.record, hooks.new_process, hooks.new_name,
                                   record_many=hooks.record_many, record_sends=hooks.record_sends)
