"""One client connection through the protocol proxy and its upstream
connection (docs/design.md, "Faults inside Kafka's protocol"): the frame
loops and what an armed rule does to a request or its response.

The proxy (nemesis.kafka_proxy.KafkaProxy) owns what connections share: the
armed rules, the held requests and their release events, the event record.
Requests go up in the order they came and responses down in the order they
came (Kafka answers a connection's requests in order), so pipelining and
ordering per connection hold.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nemesis.proxy_rules import Rule
from nemesis.proxy_wire import (TRANSACTIONAL_APIS, RequestFields, RequestHeader, WireError, decode_request,
                                endtxn_response_error, error_response, frame_size, parse_request_header,
                                produce_response_partitions, response_correlation_id)

if TYPE_CHECKING:  # for the hints only: nemesis.kafka_proxy imports this module
    from nemesis.kafka_proxy import KafkaProxy

log = logging.getLogger(__name__)


@dataclass
class Pending:
    """A forwarded request whose response has not come back yet."""

    header: RequestHeader
    fields: RequestFields
    rule: Rule | None = None


@dataclass(eq=False)  # kept in sets by identity
class Held:
    """A request taken off its connection, waiting for its release."""

    header: RequestHeader
    fields: RequestFields
    rule: Rule
    broker: str
    since: float
    released: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


PASSED = Pending(RequestHeader(-1, -1, -1, None), RequestFields())  # a request no armed rule reads: its answer only passes
CHUNK = 256 * 1024  # bytes read at a time; every whole frame in them is handled before the next read
_REQUEST_START = struct.Struct(">ihhi")  # size, API key, API version, correlation id
_RESPONSE_START = struct.Struct(">ii")  # size, correlation id


def frame_end(buf: bytearray, off: int) -> int | None:
    """Where the frame starting at ``off`` ends, None when it has not all come yet."""
    if len(buf) - off < 4:
        return None
    end = off + 4 + frame_size(buf[off:off + 4])
    return end if end <= len(buf) else None


def answer_fields(header: RequestHeader, payload: bytes) -> dict[str, Any]:
    """What a released request's answer says: EndTxn's error code, a
    Produce's [partition, error code, base offset] per partition."""
    if header.api == "EndTxn":
        return {"error_code": endtxn_response_error(payload, header.api_version)}
    if header.api == "Produce":
        return {"answer": produce_response_partitions(payload, header.api_version)}
    return {}


