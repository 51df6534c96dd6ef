"""The node-side delayer of the iptables path of ``nemesis.netem``: holds each
packet an NFQUEUE rule hands it for delay ± jitter, then lets it go.

Runs on the node with nothing but python3-minimal (no kchaos import, no
libnetfilter_queue, no ctypes): it speaks nfnetlink_queue over a raw
``AF_NETLINK``/``NETLINK_NETFILTER`` socket. It binds one queue in
copy-meta mode (packet ids only, never payloads), takes GSO packets whole,
and answers each packet with an ACCEPT verdict when its time comes:

* a ``reorder_pct`` share (drawn per packet) goes at once, as netem sends
  its reordered packets ahead of the delayed ones;
* the rest wait delay + uniform(-jitter, +jitter) ms (netem's default
  distribution); packets held for different times leave out of order;
* at most ``max_held`` packets wait; one more is dropped (a full link
  buffer). The kernel queue is bounded alike (``NFQA_CFG_QUEUE_MAXLEN``).

On SIGTERM/SIGINT it lets every held packet go, then exits. Its pid goes to
``--pid-file`` once the queue is bound (the harness waits for it); counters
(seen, delayed, sent at once, dropped when full, lost by the socket) go to
``--stats-file`` about once a second and at exit. Loss is not its business:
iptables drops those packets before the queue.
"""
from __future__ import annotations

import argparse
import errno
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_GSO = 4
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NF_DROP, NF_ACCEPT = 0, 1
NLA_TYPE_MASK = 0x3FFF


# -- messages (pure) ---------------------------------------------------------------
def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * (-len(payload) % 4)


def message(msg: int, queue: int, attrs: bytes, seq: int = 0, flags: int = NLM_F_REQUEST) -> bytes:
    """An nfnetlink_queue message: nlmsghdr, nfgenmsg (AF_UNSPEC, version 0,
    queue number big-endian), attributes."""
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def config_messages(queue: int, maxlen: int) -> list[bytes]:
    """Bind the queue, copy metadata only, bound its length, take GSO packets whole."""
    return [
        message(NFQNL_MSG_CONFIG, queue, attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0,
                                                                         socket.htons(socket.AF_INET))),
                seq=1, flags=NLM_F_REQUEST | NLM_F_ACK),
        message(NFQNL_MSG_CONFIG, queue, attr(NFQA_CFG_PARAMS, struct.pack(">IB", 0, NFQNL_COPY_META)),
                seq=2, flags=NLM_F_REQUEST | NLM_F_ACK),
        message(NFQNL_MSG_CONFIG, queue, attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", maxlen)),
                seq=3, flags=NLM_F_REQUEST | NLM_F_ACK),
        message(NFQNL_MSG_CONFIG, queue, attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_GSO))
                + attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_GSO)),
                seq=4, flags=NLM_F_REQUEST | NLM_F_ACK),
    ]


def verdict(queue: int, packet_id: int, accept: bool = True) -> bytes:
    return message(NFQNL_MSG_VERDICT, queue,
                   attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT if accept else NF_DROP, packet_id)))


def parse(data: bytes) -> tuple[list[int], list[tuple[int, int]]]:
    """The packet ids and the (seq, errno) of error/ack messages in one read."""
    ids: list[int] = []
    errors: list[tuple[int, int]] = []
    off = 0
    while off + 16 <= len(data):
        length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
        if length < 16:
            break
        if kind == NLMSG_ERROR and length >= 20:
            errors.append((seq, -struct.unpack_from("=i", data, off + 16)[0]))
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = off + 20  # past nlmsghdr and nfgenmsg
            while a + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if atype & NLA_TYPE_MASK == NFQA_PACKET_HDR and alen >= 8:
                    ids.append(struct.unpack_from(">I", data, a + 4)[0])
                    break
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
    return ids, errors


def hold_s(rng: random.Random, delay_ms: float, jitter_ms: float, reorder_pct: float) -> float:
    """How long one packet waits, in seconds: 0 for the reordered share."""
    if reorder_pct and rng.random() * 100 < reorder_pct:
        return 0.0
    return max(0.0, delay_ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0.0)) / 1000.0


