"""What would driving kafka-clients through py4j cost? The other way the issue named
(pyspark brings py4j), measured where it would pay, per message.

A pipelined send through py4j crosses the gateway at least three times: a
``ProducerRecord`` made in the JVM (a Python-to-Java call), ``send(record,
callback)`` (another), and the delivery callback (a Java-to-Python call into
py4j's callback server). The Java driver instead batches hundreds of messages
a JSON line each way (docs/design.md, "The client protocol"). This bench
needs no cluster: it starts one JVM with py4j's gateway (pyspark's bundled
py4j, ``launch_gateway``) and kafka-clients on its classpath (the Java
driver's build, infra/client_jars.py), the same JVM options as a driver, and
times, after a warm-up:

* ``call``: ``new ProducerRecord(topic, partition, key, value)`` from Python;
* ``callback``: ``IntStream.range(0, n).forEach(c)`` with ``c`` a Python
  ``IntConsumer``: n Java-to-Python calls, as n delivery callbacks would be.

Each with one Python thread and with ``--threads`` at once. The rate a
py4j pipelined producer could reach per thread, before Kafka does any
work, is at most 1 / (2 x call + callback). Compare with the Java driver's
recorded sends, Kafka included (bench/java_driver.py; docs/benchmarks.md).

    .venv/bin/python bench/py4j_gateway.py [--n 20000] [--threads 2] [--client-version 4.3.1]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway, launch_gateway  # noqa: E402

from harness.client_config import java_driver  # noqa: E402
from infra.distribution import DEFAULT_KAFKA_VERSION  # noqa: E402
from workloads.java_client import JAVA_OPTIONS  # noqa: E402


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


class Counter:
    """A Python ``java.util.function.IntConsumer`` the JVM calls back."""

    def __init__(self) -> None:
        self.n = 0

    def accept(self, value: int) -> None:
        self.n += 1

    class Java:
        implements = ["java.util.function.IntConsumer"]


def per_op_us(work, n: int, threads: int) -> float:
    """Wall microseconds per op when ``threads`` threads each do ``work(n)`` at once."""
    ts = [threading.Thread(target=work, args=(n,)) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return (time.perf_counter() - t0) * 1e6 / (n * threads)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="ops per thread per measure")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--client-version", default=DEFAULT_KAFKA_VERSION)
    args = ap.parse_args(argv)
    command = java_driver(args.client_version)
    classpath = command[command.index("-cp") + 1]
    port = launch_gateway(classpath=classpath, javaopts=list(JAVA_OPTIONS), die_on_exit=True)
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port),
                          callback_server_parameters=CallbackServerParameters(port=0))
    try:
        python_port = gateway.get_callback_server().get_listening_port()
        server = gateway.java_gateway_server
        server.resetCallbackClient(server.getCallbackClient().getAddress(), python_port)
        jvm = gateway.jvm
        record_class = jvm.org.apache.kafka.clients.producer.ProducerRecord
        key, value = bytearray(b"1"), bytearray(b"12345".ljust(100))

        def calls(n: int) -> None:
            for i in range(n):
                record_class("t", i % 3, key, value)

        def callbacks(n: int) -> None:
            counter = Counter()
            jvm.java.util.stream.IntStream.range(0, n).forEach(counter)
            assert counter.n == n

        per_op_us(calls, args.n // 4, 1)          # warm-up: classes loaded, C1-compiled, connections made
        per_op_us(callbacks, args.n // 4, 1)
        print(f"py4j gateway, kafka-clients {args.client_version}, JVM {' '.join(JAVA_OPTIONS)}; {load()}")
        results = {}
        for threads in (1, args.threads):
            call_us = per_op_us(calls, args.n, threads)
            callback_us = per_op_us(callbacks, args.n, threads)
            ceiling = 1e6 / (2 * call_us + callback_us)
            results[threads] = ceiling
            print(f"{threads} thread(s): call {call_us:.1f} us, callback {callback_us:.1f} us (wall per op, "
                  f"all threads together): at most {ceiling:,.0f} sends/s before Kafka; {load()}", flush=True)
        return 0
    finally:
        gateway.shutdown()


if __name__ == "__main__":
    sys.exit(main())
