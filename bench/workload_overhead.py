"""How much does recording cost? Raw confluent-kafka produce vs. kchaos's recorded send.

Brings up a 3-node cluster ("bench-wl", destroyed at the end, also on Ctrl-C),
creates a topic (RF 3, 3 partitions), then measures acknowledged messages per
second for the same message size and concurrency two ways:

* raw: T threads, each with its own Producer (acks=all, idempotent,
  linger.ms=1 like the workload's defaults), producing a batch of B messages
  to explicit partitions and flushing, again and again;
* recorded: T threads, each a QueueClient doing the same batches as ``send``
  ops, every invocation and completion appended to one real HistoryWriter.

The two alternate in rounds (raw, recorded, raw, recorded, ...) so that load
from anything else on the machine hits both alike.

    .venv/bin/python bench/workload_overhead.py [--seconds 20] [--threads 4]
        [--batch 1] [--message-bytes 100] [--rounds 5]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from harness.cluster import cluster_down, cluster_up  # noqa: E402
from harness.history import HistoryWriter  # noqa: E402
from workloads import ClientContext, QueueClient  # noqa: E402
from workloads.core import librdkafka_logger  # noqa: E402
from workloads.queue import encode_value  # noqa: E402

CLUSTER = "bench-wl"
PARTITIONS = 3


def batches(thread: int, threads: int, batch: int):
    """Endless batches [[p, v, None], ...]; values unique per partition across threads."""
    n = 0
    while True:
        out = []
        for _ in range(batch):
            p = n % PARTITIONS
            out.append([p, (n // PARTITIONS) * threads + thread, None])
            n += 1
        yield out


def run_threads(target, threads: int, seconds: float) -> tuple[int, int, float, float]:
    """Run target(thread, stop_at, counts) in T threads; return (messages ok,
    ops, elapsed, CPU seconds of this process, librdkafka's threads included)."""
    counts = [[0, 0] for _ in range(threads)]
    cpu0 = time.process_time()
    start = time.monotonic()
    stop_at = start + seconds
    ts = [threading.Thread(target=target, args=(i, stop_at, counts[i]), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - start
    return sum(c[0] for c in counts), sum(c[1] for c in counts), elapsed, time.process_time() - cpu0


def raw(bootstrap: str, topic: str, threads: int, batch: int, size: int, seconds: float):
    def work(i: int, stop_at: float, count: list[int]) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 1, "logger": librdkafka_logger()})
        acked = [0]

        def on_delivery(err, msg):
            if err is None:
                acked[0] += 1

        gen = batches(i, threads, batch)
        while time.monotonic() < stop_at:
            for p, v, _ in next(gen):
                producer.produce(topic, encode_value(v, size), str(p).encode(), p, on_delivery=on_delivery)
            producer.flush(10)
            count[1] += 1
        count[0] = acked[0]
        producer.flush(10)

    return run_threads(work, threads, seconds)


def recorded(bootstrap: str, topic: str, threads: int, batch: int, size: int, seconds: float,
             writer: HistoryWriter, process_base: int):
    def work(i: int, stop_at: float, count: list[int]) -> None:
        client = QueueClient()
        process = process_base + i
        client.open(ClientContext(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS, process=process,
                                  message_bytes=size, op_timeout_s=10, node="all"))
        gen = batches(i, threads, batch)
        append = writer.append
        try:
            while time.monotonic() < stop_at:
                op = {"f": "send", "value": next(gen)}
                append({"process": process, "type": "invoke", **op})
                comp = client.invoke(op)
                append({"process": process, **comp})
                count[1] += 1
                if comp["type"] == "ok":
                    count[0] += len(comp["value"])
        finally:
            client.close()

    return run_threads(work, threads, seconds)


def warm_up(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Until an idempotent producer gets acks from every partition quickly
    (right after start the brokers still load the coordinators' state)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1, "logger": librdkafka_logger()})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        acked = []
        t0 = time.monotonic()
        for p in range(PARTITIONS):
            producer.produce(topic, b"-1", str(p).encode(), p,
                             on_delivery=lambda err, msg: acked.append(err is None))
        producer.flush(10)
        if len(acked) == PARTITIONS and all(acked) and time.monotonic() - t0 < 0.5:
            return
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20, help="per method, split over the rounds")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1, help="messages per send op")
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--keep-history", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    librdkafka_logger().setLevel(logging.ERROR)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    print(f"bringing up cluster {CLUSTER!r} ...", flush=True)
    try:
        handle = cluster_up(CLUSTER, nodes=3)
        kafka = handle.kafka
        topic = f"bench-{os.getpid()}"
        kafka.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        bootstrap = kafka.bootstrap()
        per_round = args.seconds / args.rounds
        print(f"cluster up in {handle.timings['total_s']:.0f}s; {args.threads} threads, batch {args.batch}, "
              f"{args.message_bytes}-byte values, {args.rounds} x {per_round:.0f}s per method", flush=True)
        warm_up(bootstrap, topic)
        tot = {"raw": [0, 0, 0.0, 0.0], "recorded": [0, 0, 0.0, 0.0]}
        with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as tmp:
            path = Path(tmp) / "history.jsonl"
            with HistoryWriter(path) as writer:
                # Untimed warm-up of both paths (the brokers' JIT, connections).
                raw(bootstrap, topic, args.threads, args.batch, args.message_bytes, 3)
                recorded(bootstrap, topic, args.threads, args.batch, args.message_bytes, 3, writer, 0)
                for r in range(args.rounds):
                    for name in ("raw", "recorded"):
                        if name == "raw":
                            msgs, ops, el, cpu = raw(bootstrap, topic, args.threads, args.batch,
                                                args.message_bytes, per_round)
                        else:
                            msgs, ops, el, cpu = recorded(bootstrap, topic, args.threads, args.batch,
                                                     args.message_bytes, per_round, writer, 1000 * (r + 1))
                        t = tot[name]
                        t[0] += msgs
                        t[1] += ops
                        t[2] += el
                        t[3] += cpu
                        print(f"  round {r + 1} {name:8s}: {msgs / el:9.0f} msgs/s ({ops / el:7.0f} ops/s, "
                              f"{cpu / max(msgs, 1) * 1e6:5.0f} us CPU/msg)", flush=True)
            lines = sum(1 for _ in open(path, "rb"))
            if args.keep_history:
                kept = Path(f"bench-history-{os.getpid()}.jsonl")
                kept.write_bytes(path.read_bytes())
                print(f"history kept in {kept}")
        raw_rate = tot["raw"][0] / tot["raw"][2]
        rec_rate = tot["recorded"][0] / tot["recorded"][2]
        cpu = {k: v[3] / max(v[0], 1) * 1e6 for k, v in tot.items()}
        print(f"raw confluent-kafka : {raw_rate:9.0f} msgs/s  {cpu['raw']:5.0f} us CPU/msg")
        print(f"kchaos recorded send: {rec_rate:9.0f} msgs/s  {cpu['recorded']:5.0f} us CPU/msg "
              f"({lines} history lines)")
        print(f"ratio recorded/raw  : {rec_rate / raw_rate:9.2f}")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        print(f"removing cluster {CLUSTER!r}", flush=True)
        cluster_down(CLUSTER)


if __name__ == "__main__":
    sys.exit(main())
