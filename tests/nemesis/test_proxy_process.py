"""The protocol proxy in a process of its own, on loopback against the fake
broker of test_proxy_loopback: frames pass, a rule's events come up to the
parent's record, heal counts what was held, and the child ends with its
parent (a SIGKILLed harness leaves no proxy)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from nemesis.proxy_process import ProxyProcess
from nemesis.proxy_rules import parse_rules
from nemesis.proxy_wire import frame
from tests.nemesis.test_proxy_loopback import FakeBroker, answer, header, wait_for


@pytest.fixture()
def broker():
    b = FakeBroker()
    threading.Thread(target=b.serve_forever, daemon=True).start()
    yield b
    b.shutdown()
    b.server_close()


def send(port: int, api: str, corr: int):
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(frame(header(api, 1, corr, "kchaos-p1", False)))
    return s


def test_frames_pass_events_come_up_and_heal_counts(broker):
    events: list[dict] = []
    proxy = ProxyProcess(["n1"], events.append, seed=1)
    try:
        proxy.start({"n1": broker.server_address})
        port = proxy.ports["n1"]
        s = send(port, "Metadata", 5)
        assert answer(s) == 5
        proxy.arm(parse_rules([{"api": "Heartbeat", "action": "close"},
                               {"api": "Metadata", "action": "hold", "max_hold_ms": 60000}]))
        assert answer(send(port, "Heartbeat", 6)) is None           # closed before forwarding
        send(port, "Metadata", 7)
        wait_for(lambda: [e["event"] for e in events] == ["close", "hold"])
        assert events[0]["correlation_id"] == 6 and events[0]["rule"] == "rule-1"
        assert proxy.heal() == 1
        wait_for(lambda: events[-1]["event"] == "discard")
        assert answer(send(port, "Heartbeat", 8)) == 8               # healed: everything passes
    finally:
        proxy.stop()
    assert proxy.heal() == 0


def test_the_proxy_process_ends_with_its_parent(broker, tmp_path):
    """A parent SIGKILLed with its proxy running: the proxy's stdin closes and it exits."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.getcwd()!r})
        from nemesis.proxy_process import ProxyProcess
        p = ProxyProcess(["n1"], lambda v: None, seed=1)
        p.start({{"n1": {tuple(broker.server_address)!r}}})
        print(p._child.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # running
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{child}/stat") as f:   # a zombie (reparented, not yet reaped) has ended too
                return f.read().split()[2] == "Z"
        except FileNotFoundError:
            return True
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()
