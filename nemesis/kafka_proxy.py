"""A Kafka wire-protocol proxy for the workload's client traffic
(docs/design.md, "Faults inside Kafka's protocol").

One listening port per broker on 127.0.0.1; each broker advertises its
proxy on an extra listener (broker.config, ``PROXY_PORT``), so a client that
bootstraps through a proxy reaches every broker through its proxy. Inter-broker
and controller traffic never passes here, nor the harness's own clients
(sampler, admin, drain). It runs on an asyncio loop in a thread of the
harness process: it ends with the process, SIGKILL included, and leaves
nothing behind.

Each client connection gets one upstream connection; requests go up in the
order they came, responses down in the order they came (Kafka answers a
connection's requests in order), so pipelining and ordering per connection
hold. With no rule armed frames pass through unread except for their size
and header. What an armed rule does (nemesis.proxy_rules) is reported through
``record`` as one value per event, which the runner appends to the history
as a nemesis op (``proxy_event_op``).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from nemesis.proxy_rules import HOLD_EVENTS, Rule, RuleSet
from nemesis.proxy_wire import (TRANSACTIONAL_APIS, RequestFields, RequestHeader, WireError, decode_request,
                                endtxn_response_error, error_response, frame_size, parse_request_header,
                                produce_refused, produce_response_partitions, response_correlation_id)

log = logging.getLogger(__name__)

FAULT = "proxy"
# The process of proxy events: not "nemesis", whose invokes and completions
# pair (history.ops) and must not have events of another thread between them.
PROCESS = "proxy"
EVENT_OF_API = {api: event for event, api in HOLD_EVENTS.items()}
UPSTREAM_CONNECT_S = 10.0  # a broker that does not accept by then is down: the client's connection is closed


def proxy_event_op(value: dict[str, Any]) -> dict[str, Any]:
    """The history op of one proxy event: a nemesis event standing alone
    (history.ops), ``f`` "proxy-<event>", bookkeeping (no fault interval of
    its own: the arm and heal ops bound the rules' time in effect)."""
    return {"process": PROCESS, "type": "info", "f": f"proxy-{value['event']}",
            "value": {"fault": FAULT, "action": None, **value}}


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


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        prefix = await reader.readexactly(4)
        return prefix + await reader.readexactly(frame_size(prefix))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def free_ports(brokers: Sequence[str], host: str = "127.0.0.1") -> dict[str, int]:
    """A free port per broker, for a cluster left up to advertise before any
    proxy runs (``kchaos cluster up``; ``kchaos nemesis proxy`` binds them)."""
    socks = []
    try:
        for _ in brokers:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return {name: s.getsockname()[1] for name, s in zip(brokers, socks)}
    finally:
        for s in socks:
            s.close()


class KafkaProxy:
    def __init__(self, brokers: Sequence[str], record: Callable[[dict[str, Any]], None], seed: int,
                 host: str = "127.0.0.1", ports: dict[str, int] | None = None):
        """Binds one port per broker now: any free one, or ``ports[broker]``
        (the ports a running cluster already advertises)."""
        self.host, self.record, self.seed = host, record, seed
        self._socks: dict[str, socket.socket] = {}
        for name in brokers:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, (ports or {}).get(name, 0)))
            self._socks[name] = s
        self.ports = {name: s.getsockname()[1] for name, s in self._socks.items()}
        self.upstreams: dict[str, tuple[str, int]] = {}
        self.ruleset: RuleSet | None = None
        self.armed_at = 0.0
        self._waiters: dict[tuple[str, str], list[Held]] = {}
        self._held: set[Held] = set()
        self._held_txn: set[str] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._servers: list[asyncio.base_events.Server] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.ports.values())

    # -- control, from any thread -------------------------------------------------
    def start(self, upstreams: dict[str, tuple[str, int]]) -> None:
        self.upstreams = dict(upstreams)
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="kafka-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve() -> None:
            for name, sock in self._socks.items():
                self._servers.append(
                    await asyncio.start_server(lambda r, w, n=name: self._client(n, r, w), sock=sock))
            ready.set()

        self._loop.run_until_complete(serve())
        self._loop.run_forever()
        self._loop.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        if self._loop is None:
            return fn()
        return asyncio.run_coroutine_threadsafe(_as_coro(fn), self._loop).result(10)

    def arm(self, rules: list[Rule]) -> None:
        def do() -> None:
            self.ruleset = RuleSet(rules, self.seed)
            self.armed_at = time.monotonic()
        self._call(do)

    def heal(self) -> int:
        """Pass everything through: disarm, and drop the held requests unsent
        (a healed network loses what it still held). Returns how many."""
        def do() -> int:
            self.ruleset = None
            held = list(self._held)
            for h in held:
                if not h.released.done():
                    h.released.set_result("healed")
            return len(held)
        return self._call(do)

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        async def close_all() -> None:
            for server in self._servers:
                server.close()
            for w in list(self._writers):
                w.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()
        asyncio.run_coroutine_threadsafe(close_all(), loop)
        if self._thread is not None:
            self._thread.join(10)
        for s in self._socks.values():
            s.close()
        self._loop = None

    # -- the loop ---------------------------------------------------------------
    def _event(self, event: str, rule: Rule | None, broker: str, header: RequestHeader,
               fields: RequestFields, **extra: Any) -> None:
        value: dict[str, Any] = {"event": event, "nodes": [broker], "api": header.api,
                                 "api_version": header.api_version, "correlation_id": header.correlation_id,
                                 "client_id": header.client_id, **fields.as_value(), **extra}
        if rule is not None:
            value["rule"] = rule.name
        try:
            self.record(value)
        except Exception as exc:  # noqa: BLE001 - recording must not break the traffic
            log.warning("recording proxy event %s failed: %s", event, exc)

    def _fire(self, header: RequestHeader, txn_id: str | None, answer: bytes) -> None:
        """Release the holds waiting for this answered request's event. A
        Produce refused on every partition is no ``next-produce``: the next
        transaction has not written. With transactions v2 the leader adds
        the partition itself, and a first Produce sent while the coordinator
        still writes the previous transaction's markers is answered
        CONCURRENT_TRANSACTIONS; released on that answer, the held EndTxn
        met the previous transaction still completing, not the next one
        (docs/design.md, "Faults inside Kafka's protocol")."""
        event = EVENT_OF_API.get(header.api)
        if event is None or txn_id is None or (event, txn_id) not in self._waiters:
            return
        if header.api == "Produce" and produce_refused(answer, header.api_version):
            return
        for held in self._waiters.pop((event, txn_id), []):
            if not held.released.done():
                held.released.set_result(event)

    async def _client(self, broker: str, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        host, port = self.upstreams[broker]
        try:
            try:
                u_reader, u_writer = await asyncio.wait_for(asyncio.open_connection(host, port), UPSTREAM_CONNECT_S)
            except (OSError, asyncio.TimeoutError) as exc:
                log.debug("proxy %s: upstream %s:%d unreachable: %s", broker, host, port, exc)
                c_writer.close()
                return
            for w in (c_writer, u_writer):
                w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._writers.add(w)
            await _Connection(self, broker, c_reader, c_writer, u_reader, u_writer).run()
        except asyncio.CancelledError:
            # stop() cancels every connection: end quietly (asyncio logs a
            # client callback that ends cancelled as an error).
            c_writer.close()


def answer_fields(header: RequestHeader, payload: bytes) -> dict[str, Any]:
    """What a released request's answer says: EndTxn's error code, a
    Produce's [partition, error code, base offset] per partition."""
    if header.api == "EndTxn":
        return {"error_code": endtxn_response_error(payload, header.api_version)}
    if header.api == "Produce":
        return {"answer": produce_response_partitions(payload, header.api_version)}
    return {}


async def _as_coro(fn: Callable[[], Any]) -> Any:
    return fn()


class _Connection:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: KafkaProxy, broker: str, c_reader, c_writer, u_reader, u_writer):
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
        self.proxy._writers.discard(self.c_writer)

    def _close_up(self) -> None:
        self.u_writer.close()
        self.proxy._writers.discard(self.u_writer)

    async def _requests(self) -> None:
        proxy = self.proxy
        while True:
            data = await read_frame(self.c_reader)
            if data is None:
                return
            try:
                header = parse_request_header(data[4:])
            except WireError:
                header = RequestHeader(-1, -1, -1, None)
            rules = proxy.ruleset
            fields = (decode_request(header, data[4:])
                      if rules is not None and header.api in TRANSACTIONAL_APIS else RequestFields())
            rule = (rules.decide(self.broker, header, fields, time.monotonic() - proxy.armed_at)
                    if rules is not None else None)
            if rule is not None and rule.action == "hold" and fields.transactional_id in proxy._held_txn:
                rule = None  # one held request per transaction at a time
            if rule is None:
                pass
            elif rule.action == "delay-request":
                proxy._event("delay-request", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
                await asyncio.sleep(rule.delay_ms / 1000)
            elif rule.action == "error-response":
                await self._answer_error(header, fields, rule)
                continue
            elif rule.action == "close":
                proxy._event("close", rule, self.broker, header, fields)
                return
            elif rule.action == "hold":
                await self._hold(Held(header, fields, rule, self.broker, time.monotonic()), data)
                return
            self.pending[header.correlation_id] = Pending(header, fields, rule)
            self.u_writer.write(data)
            await self.u_writer.drain()

    async def _answer_error(self, header: RequestHeader, fields: RequestFields, rule: Rule) -> None:
        """Refuse the request in the broker's place, after the answers to the
        requests before it (a connection's answers come in order); the
        requests after it wait meanwhile."""
        while self.pending and not self.client_gone:
            await asyncio.sleep(0.005)
        self.proxy._event("error-response", rule, self.broker, header, fields, error_code=rule.error_code)
        self.c_writer.write(error_response(header, rule.error_code))
        await self.c_writer.drain()

    async def _hold(self, held: Held, data: bytes) -> None:
        """Take ``data`` off the connection: close the client's side now, send
        the request up when its release comes, read its answer, close."""
        proxy, rule, txn = self.proxy, held.rule, held.fields.transactional_id
        self.held = held
        proxy._held.add(held)
        if txn is not None:
            proxy._held_txn.add(txn)
        if rule.until is not None and txn is not None:
            proxy._waiters.setdefault((rule.until, txn), []).append(held)
        proxy._event("hold", rule, self.broker, held.header, held.fields, until=rule.until,
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
                proxy._event("discard", rule, held.broker, held.header, held.fields, held_ms=held_ms)
                return
            self.pending[held.header.correlation_id] = Pending(held.header, held.fields, rule)
            proxy._event("release", rule, held.broker, held.header, held.fields, released_by=why, held_ms=held_ms)
            self.u_writer.write(data)
            await self.u_writer.drain()
        except (ConnectionError, OSError) as exc:
            proxy._event("release-failed", rule, held.broker, held.header, held.fields, error=str(exc))
        finally:
            proxy._held.discard(held)
            proxy._held_txn.discard(held.fields.transactional_id)
            if why == "healed":
                self._close_up()

    def _deliver_late(self, header: RequestHeader, fields: RequestFields, rule: Rule, data: bytes) -> None:
        """A late response's delivery, after the responses that passed it; to
        nobody when the client has gone (it timed the request out)."""
        delivered = not self.client_gone and not self.c_writer.is_closing()
        self.proxy._event("late-delivered", rule, self.broker, header, fields, delivered=delivered,
                          **answer_fields(header, data[4:]))
        self.proxy._fire(header, fields.transactional_id, data[4:])
        if delivered:
            self.c_writer.write(data)  # drained by the next response's write

    async def _responses(self) -> None:
        proxy = self.proxy
        try:
            while True:
                data = await read_frame(self.u_reader)
                if data is None:
                    return
                pending = self.pending.pop(response_correlation_id(data[4:]), None)
                if pending is None:
                    continue
                header, fields, rule = pending.header, pending.fields, pending.rule
                if self.held is not None and header.correlation_id == self.held.header.correlation_id:
                    proxy._event("held-answered", rule, self.broker, header, fields, **answer_fields(header, data[4:]))
                    proxy._fire(header, fields.transactional_id, data[4:])
                    return
                if rule is not None and rule.action == "drop-response":
                    proxy._event("drop-response", rule, self.broker, header, fields)
                    proxy._fire(header, fields.transactional_id, data[4:])
                    self._close_client()
                    return
                if rule is not None and rule.action == "late-response":
                    proxy._event("late-response", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
                    asyncio.get_running_loop().call_later(rule.delay_ms / 1000, self._deliver_late, header, fields,
                                                          rule, data)
                    continue
                if rule is not None and rule.action == "delay-response":
                    proxy._event("delay-response", rule, self.broker, header, fields, delay_ms=rule.delay_ms)
                    await asyncio.sleep(rule.delay_ms / 1000)
                proxy._fire(header, fields.transactional_id, data[4:])
                if not self.client_gone:
                    self.c_writer.write(data)
                    await self.c_writer.drain()
        except (ConnectionError, OSError):
            return
        finally:
            self._close_up()
            if not self.client_gone:  # the broker closed: so does the client's side
                self.client_gone = True
                self._close_client()
