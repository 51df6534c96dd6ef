"""A Kafka wire-protocol proxy for the workload's client traffic
(docs/design.md, "Faults inside Kafka's protocol").

One listening port per broker on 127.0.0.1; each broker advertises its
proxy on an extra listener (broker.config, ``PROXY_PORT``), so a client that
bootstraps through a proxy reaches every broker through its proxy. Inter-broker
and controller traffic never passes here, nor the harness's own clients
(sampler, admin, drain). It runs on an asyncio loop in a thread of the
process that starts it: a run's proxy process (nemesis.proxy_process, which
ends with the harness), or ``kchaos nemesis proxy``. It ends with that
process, SIGKILL included, and leaves nothing behind.

Each client connection gets one upstream connection (nemesis.proxy_connection,
which forwards the frames and acts on them; this module listens, runs the
loop, and keeps what connections share: the armed rules, the held requests
and their release events). Frames no armed rule reads pass through unread
but for their size, API key and correlation id. What an armed rule does (nemesis.proxy_rules) is reported through
``record`` as one value per event, which the runner appends to the history
as a nemesis op (``proxy_event_op``).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Any, Callable, Sequence

from nemesis.proxy_connection import Held, ProxyConnection
from nemesis.proxy_rules import HOLD_EVENTS, Rule, RuleSet
from nemesis.proxy_wire import RequestFields, RequestHeader, produce_refused

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


def bind_ports(brokers: Sequence[str], host: str, ports: dict[str, int] | None = None) -> dict[str, socket.socket]:
    """A listening socket per broker, bound now: on any free port, or on
    ``ports[broker]`` (the ports a running cluster already advertises)."""
    socks: dict[str, socket.socket] = {}
    for name in brokers:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, (ports or {}).get(name, 0)))
        socks[name] = s
    return socks


class KafkaProxy:
    def __init__(self, brokers: Sequence[str], record: Callable[[dict[str, Any]], None], seed: int,
                 host: str = "127.0.0.1", ports: dict[str, int] | None = None,
                 socks: dict[str, socket.socket] | None = None):
        """Binds one port per broker now (``bind_ports``), unless given the
        bound sockets (``socks``: a proxy process gets them from its parent,
        nemesis.proxy_process)."""
        self.host, self.record, self.seed = host, record, seed
        self._socks = socks if socks is not None else bind_ports(brokers, host, ports)
        self.ports = {name: s.getsockname()[1] for name, s in self._socks.items()}
        self.upstreams: dict[str, tuple[str, int]] = {}
        self.ruleset: RuleSet | None = None
        self.armed_at = 0.0
        self.waiters: dict[tuple[str, str], list[Held]] = {}
        self.held: set[Held] = set()
        self.held_txn: set[str] = set()
        self.writers: set[asyncio.StreamWriter] = set()
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
            held = list(self.held)
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
            for w in list(self.writers):
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

    # -- the loop: what connections share (nemesis.proxy_connection) -----------------
    def hold_started(self, held: Held) -> None:
        """Count ``held`` as held (for heal, and one per transaction), waiting for its event."""
        txn = held.fields.transactional_id
        self.held.add(held)
        if txn is not None:
            self.held_txn.add(txn)
        if held.rule.until is not None and txn is not None:
            self.waiters.setdefault((held.rule.until, txn), []).append(held)

    def hold_ended(self, held: Held) -> None:
        self.held.discard(held)
        self.held_txn.discard(held.fields.transactional_id)

    def event(self, event: str, rule: Rule | None, broker: str, header: RequestHeader,
              fields: RequestFields, **extra: Any) -> None:
        """Report one thing a rule did (or met) through ``record``."""
        value: dict[str, Any] = {"event": event, "nodes": [broker], "api": header.api,
                                 "api_version": header.api_version, "correlation_id": header.correlation_id,
                                 "client_id": header.client_id, **fields.as_value(), **extra}
        if rule is not None:
            value["rule"] = rule.name
        try:
            self.record(value)
        except Exception as exc:  # noqa: BLE001 - recording must not break the traffic
            log.warning("recording proxy event %s failed: %s", event, exc)

    def fire(self, header: RequestHeader, txn_id: str | None, answer: bytes) -> None:
        """Release the holds waiting for this answered request's event. A
        Produce refused on every partition is no ``next-produce``: the next
        transaction has not written. With transactions v2 the leader adds
        the partition itself, and a first Produce sent while the coordinator
        still writes the previous transaction's markers is answered
        CONCURRENT_TRANSACTIONS; released on that answer, the held EndTxn
        met the previous transaction still completing, not the next one
        (docs/design.md, "Faults inside Kafka's protocol")."""
        event = EVENT_OF_API.get(header.api)
        if event is None or txn_id is None or (event, txn_id) not in self.waiters:
            return
        if header.api == "Produce" and produce_refused(answer, header.api_version):
            return
        for held in self.waiters.pop((event, txn_id), []):
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
                self.writers.add(w)
            await ProxyConnection(self, broker, c_reader, c_writer, u_reader, u_writer).run()
        except asyncio.CancelledError:
            # stop() cancels every connection: end quietly (asyncio logs a
            # client callback that ends cancelled as an error).
            c_writer.close()


async def _as_coro(fn: Callable[[], Any]) -> Any:
    return fn()


