"""How much does recording cost? Raw confluent-kafka produce vs. kchaos's recorded send.

Brings up a 3-node cluster ("bench-wl-<pid>", destroyed at the end, also on
Ctrl-C; or ``--attach NAME`` to use a running one, left running), creates a
topic (RF 3, 3 partitions), then measures acknowledged messages per second for
the same message size and concurrency two ways. ``--mode pipelined`` (the
default; issue 15's benchmark):

* raw: T threads, each with its own Producer (acks=all, idempotent,
  max.in.flight.requests.per.connection 5, linger.ms=1 like the workload's
  defaults), ``produce`` without a flush per message, at most ``--in-flight``
  messages outstanding (a counter decremented in the delivery callback),
  ``poll`` serving the delivery reports;
* recorded: T threads, each a ``workloads.pipelined.PipelinedProducer`` with
  the same in-flight bound, driven as the runner's pipelined worker drives it
  (``pump``: invokes recorded a batch at a time, completions a poll at a
  time, both as rows: ``Recorder.append_sends``), every invocation and completion
  recorded through the runner's ``Recorder`` into one real ``HistoryWriter``
  with its columnar copy (history.parquet) on, as in a run.

``--proxied`` (pipelined only; not with ``--attach``): the cluster comes up
with a PROXY listener per broker behind kchaos's protocol proxy in its own
process, as a run has it (nemesis.proxy_process, docs/design.md "Faults inside
Kafka's protocol"), no rule armed, and a third method joins the rounds: ``proxied``, the recorded
pipelined producers bootstrapped through the proxy; the summary adds the
ratio proxied/recorded (issue 34 asks for at least 0.8).

``--mode batch``: T threads of QueueClient send ops of B messages, each
flushed, against raw produce-and-flush batches.

The methods alternate in rounds (raw, recorded, raw, recorded, ...) so that
load from anything else on the machine hits them alike; each pipelined round
counts the acknowledgements that arrived within its window and divides by the
window (what is still in flight at its end drains, untimed, before the next
round). Producers are made and warmed
up (idempotent PID, connections) before the first round.

    .venv/bin/python bench/workload_overhead.py [--mode pipelined] [--seconds 20]
        [--rounds 5] [--threads 2] [--in-flight 500] [--message-bytes 100] [--attach NAME] [--proxied]
"""
from __future__ import annotations

import argparse
import itertools
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402

from broker.config import PROXY_PORT  # noqa: E402
from broker.lifecycle import BrokerSettings  # noqa: E402
from harness.run_cluster import cluster_attach, cluster_down, cluster_up  # noqa: E402
from history.writer import HistoryWriter  # noqa: E402
from history.recorder import Recorder  # noqa: E402
from nemesis.proxy_process import ProxyProcess  # noqa: E402
from workloads import ClientContext, QueueClient  # noqa: E402
from workloads.client import librdkafka_logger, producer_settings  # noqa: E402
from workloads.pipelined import PipelinedProducer  # noqa: E402
from workloads.queue import encode_value  # noqa: E402

PARTITIONS = 3
OP_TIMEOUT_S = 10.0


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


# -- pipelined ------------------------------------------------------------------------
def in_window(counts: tuple[int, int, float, float], seconds: float) -> tuple[int, int, float, float]:
    """A pipelined round's counts with the round's window as its time: its
    acks are those that came within the window, and the drain after it
    (the next round starts with nothing in flight) is no time a run's user
    waits for, so it is not in the rate's denominator."""
    msgs, ops, _, cpu = counts
    return msgs, ops, seconds, cpu


def _context(bootstrap: str, topic: str, size: int) -> ClientContext:
    return ClientContext(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS, message_bytes=size,
                         op_timeout_s=OP_TIMEOUT_S, node="all",
                         producer_config={"acks": "all", "enable.idempotence": True,
                                          "max.in.flight.requests.per.connection": 5})


