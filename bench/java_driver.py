"""What does the client protocol cost? The Java client sending by itself vs. the Java driver's recorded pipelined sends.

Brings up a 3-node cluster ("bench-java-<pid>", destroyed at the end, also on
Ctrl-C; or ``--attach NAME`` to use a running one, left running), creates a
topic (RF 3, 3 partitions), builds the Java driver (kafka-clients at
``--client-version``), then measures acknowledged messages per second two
ways, in the same driver JVMs, with the same producer settings (the
pipelined workload's: acks=all, idempotent, linger.ms=1,
max.in.flight.requests.per.connection 5; workloads/java_client.py
``java_producer_settings``):

* raw: the driver's ``bench`` request: a producer of its own in the JVM keeps
  up to ``--in-flight`` messages outstanding (a permit freed in each
  ``KafkaProducer.send`` callback), nothing recorded, nothing crossing the pipe;
* recorded: a ``workloads.java_pipelined.DriverPipelinedProducer`` per thread,
  driven as the runner's pipelined worker drives it (``pump``), its
  ``send-async`` requests and ``sent`` lines crossing the pipe, every invoke and
  completion recorded through the runner's ``Recorder`` into one real
  ``HistoryWriter`` with its columnar copy on, as in a run.

After an untimed warm-up of both, the two alternate in rounds (raw then
recorded, then recorded then raw, ...), each counting the acknowledgements
within its window; the load average is printed with each.

    .venv/bin/python bench/java_driver.py [--seconds 60] [--rounds 4] [--warm-up 20] [--threads 2]
        [--in-flight 500] [--message-bytes 100] [--client-version 4.3.1] [--attach NAME]
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.client_config import java_driver  # noqa: E402
from harness.run_cluster import cluster_attach, cluster_down, cluster_up  # noqa: E402
from history.recorder import Recorder  # noqa: E402
from history.writer import HistoryWriter  # noqa: E402
from infra.distribution import DEFAULT_KAFKA_VERSION  # noqa: E402
from workloads.client import ClientContext  # noqa: E402
from workloads.java_pipelined import DriverPipelinedProducer  # noqa: E402
from workload_overhead import counting_sends  # noqa: E402

PARTITIONS = 3
OP_TIMEOUT_S = 10.0


def context(bootstrap: str, topic: str, size: int, driver: tuple[str, ...], process: int) -> ClientContext:
    return ClientContext(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS, message_bytes=size,
                         op_timeout_s=OP_TIMEOUT_S, node="all", driver=driver, process=process,
                         producer_config={"acks": "all", "enable.idempotence": True,
                                          "max.in.flight.requests.per.connection": 5})


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


class Pumps:
    """One recorded pipelined producer (one driver JVM) per thread; ``raw``
    asks the same JVMs to send by themselves."""

    def __init__(self, ctxs: list[ClientContext], in_flight: int, recorder: Recorder):
        procs, names = itertools.count(1000), itertools.count()
        self.in_flight, self.stop_at = in_flight, 0.0
        self.acked = [0] * len(ctxs)
        self.sent = [0] * len(ctxs)

        self.pumps = [DriverPipelinedProducer(ctx, in_flight, recorder.append, lambda: next(procs),
                                              lambda: f"p{next(names)}", record_many=recorder.append_many,
                                              record_sends=counting_sends(recorder, self, i))
                      for i, ctx in enumerate(ctxs)]

    def _threads(self, work) -> tuple[int, float]:
        counts = [0] * len(self.pumps)
        start = time.monotonic()
        ts = [threading.Thread(target=work, args=(i, counts), daemon=True) for i in range(len(self.pumps))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sum(counts), time.monotonic() - start

    def recorded(self, seconds: float) -> tuple[int, float]:
        self.acked = [0] * len(self.pumps)
        self.stop_at = time.monotonic() + seconds
        threads = len(self.pumps)

        def work(i: int, counts: list[int]) -> None:
            pump, n0 = self.pumps[i], self.sent[i]
            sent = [n0]

            def messages():
                n = n0
                while True:
                    yield n % PARTITIONS, (n // PARTITIONS) * threads + i
                    n += 1
                    sent[0] = n

            pump.pump(messages(), lambda: time.monotonic() >= self.stop_at)
            counts[i] = self.acked[i]
            self.sent[i] = sent[0]
            end = time.monotonic() + OP_TIMEOUT_S          # untimed drain before the next round
            while pump.outstanding and time.monotonic() < end:
                pump.serve(0.05)

        acked, _ = self._threads(work)
        return acked, seconds

    def raw(self, seconds: float) -> tuple[int, float]:
        """The ``bench`` request in each pump's driver JVM, all at once."""
        spans = [0.0] * len(self.pumps)

        def work(i: int, counts: list[int]) -> None:
            driver = self.pumps[i]._driver
            driver.write({"f": "bench", "seconds": seconds, "in_flight": self.in_flight,
                          "partitions": PARTITIONS})
            end = time.monotonic() + seconds + OP_TIMEOUT_S + 30
            while time.monotonic() < end:      # late sent lines of the last round are skipped
                for line in driver.lines(1.0):
                    if '"f":"bench"' in line:
                        value = json.loads(line)["value"]
                        counts[i], spans[i] = value["acked"], value["seconds"]
                        return
            raise RuntimeError("the driver did not answer bench")

        acked, _ = self._threads(work)
        return acked, max(spans)

    def close(self) -> None:
        for p in self.pumps:
            p.close(flush_s=OP_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60, help="per method, split over the rounds")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warm-up", type=float, default=20, help="untimed seconds of both methods before the rounds")
    ap.add_argument("--threads", type=int, default=2, help="driver JVMs, one pipelined producer each")
    ap.add_argument("--in-flight", type=int, default=500, help="messages outstanding per producer")
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--client-version", default=DEFAULT_KAFKA_VERSION)
    ap.add_argument("--attach", metavar="NAME", help="use this running cluster (left running)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    driver = java_driver(args.client_version)
    cluster = args.attach or f"bench-java-{os.getpid()}"
    pumps = None
    try:
        if args.attach:
            handle = cluster_attach(cluster)
        else:
            print(f"bringing up cluster {cluster!r} ...", flush=True)
            handle = cluster_up(cluster, nodes=3)
        kafka = handle.kafka
        topic = f"bench-java-{os.getpid()}"
        kafka.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        bootstrap = kafka.bootstrap()
        per_round = args.seconds / args.rounds
        print(f"kafka-clients {args.client_version}: {args.threads} driver JVMs x {args.in_flight} in flight, "
              f"{args.message_bytes}-byte values, acks=all, idempotent, {args.rounds} x {per_round:.1f}s per "
              f"method; {load()}", flush=True)
        totals = {"raw": [0, 0.0], "recorded": [0, 0.0]}
        with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as tmp:
            with HistoryWriter(Path(tmp) / "history.jsonl", columnar=True) as writer:
                ctxs = [context(bootstrap, topic, args.message_bytes, driver, i) for i in range(args.threads)]
                pumps = Pumps(ctxs, args.in_flight, Recorder(writer))
                methods = {"raw": pumps.raw, "recorded": pumps.recorded}
                for _ in range(2):                # untimed warm-up: JVMs, PIDs, connections, brokers' JIT
                    pumps.recorded(args.warm_up / 4)
                    pumps.raw(args.warm_up / 4)
                for r in range(args.rounds):
                    order = list(methods.items())     # ABBA: a trend in the brokers' speed hits both alike
                    for name, fn in (order if r % 2 == 0 else order[::-1]):
                        acked, span = fn(per_round)
                        totals[name][0] += acked
                        totals[name][1] += span
                        print(f"round {r + 1} {name:9s} {acked / span:9.0f} acked msgs/s ({acked} in {span:.1f}s); "
                              f"{load()}", flush=True)
                pumps.close()
                pumps = None
        raw_rate = totals["raw"][0] / totals["raw"][1]
        rec_rate = totals["recorded"][0] / totals["recorded"][1]
        print(f"raw {raw_rate:.0f} msgs/s, recorded {rec_rate:.0f} msgs/s: recorded/raw {rec_rate / raw_rate:.2f}x; "
              f"{load()}", flush=True)
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        if pumps is not None:
            for p in pumps.pumps:
                p.crash()
        if not args.attach:
            cluster_down(cluster)


if __name__ == "__main__":
    sys.exit(main())
