"""The protocol proxy in a process of its own (docs/design.md, "Faults
inside Kafka's protocol").

Why a process: the proxy handles every frame of the workload's clients. In a
thread of the harness it shares the GIL with the workers that record the
history, and every frame waits for it: recorded pipelined throughput through
the in-thread proxy was 0.68x direct (docs/benchmarks.md). In a child process
it shares only the cores.

``ProxyProcess`` has ``KafkaProxy``'s interface (``ports``, ``bootstrap``,
``start``, ``arm``, ``heal``, ``stop``). The parent binds the ports (the
brokers advertise them before any proxy runs) and hands the listening sockets
to the child (``pass_fds``). Commands go down the child's stdin; the proxy's
events and the commands' replies come up its stdout; each message is a
pickled tuple after its 4-byte size. The child ends when its stdin closes,
which happens when the harness process ends, a SIGKILL included: no proxy
outlives its run.
"""
from __future__ import annotations

import logging
import os
import pickle
import queue
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any, Callable, Sequence

from nemesis.kafka_proxy import KafkaProxy, bind_ports
from nemesis.proxy_rules import Rule

log = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 15.0
_SIZE = struct.Struct(">I")
_CODE_ROOT = str(Path(__file__).resolve().parents[1])  # the child imports the parent's kchaos


def write_message(stream: IO[bytes], message: tuple) -> None:
    data = pickle.dumps(message)
    stream.write(_SIZE.pack(len(data)) + data)
    stream.flush()


def read_message(stream: IO[bytes]) -> tuple | None:
    """The next message; None at the end of the stream."""
    prefix = stream.read(_SIZE.size)
    if len(prefix) < _SIZE.size:
        return None
    data = stream.read(_SIZE.unpack(prefix)[0])
    return pickle.loads(data)


class ProxyGone(RuntimeError):
    """The proxy process ended or stopped answering."""


class ProxyProcess:
    def __init__(self, brokers: Sequence[str], record: Callable[[dict[str, Any]], None], seed: int,
                 host: str = "127.0.0.1", ports: dict[str, int] | None = None):
        """Binds one port per broker now, as ``KafkaProxy`` does; the child
        starts at ``start``."""
        self.host, self.record, self.seed = host, record, seed
        self._socks = bind_ports(brokers, host, ports)
        self.ports = {name: s.getsockname()[1] for name, s in self._socks.items()}
        self._child: subprocess.Popen | None = None
        self._replies: queue.Queue = queue.Queue()
        self._lock = threading.Lock()  # one command at a time: replies come in order

    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{p}" for p in self.ports.values())

    def start(self, upstreams: dict[str, tuple[str, int]]) -> None:
        fds = {name: s.fileno() for name, s in self._socks.items()}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_CODE_ROOT, os.environ.get("PYTHONPATH")])))
        self._child = subprocess.Popen([sys.executable, "-m", "nemesis.proxy_process"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, pass_fds=list(fds.values()), env=env)
        threading.Thread(target=self._read, args=(self._child.stdout,), name="kafka-proxy-events",
                         daemon=True).start()
        self._call(("start", fds, dict(upstreams), self.seed, self.host))
        for s in self._socks.values():  # the child listens on them now
            s.close()

    def _read(self, stream: IO[bytes]) -> None:
        while (message := read_message(stream)) is not None:
            if message[0] == "event":
                try:
                    self.record(message[1])
                except Exception as exc:  # noqa: BLE001 - recording must not stop the events
                    log.warning("recording proxy event %s failed: %s", message[1].get("event"), exc)
            else:
                self._replies.put(message)
        self._replies.put(("gone",))

    def _call(self, command: tuple) -> Any:
        if self._child is None or self._child.stdin is None:
            raise ProxyGone("the proxy process has not started")
        with self._lock:
            try:
                write_message(self._child.stdin, command)
                reply = self._replies.get(timeout=REPLY_TIMEOUT_S)
            except (OSError, queue.Empty) as exc:
                raise ProxyGone(f"the proxy process did not answer {command[0]!r}: {exc}") from None
        if reply[0] != "reply":
            raise ProxyGone(f"the proxy process ended before answering {command[0]!r}")
        return reply[1]

    def arm(self, rules: list[Rule]) -> None:
        self._call(("arm", rules))

    def heal(self) -> int:
        """As ``KafkaProxy.heal``; 0 when there is no proxy process (nothing held)."""
        if self._child is None or self._child.poll() is not None:
            return 0
        return self._call(("heal",))

    def stop(self) -> None:
        child, self._child = self._child, None
        for s in self._socks.values():
            s.close()
        if child is None:
            return
        try:
            if child.stdin is not None:
                child.stdin.close()  # the child stops its proxy and exits
            child.wait(REPLY_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()


def serve(commands: IO[bytes], replies: IO[bytes]) -> None:
    """The child's side: run a KafkaProxy on the inherited sockets, answer
    the commands, send its events up; stop it when ``commands`` ends."""
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock:
            write_message(replies, message)

    proxy: KafkaProxy | None = None
    try:
        while (command := read_message(commands)) is not None:
            if command[0] == "start":
                _, fds, upstreams, seed, host = command
                socks = {name: socket.socket(fileno=fd) for name, fd in fds.items()}
                proxy = KafkaProxy(list(socks), lambda value: send(("event", value)), seed, host, socks=socks)
                proxy.start(upstreams)
                send(("reply", None))
            elif command[0] == "arm" and proxy is not None:
                proxy.arm(command[1])
                send(("reply", None))
            elif command[0] == "heal" and proxy is not None:
                send(("reply", proxy.heal()))
    finally:
        if proxy is not None:
            proxy.stop()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s kafka-proxy: %(message)s")
    serve(sys.stdin.buffer, sys.stdout.buffer)