# -- the loop ----------------------------------------------------------------------
class Delayer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.rng = random.Random(args.seed)
        self.held: list[tuple[float, int, int]] = []  # (due, seq, packet id)
        self.n = 0
        self.stats = {"seen": 0, "delayed": 0, "at_once": 0, "dropped_full": 0, "lost_by_socket": 0}
        self.stop = False
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind((0, 0))

    def send(self, data: bytes) -> None:
        self.sock.sendto(data, (0, 0))

    def bind(self) -> None:
        for msg in config_messages(self.a.queue, self.a.max_held):
            self.send(msg)
            seq = struct.unpack_from("=I", msg, 8)[0]
            deadline = time.monotonic() + 5
            while True:
                if not select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise OSError(errno.ETIMEDOUT, "no answer from nfnetlink_queue")
                _, errors = parse(self.sock.recv(65536))
                code = next((e for s, e in errors if s == seq), None)
                if code is not None:
                    if code:
                        raise OSError(code, f"nfnetlink_queue refused config {seq}: {os.strerror(code)}")
                    break

    def release(self, packet_id: int, accept: bool = True) -> None:
        try:
            self.send(verdict(self.a.queue, packet_id, accept))
        except OSError:
            pass  # the packet is gone (queue flushed): nothing to release

    def take(self, packet_id: int, now: float) -> None:
        self.stats["seen"] += 1
        wait = hold_s(self.rng, self.a.delay_ms, self.a.jitter_ms, self.a.reorder_pct)
        if wait <= 0:
            self.stats["at_once"] += 1
            self.release(packet_id)
        elif len(self.held) >= self.a.max_held:
            self.stats["dropped_full"] += 1
            self.release(packet_id, accept=False)
        else:
            self.stats["delayed"] += 1
            self.n += 1
            heapq.heappush(self.held, (now + wait, self.n, packet_id))

    def write_stats(self) -> None:
        if self.a.stats_file:
            tmp = self.a.stats_file + ".tmp"
            with open(tmp, "w") as f:  # JSON by hand: python3-minimal has no json module
                f.write("{" + ", ".join(f'"{k}": {v}' for k, v in {**self.stats, "held": len(self.held)}.items())
                        + "}\n")
            os.replace(tmp, self.a.stats_file)

    def run(self) -> None:
        self.sock.setblocking(False)
        next_stats = 0.0
        while not self.stop:
            now = time.monotonic()
            while self.held and self.held[0][0] <= now:
                self.release(heapq.heappop(self.held)[2])
            if now >= next_stats:
                self.write_stats()
                next_stats = now + 1.0
            timeout = min(1.0, max(0.0, self.held[0][0] - now)) if self.held else 1.0
            try:
                ready = select.select([self.sock], [], [], timeout)[0]
            except InterruptedError:
                continue
            for _ in range(256 if ready else 0):
                try:
                    data = self.sock.recv(65536)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno == errno.ENOBUFS:  # the kernel dropped what did not fit
                        self.stats["lost_by_socket"] += 1
                        continue
                    raise
                now = time.monotonic()
                for packet_id in parse(data)[0]:
                    self.take(packet_id, now)
        while self.held:
            self.release(heapq.heappop(self.held)[2])
        self.write_stats()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kchaos-netem-delayer", description=__doc__.split("\n\n")[0])
    p.add_argument("--queue", type=int, required=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--reorder-pct", type=float, default=0.0)
    p.add_argument("--max-held", type=int, default=10000)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--pid-file", default=None)
    p.add_argument("--stats-file", default=None)
    args = p.parse_args(argv)
    try:
        d = Delayer(args)
        d.bind()
    except OSError as exc:
        print(f"kchaos-netem-delayer: cannot bind queue {args.queue}: {exc}", file=sys.stderr)
        return 1

    def stop(*_: object) -> None:
        d.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.pid_file:
        with open(args.pid_file, "w") as f:
            f.write(f"{os.getpid()}\n")
    d.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