class ProxyConnection:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: KafkaProxy, broker: str, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter,
                 u_reader: asyncio.StreamReader, u_writer: asyncio.StreamWriter):
        self.proxy, self.broker = proxy, broker
        self.c_reader, self.c_writer, self.u_reader, self.u_writer = c_reader, c_writer, u_reader, u_writer
        self.pending: dict[int, Pending] = {}
        self.client_gone = False
        self.held: Held | None = None  # the request this connection now only carries

    async def run(self) -> None:
        responses = asyncio.create_task(self._responses())
        try:
            await self._requests()
        except (ConnectionError, OSError) as exc:
            log.debug("proxy %s: connection ended: %s", self.broker, exc)
        finally:
            if self.held is None:
                self._close_up()
            self.client_gone = True
            self._close_client()
            if self.held is None:
                responses.cancel()

    def _close_client(self) -> None:
        self.c_writer.close()
        self.proxy.writers.discard(self.c_writer)

    def _close_up(self) -> None:
        self.u_writer.close()
        self.proxy.writers.discard(self.u_writer)

    async def _requests(self) -> None:
        """Forward the client's frames as they come. A request no armed rule
        reads (``RuleSet.read_keys``; every one while none is armed) is only
        noted by correlation id, and a run of such frames goes up in one
        write; any other is read whole and handled (``_request``) in its
        place in the stream."""
        proxy, buf = self.proxy, bytearray()
        while True:
            chunk = await self.c_reader.read(CHUNK)
            if not chunk:
                return
            buf += chunk
            start = off = 0  # start: the first frame not yet forwarded
            while (end := frame_end(buf, off)) is not None:
                rules = proxy.ruleset
                if end - off >= _REQUEST_START.size:
                    _, api_key, _, correlation_id = _REQUEST_START.unpack_from(buf, off)
                    if rules is None or api_key not in rules.read_keys:
                        self.pending[correlation_id] = PASSED
                        off = end
                        continue
                if start < off:
                    self.u_writer.write(bytes(buf[start:off]))
                data, start = bytes(buf[off:end]), end
                off = end
                if not await self._request(data):
                    return
            if start < off:
                self.u_writer.write(bytes(buf[start:off]))
            del buf[:off]
            await self.u_writer.drain()

    async def _request(self, data: bytes) -> bool:
        """One request read whole, what a rule does to it; False when the
        connection ends with it (a close or a hold)."""
        proxy = self.proxy
        try:
            header = parse_request_header(data[4:])
        except WireError:
            header = RequestHeader(-1, -1, -1, None)
        rules = proxy.ruleset
        fields = (decode_request(header, data[4:])
                  if rules is not None and header.api in TRANSACTIONAL_APIS else RequestFields())
        rule = (rules.decide(self.broker, header, fields, time.monotonic() - proxy.armed_at)
                if rules is not None else None)
        if rule is not None and rule.action == "hold" and fields.transactional_id in proxy.held_txn:
            rule = None  # one held request per transaction at a time
        if rule is None:
            pass
        elif rule.action == "delay-request":
            proxy.event("delay-request", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
            await asyncio.sleep(rule.delay_ms / 1000)
        elif rule.action == "error-response":
            await self._answer_error(header, fields, rule)
            return True
        elif rule.action == "close":
            proxy.event("close", rule, self.broker, header, fields)
            return False
        elif rule.action == "hold":
            await self._hold(Held(header, fields, rule, self.broker, time.monotonic()), data)
            return False
        self.pending[header.correlation_id] = Pending(header, fields, rule)
        self.u_writer.write(data)
        await self.u_writer.drain()
        return True

    async def _answer_error(self, header: RequestHeader, fields: RequestFields, rule: Rule) -> None:
        """Refuse the request in the broker's place, after the answers to the
        requests before it (a connection's answers come in order); the
        requests after it wait meanwhile."""
        while self.pending and not self.client_gone:
            await asyncio.sleep(0.005)
        self.proxy.event("error-response", rule, self.broker, header, fields, error_code=rule.error_code)
        self.c_writer.write(error_response(header, rule.error_code))
        await self.c_writer.drain()

    async def _hold(self, held: Held, data: bytes) -> None:
        """Take ``data`` off the connection: close the client's side now, send
        the request up when its release comes, read its answer, close."""
        proxy, rule = self.proxy, held.rule
        self.held = held
        proxy.hold_started(held)
        proxy.event("hold", rule, self.broker, held.header, held.fields, until=rule.until,
                     max_hold_ms=rule.max_hold_ms)
        self.client_gone = True
        self._close_client()
        asyncio.create_task(self._release(held, data))

    async def _release(self, held: Held, data: bytes) -> None:
        proxy, rule = self.proxy, held.rule
        timeout = rule.max_hold_ms / 1000 if rule.max_hold_ms is not None else None
        try:
            why = await asyncio.wait_for(asyncio.shield(held.released), timeout)
        except asyncio.TimeoutError:
            why = "max_hold_ms"
        held_ms = round((time.monotonic() - held.since) * 1000, 1)
        try:
            if why == "healed":
                proxy.event("discard", rule, held.broker, held.header, held.fields, held_ms=held_ms)
                return
            self.pending[held.header.correlation_id] = Pending(held.header, held.fields, rule)
            proxy.event("release", rule, held.broker, held.header, held.fields, released_by=why, held_ms=held_ms)
            self.u_writer.write(data)
            await self.u_writer.drain()
        except (ConnectionError, OSError) as exc:
            proxy.event("release-failed", rule, held.broker, held.header, held.fields, error=str(exc))
        finally:
            proxy.hold_ended(held)
            if why == "healed":
                self._close_up()

    def _deliver_late(self, header: RequestHeader, fields: RequestFields, rule: Rule, data: bytes) -> None:
        """A late response's delivery, after the responses that passed it; to
        nobody when the client has gone (it timed the request out)."""
        delivered = not self.client_gone and not self.c_writer.is_closing()
        self.proxy.event("late-delivered", rule, self.broker, header, fields, delivered=delivered,
                          **answer_fields(header, data[4:]))
        self.proxy.fire(header, fields.transactional_id, data[4:])
        if delivered:
            self.c_writer.write(data)  # drained by the next response's write

    async def _responses(self) -> None:
        """Pass the broker's answers down as they come: a run of answers to
        requests no rule read goes down in one write; any other is handled
        (``_response``) in its place in the stream."""
        buf = bytearray()
        try:
            while True:
                chunk = await self.u_reader.read(CHUNK)
                if not chunk:
                    return
                buf += chunk
                start = off = 0  # start: the first frame not yet passed down
                while (end := frame_end(buf, off)) is not None:
                    if end - off < _RESPONSE_START.size:
                        response_correlation_id(bytes(buf[off + 4:end]))  # raises WireError: no answer
                    pending = self.pending.pop(_RESPONSE_START.unpack_from(buf, off)[1], None)
                    if pending is PASSED:
                        off = end
                        continue
                    if start < off and not self.client_gone:
                        self.c_writer.write(bytes(buf[start:off]))
                    data, start = bytes(buf[off:end]), end
                    off = end
                    if pending is not None and not await self._response(pending, data):
                        return
                if start < off and not self.client_gone:
                    self.c_writer.write(bytes(buf[start:off]))
                del buf[:off]
                if not self.client_gone:
                    await self.c_writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            self._close_up()
            if not self.client_gone:  # the broker closed: so does the client's side
                self.client_gone = True
                self._close_client()

    async def _response(self, pending: Pending, data: bytes) -> bool:
        """The answer to a request a rule read, what the rule does to it;
        False when the connection ends with it."""
        proxy = self.proxy
        header, fields, rule = pending.header, pending.fields, pending.rule
        if self.held is not None and header.correlation_id == self.held.header.correlation_id:
            proxy.event("held-answered", rule, self.broker, header, fields, **answer_fields(header, data[4:]))
            proxy.fire(header, fields.transactional_id, data[4:])
            return False
        if rule is not None and rule.action == "drop-response":
            proxy.event("drop-response", rule, self.broker, header, fields)
            proxy.fire(header, fields.transactional_id, data[4:])
            self._close_client()
            return False
        if rule is not None and rule.action == "late-response":
            proxy.event("late-response", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
            asyncio.get_running_loop().call_later(rule.delay_ms / 1000, self._deliver_late, header, fields,
                                                  rule, data)
            return True
        if rule is not None and rule.action == "delay-response":
            proxy.event("delay-response", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
            await asyncio.sleep(rule.delay_ms / 1000)
        proxy.fire(header, fields.transactional_id, data[4:])
        if not self.client_gone:
            self.c_writer.write(data)
            await self.c_writer.drain()
        return True
