"""The proxy between a socket client and a fake broker on loopback: frames
pass in order, and hold, drop-response and close do what they say (no Kafka:
the fake broker answers every request with its correlation id and error 0)."""
from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

import pytest

from nemesis.kafka_proxy import KafkaProxy
from nemesis.proxy_rules import parse_rules
from nemesis.proxy_wire import frame, parse_request_header
from tests.nemesis.test_proxy_rules import endtxn, header, produce_v7


class FakeBroker(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.seen: list[tuple[str, int]] = []
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            prefix = recv_exact(self.request, 4)
            if prefix is None:
                return
            payload = recv_exact(self.request, struct.unpack(">i", prefix)[0])
            h = parse_request_header(payload)
            self.server.seen.append((h.api, h.correlation_id))
            self.request.sendall(frame(struct.pack(">iih", h.correlation_id, 0, 0)))


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


@pytest.fixture()
def setup():
    broker = FakeBroker()
    threading.Thread(target=broker.serve_forever, daemon=True).start()
    events: list[dict] = []
    proxy = KafkaProxy(["n1"], events.append, seed=1)
    proxy.start({"n1": broker.server_address})
    yield proxy, broker, events
    proxy.stop()
    broker.shutdown()
    broker.server_close()


def connect(proxy: KafkaProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy.ports["n1"]), timeout=5)
    return s


def answer(s: socket.socket) -> int | None:
    prefix = recv_exact(s, 4)
    if prefix is None:
        return None
    return struct.unpack(">i", recv_exact(s, struct.unpack(">i", prefix)[0])[:4])[0]


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not cond():
        time.sleep(0.02)
    assert cond()


def test_pipelined_frames_pass_in_order(setup):
    proxy, broker, _ = setup
    s = connect(proxy)
    s.sendall(b"".join(frame(header("Metadata", 1, corr, "c", False)) for corr in (5, 6, 7)))
    assert [answer(s) for _ in range(3)] == [5, 6, 7]
    assert broker.seen == [("Metadata", 5), ("Metadata", 6), ("Metadata", 7)]


def test_hold_endtxn_until_next_produce(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "EndTxn", "action": "hold", "until": "next-produce", "max_hold_ms": 5000}]))
    a = connect(proxy)
    a.sendall(frame(endtxn(1, "t1", committed=True, corr=3)))
    assert answer(a) is None  # the client's connection is closed, nothing answered
    time.sleep(0.2)
    assert broker.seen == []  # held
    b = connect(proxy)
    b.sendall(frame(produce_v7("t1", 0)))
    assert answer(b) == 11
    wait_for(lambda: ("EndTxn", 3) in broker.seen)
    assert broker.seen == [("Produce", 11), ("EndTxn", 3)]
    wait_for(lambda: any(e["event"] == "held-answered" for e in events))
    kinds = [e["event"] for e in events]
    assert kinds == ["hold", "release", "held-answered"]
    release = events[1]
    assert release["released_by"] == "next-produce" and release["transactional_id"] == "t1"
    assert release["committed"] is True and release["nodes"] == ["n1"]


def test_drop_response_and_close(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "EndTxn", "action": "drop-response", "committed": True},
                           {"api": "EndTxn", "action": "close", "committed": False}]))
    a = connect(proxy)
    a.sendall(frame(endtxn(1, "t1", committed=True, corr=8)))
    assert answer(a) is None
    wait_for(lambda: ("EndTxn", 8) in broker.seen)  # applied, never heard
    b = connect(proxy)
    b.sendall(frame(endtxn(1, "t1", committed=False, corr=9)))
    assert answer(b) is None
    time.sleep(0.2)
    assert ("EndTxn", 9) not in broker.seen  # never applied
    assert [e["event"] for e in events] == ["drop-response", "close"]


