"""Polling and probing helpers for the nemesis tests."""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 1.0, stable: int = 1,
             show: Callable[[], Any] | None = None) -> Any:
    """Poll ``pred`` until it returns something truthy ``stable`` times in a row;
    on timeout, the error shows ``show()`` (the state that did not change)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    streak = 0
    while True:
        try:
            last = pred()
        except Exception as exc:  # metadata requests fail while brokers are down
            last = exc
            streak = 0
        else:
            streak = streak + 1 if last else 0
            if streak >= stable:
                return last
        if time.monotonic() > deadline:
            state = ""
            if show is not None:
                try:
                    state = f"; state: {show()!r}"
                except Exception as exc:
                    state = f"; state unavailable: {exc}"
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{state}")
        time.sleep(interval)


def probe(node, address: str, port: int = 9092) -> bool:
    """Whether ``node`` can open a TCP connection to address:port."""
    return node.run(["nc", "-z", "-w2", address, str(port)], check=False, timeout=15).exit == 0


def host_connects(address: str, port: int = 9092) -> bool:
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


class Traffic:
    """A background producer (a few dozen acks=all sends per second) so that
    leaders see follower lag and shrink the ISR the way a workload would."""

    def __init__(self, bootstrap: str, topic: str, rate_hz: float = 20.0):
        from confluent_kafka import Producer
        self.topic = topic
        self.period = 1.0 / rate_hz
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "message.timeout.ms": 10000, "log_level": 0})
        self.stop = threading.Event()
        self.acked = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _ack(self, err, msg) -> None:
        if err is None:
            self.acked += 1

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, str(i).encode(), on_delivery=self._ack)
            except BufferError:
                pass
            self.producer.poll(0)
            i += 1
            self.stop.wait(self.period)

    def __enter__(self) -> "Traffic":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        self.producer.flush(5)