class RawPipelined:
    """One raw confluent-kafka producer per thread, the workload's settings,
    at most ``in_flight`` messages outstanding."""

    def __init__(self, bootstrap: str, topic: str, threads: int, in_flight: int, size: int):
        ctx = _context(bootstrap, topic, size)
        conf = producer_settings(ctx)
        conf["logger"] = librdkafka_logger()
        self.topic, self.threads, self.in_flight, self.size = topic, threads, in_flight, size
        self.producers = [Producer(dict(conf, **{"client.id": f"raw-{i}"})) for i in range(threads)]
        self.outstanding = [0] * threads
        self.sent = [0] * threads

    def round(self, seconds: float) -> tuple[int, int, float, float]:
        def work(i: int, stop_at: float, count: list[int]) -> None:
            producer, topic, size, bound = self.producers[i], self.topic, self.size, self.in_flight
            out = self.outstanding
            acked = [0]
            n = self.sent[i]

            def on_delivery(err, msg):
                out[i] -= 1
                if err is None and time.monotonic() < stop_at:
                    acked[0] += 1

            while time.monotonic() < stop_at:
                while out[i] >= bound:
                    producer.poll(0.01)
                p = n % PARTITIONS
                producer.produce(topic, encode_value((n // PARTITIONS) * self.threads + i, size), str(p).encode(),
                                 p, on_delivery=on_delivery)
                out[i] += 1
                n += 1
                producer.poll(0)
            count[0] = acked[0]
            count[1] = n - self.sent[i]
            self.sent[i] = n
            producer.flush(OP_TIMEOUT_S)   # untimed: the next round starts with nothing in flight

        return in_window(run_threads(work, self.threads, seconds), seconds)

    def close(self) -> None:
        for p in self.producers:
            p.flush(OP_TIMEOUT_S)


def counting_sends(recorder: Recorder, rounds: Any, i: int) -> Callable[[list[tuple], str | None], None]:
    """The recorder's ``append_sends`` for thread ``i``, counting into
    ``rounds.acked[i]`` the ok completions recorded before ``rounds.stop_at``
    (the round's end). Shared with bench/java_driver.py."""
    def record_sends(rows: list[tuple], node: str | None) -> None:
        recorder.append_sends(rows, node)
        if time.monotonic() < rounds.stop_at:
            rounds.acked[i] += [r[1] for r in rows].count("ok")
    return record_sends


class RecordedPipelined:
    """One PipelinedProducer per thread recording into ``recorder``, driven
    as the runner's pipelined worker drives it (``pump``, ``record_many``)."""

    def __init__(self, bootstrap: str, topic: str, threads: int, in_flight: int, size: int, recorder: Recorder):
        procs = itertools.count(1000)
        names = itertools.count()
        self.recorder, self.threads = recorder, threads
        self.acked = [0] * threads
        self.stop_at = 0.0

        self.producers = [PipelinedProducer(_context(bootstrap, topic, size), in_flight, recorder.append,
                                            lambda: next(procs), lambda: f"p{next(names)}",
                                            record_many=recorder.append_many,
                                            record_sends=counting_sends(recorder, self, i))
                          for i in range(threads)]
        self.sent = [0] * threads

    def round(self, seconds: float) -> tuple[int, int, float, float]:
        self.acked = [0] * self.threads
        self.stop_at = time.monotonic() + seconds

        def work(i: int, stop_at: float, count: list[int]) -> None:
            producer = self.producers[i]
            n0 = self.sent[i]
            sent = [n0]

            def messages():
                n = n0
                while True:
                    yield n % PARTITIONS, (n // PARTITIONS) * self.threads + i
                    n += 1
                    sent[0] = n

            producer.pump(messages(), lambda: time.monotonic() >= stop_at)
            count[0] = self.acked[i]
            count[1] = sent[0] - n0
            self.sent[i] = sent[0]
            end = time.monotonic() + OP_TIMEOUT_S   # untimed drain before the next round
            while producer.outstanding and time.monotonic() < end:
                producer.serve(0.05)

        return in_window(run_threads(work, self.threads, seconds), seconds)

    def close(self) -> None:
        for p in self.producers:
            p.close(flush_s=OP_TIMEOUT_S)


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


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("pipelined", "batch"), default="pipelined")
    ap.add_argument("--seconds", type=float, default=20, help="per method, split over the rounds")
    ap.add_argument("--threads", type=int, default=None,
                    help="producers (pipelined; default 2) or clients (batch; default 4)")
    ap.add_argument("--in-flight", type=int, default=500, help="pipelined: messages outstanding per producer")
    ap.add_argument("--batch", type=int, default=1, help="batch: messages per send op")
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--attach", metavar="NAME", help="use this running cluster (left running)")
    ap.add_argument("--no-columnar", action="store_true", help="recorded: no history.parquet beside the JSONL")
    ap.add_argument("--keep-history", action="store_true")
    ap.add_argument("--proxied", action="store_true",
                    help="pipelined: also the recorded producers through the protocol proxy, no rule armed")
    args = ap.parse_args(argv)
    if args.proxied and (args.attach or args.mode != "pipelined"):
        ap.error("--proxied needs --mode pipelined and a cluster of its own (no --attach)")
    threads = args.threads or (2 if args.mode == "pipelined" else 4)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    librdkafka_logger().setLevel(logging.ERROR)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    cluster = args.attach or f"bench-wl-{os.getpid()}"
    proxy = ProxyProcess([f"n{i}" for i in range(1, 4)], lambda value: None, seed=0) if args.proxied else None
    try:
        if args.attach:
            handle = cluster_attach(cluster)
            print(f"attached to cluster {cluster!r}", flush=True)
        else:
            print(f"bringing up cluster {cluster!r} ...", flush=True)
            settings = BrokerSettings(proxy_ports=proxy.ports) if proxy is not None else None
            handle = cluster_up(cluster, nodes=3, settings=settings)
            print(f"cluster up in {handle.timings['total_s']:.0f}s", flush=True)
        kafka = handle.kafka
        topic = f"bench-{os.getpid()}"
        kafka.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        bootstrap = kafka.bootstrap()
        if proxy is not None:
            proxy.start({n.name: (n.address, PROXY_PORT) for n in kafka.broker_nodes})
        per_round = args.seconds / args.rounds
        shape = (f"{threads} producers x {args.in_flight} in flight" if args.mode == "pipelined"
                 else f"{threads} threads, batch {args.batch}")
        print(f"{args.mode}: {shape}, {args.message_bytes}-byte values, acks=all, idempotent, "
              f"{args.rounds} x {per_round:.1f}s per method; {load()}", flush=True)
        warm_up(bootstrap, topic)
        tot = {"raw": [0, 0, 0.0, 0.0], "recorded": [0, 0, 0.0, 0.0], "proxied": [0, 0, 0.0, 0.0]}
        loads: list[float] = []
        with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as tmp:
            path = Path(tmp) / "history.jsonl"
            with HistoryWriter(path, columnar=not args.no_columnar) as writer:
                if args.mode == "pipelined":
                    rawp = RawPipelined(bootstrap, topic, threads, args.in_flight, args.message_bytes)
                    recp = RecordedPipelined(bootstrap, topic, threads, args.in_flight, args.message_bytes,
                                             Recorder(writer))
                    methods = {"raw": rawp.round, "recorded": recp.round}
                    if proxy is not None:
                        proxp = RecordedPipelined(proxy.bootstrap(), topic, threads, args.in_flight,
                                                  args.message_bytes, Recorder(writer))
                        methods["proxied"] = proxp.round
                else:
                    bases = itertools.count(0, 1000)   # a fresh process number per client
                    methods = {
                        "raw": lambda secs: raw(bootstrap, topic, threads, args.batch, args.message_bytes, secs),
                        "recorded": lambda secs: recorded(bootstrap, topic, threads, args.batch,
                                                          args.message_bytes, secs, writer, next(bases))}
                # Untimed warm-up of both paths (PIDs, connections, the brokers' JIT).
                for fn in methods.values():
                    fn(3)
                for r in range(args.rounds):
                    for name, fn in methods.items():
                        msgs, ops, el, cpu = fn(per_round)
                        t = tot[name]
                        t[0] += msgs
                        t[1] += ops
                        t[2] += el
                        t[3] += cpu
                        loads.append(os.getloadavg()[0])
                        print(f"  round {r + 1} {name:8s}: {msgs / el:9.0f} acks/s ({ops / el:7.0f} sends/s, "
                              f"{cpu / max(msgs, 1) * 1e6:5.0f} us CPU/ack; {load()})", flush=True)
                if args.mode == "pipelined":
                    rawp.close()
                    recp.close()
                    if proxy is not None:
                        proxp.close()
                t_close = time.monotonic()
            close_s = time.monotonic() - t_close      # the columnar copy's backlog, paired at close
            copy = writer._columnar
            copy_note = (f"; columnar copy: {copy.busy_s:.1f} s pairing in all, {close_s:.1f} s of it at close"
                         if copy is not None else "")
            lines = sum(1 for _ in open(path, "rb"))
            parquet = path.with_suffix(".parquet")
            pq_note = f", history.parquet {parquet.stat().st_size / 1e6:.1f} MB" if parquet.exists() else ""
            if args.keep_history:
                kept = Path(f"bench-history-{os.getpid()}.jsonl")
                kept.write_bytes(path.read_bytes())
                print(f"history kept in {kept}")
        raw_rate = tot["raw"][0] / tot["raw"][2]
        rec_rate = tot["recorded"][0] / tot["recorded"][2]
        cpu = {k: v[3] / max(v[0], 1) * 1e6 for k, v in tot.items()}
        span = f"load {min(loads):.1f}-{max(loads):.1f}" if loads else load()
        what = "pipelined" if args.mode == "pipelined" else "send"
        print(f"raw confluent-kafka     : {raw_rate:9.0f} acks/s  {cpu['raw']:5.0f} us CPU/ack ({span})")
        print(f"kchaos recorded {what:9s}: {rec_rate:9.0f} acks/s  {cpu['recorded']:5.0f} us CPU/ack "
              f"({lines} history lines{pq_note}{copy_note})")
        print(f"ratio recorded/raw      : {rec_rate / raw_rate:9.2f}")
        if proxy is not None:
            prox_rate = tot["proxied"][0] / tot["proxied"][2]
            print(f"kchaos through proxy    : {prox_rate:9.0f} acks/s  {cpu['proxied']:5.0f} us CPU/ack "
                  f"(no rule armed)")
            print(f"ratio proxied/recorded  : {prox_rate / rec_rate:9.2f}")
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if proxy is not None:
            proxy.stop()
        if not args.attach:
            print(f"removing cluster {cluster!r}", flush=True)
            cluster_down(cluster)


if __name__ == "__main__":
    sys.exit(main())