def test_heal_drops_held_requests(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "EndTxn", "action": "hold", "until": "txn-end"}]))
    a = connect(proxy)
    a.sendall(frame(endtxn(1, "t1", committed=True, corr=4)))
    assert answer(a) is None
    wait_for(lambda: events and events[0]["event"] == "hold")
    assert proxy.heal() == 1
    wait_for(lambda: [e["event"] for e in events] == ["hold", "discard"])
    c = connect(proxy)
    c.sendall(frame(endtxn(1, "t1", committed=True, corr=5)))
    assert answer(c) == 5  # healed: passes through
    assert broker.seen == [("EndTxn", 5)]


def test_late_response_is_passed_by_later_ones(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "Metadata", "action": "late-response", "delay_ms": 300, "nth": 1}]))
    s = connect(proxy)
    s.sendall(b"".join(frame(header("Metadata", 1, corr, "c", False)) for corr in (5, 6, 7)))
    assert [answer(s) for _ in range(3)] == [6, 7, 5]  # 5 applied at once, heard last
    assert broker.seen == [("Metadata", 5), ("Metadata", 6), ("Metadata", 7)]
    wait_for(lambda: [e["event"] for e in events] == ["late-response", "late-delivered"])
    assert events[1]["delivered"] is True and events[1]["correlation_id"] == 5


def test_late_response_to_a_closed_client_goes_nowhere(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "Metadata", "action": "late-response", "delay_ms": 300}]))
    s = connect(proxy)
    s.sendall(frame(header("Metadata", 1, 5, "c", False)))
    wait_for(lambda: events and events[0]["event"] == "late-response")
    s.close()
    wait_for(lambda: len(events) == 2)
    assert events[1]["event"] == "late-delivered" and events[1]["delivered"] is False


def test_error_response_answers_in_the_brokers_place(setup):
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "EndTxn", "action": "error-response", "error": "COORDINATOR_LOAD_IN_PROGRESS"}]))
    s = connect(proxy)
    s.sendall(frame(header("Metadata", 1, 5, "c", False)) + frame(endtxn(1, "t1", committed=True, corr=6))
              + frame(header("Metadata", 1, 7, "c", False)))
    answers = []
    for _ in range(3):
        payload = recv_exact(s, struct.unpack(">i", recv_exact(s, 4))[0])
        answers.append(struct.unpack(">ih", payload[:4] + payload[8:10]))
    assert answers == [(5, 0), (6, 14), (7, 0)]  # in order; the EndTxn refused with error 14
    assert broker.seen == [("Metadata", 5), ("Metadata", 7)]  # never forwarded
    assert [e["event"] for e in events] == ["error-response"] and events[0]["error_code"] == 14


def test_frames_a_rule_reads_are_handled_in_their_place_among_those_that_only_pass(setup):
    """Frames sent together: those no rule reads pass a read at a time, the
    ones a rule reads are delayed or closed where they stand in the stream."""
    proxy, broker, events = setup
    proxy.arm(parse_rules([{"api": "Heartbeat", "action": "delay-request", "delay_ms": 100},
                           {"api": "SyncGroup", "action": "close"}]))
    s = connect(proxy)
    s.sendall(b"".join(frame(header(api, 1, corr, "c", False))
                       for api, corr in [("Metadata", 1), ("Heartbeat", 2), ("Metadata", 3)]))
    assert [answer(s) for _ in range(3)] == [1, 2, 3]
    assert broker.seen == [("Metadata", 1), ("Heartbeat", 2), ("Metadata", 3)]
    t = connect(proxy)
    t.sendall(b"".join(frame(header(api, 1, corr, "c", False))
                       for api, corr in [("Metadata", 6), ("SyncGroup", 7), ("Metadata", 8)]))
    wait_for(lambda: len(events) == 2)
    time.sleep(0.2)
    assert ("SyncGroup", 7) not in broker.seen and ("Metadata", 8) not in broker.seen  # closed at 7
    assert [(e["event"], e["correlation_id"]) for e in events] == [("delay-request", 2), ("close", 7)]
