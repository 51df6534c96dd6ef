"""The official Java client (``kafka-clients``) as a workload client: the
driver in workloads/java_driver/ (main class KchaosDriver), one JVM per logical
process, spoken to over the client protocol (workloads/driver_protocol.py,
docs/design.md "The client protocol").

What is Java-specific lives here: the Java client's settings (its defaults,
chosen to behave as the librdkafka clients' do, and the run's ``[producer]``
/ ``[consumer]`` tables over them), the ``java`` command line, and which
workload kinds the driver runs (``JAVA_KINDS``; the pipelined kinds' sends:
workloads/java_pipelined.py). The driver is built
by the harness (infra/client_jars.py) and reaches the client as
``ClientContext.driver``.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

from history.ops import COMMIT, POLL, REBALANCE, SUBSCRIBE
from workloads.client import Client, ClientContext, delivery_timeout_ms
from workloads.driver_protocol import DriverClient
from workloads.txn import TRANSACTION_TIMEOUT_MS, transactional_id

JAVA_SOURCES = Path(__file__).with_name("java_driver")     # the driver's *.java files
JAVA_MAIN_CLASS = "KchaosDriver"
#: A small heap: one JVM per worker process, on a machine shared with the brokers. C1 only: a
#: driver starts in about half the time (docs/design.md, "The client protocol"), and each new
#: process (a crash, an info op) waits for its start.
JAVA_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-Xss512k", "-XX:TieredStopAtLevel=1")

# librdkafka names of settings the Java client has under another name (the run
# config's tables are written for librdkafka first: workloads/client.py).
RDKAFKA_TO_JAVA = {
    "message.timeout.ms": "delivery.timeout.ms",
    "queue.buffering.max.ms": "linger.ms",
    "request.required.acks": "acks",
    "message.send.max.retries": "retries",
    "metadata.broker.list": "bootstrap.servers",
}
_MEMBER_OPS = (SUBSCRIBE, POLL, COMMIT, REBALANCE)


def driver_command(classpath: str, log4j_config: str) -> tuple[str, ...]:
    """The command line that starts one driver JVM."""
    return ("java", *JAVA_OPTIONS, f"-Dlog4j2.configurationFile={log4j_config}", "-cp", classpath,
            JAVA_MAIN_CLASS)


def _java_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def merge_java(defaults: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, str]:
    """``overrides`` (librdkafka aliases renamed) over ``defaults``, as the strings Java's Properties take."""
    out = dict(defaults)
    for key, value in (overrides or {}).items():
        key = RDKAFKA_TO_JAVA.get(key, key)
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return {k: _java_value(v) for k, v in out.items()}


def java_producer_settings(ctx: ClientContext, txn_id: str | None = None) -> dict[str, str]:
    """The Java producer's settings: librdkafka's defaults' meaning (acks all,
    idempotent, linger 1 ms, a delivery timeout under the op timeout), plus
    the bounds Java needs for that (a request timeout within the delivery
    timeout; no call blocks past the op timeout)."""
    op_ms = max(1, int(ctx.op_timeout_s * 1000))
    delivery = delivery_timeout_ms(ctx.op_timeout_s)
    linger = 1
    defaults: dict[str, Any] = {
        "bootstrap.servers": ctx.bootstrap,
        "client.id": f"kchaos-p{ctx.process}",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": linger,
        "delivery.timeout.ms": delivery,
        "request.timeout.ms": max(1, min(30_000, delivery - linger)),
        "max.block.ms": op_ms,
        "socket.connection.setup.timeout.ms": max(1000, op_ms),
        "socket.connection.setup.timeout.max.ms": max(1000, op_ms),
    }
    if txn_id is not None and "transaction.timeout.ms" not in ctx.producer_config:
        defaults["transaction.timeout.ms"] = max(TRANSACTION_TIMEOUT_MS, delivery)
    return merge_java(defaults, ctx.producer_config)


def java_consumer_settings(ctx: ClientContext, group_id: str | None = None) -> dict[str, str]:
    """The Java consumer's settings: read_committed from the earliest offset,
    no auto-commit, at most ``poll_max_messages`` a poll."""
    op_ms = max(1, int(ctx.op_timeout_s * 1000))
    defaults: dict[str, Any] = {
        "bootstrap.servers": ctx.bootstrap,
        "client.id": f"kchaos-c{ctx.process}",
        "group.id": group_id or ctx.group_id,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "max.poll.records": ctx.poll_max_messages,
        "default.api.timeout.ms": op_ms,
        "socket.connection.setup.timeout.ms": max(1000, op_ms),
        "socket.connection.setup.timeout.max.ms": max(1000, op_ms),
    }
    if ctx.client_rack:
        defaults["client.rack"] = ctx.client_rack
    return merge_java(defaults, ctx.consumer_config)


def java_effective_settings(ctx: ClientContext) -> dict[str, dict[str, str]]:
    """The settings a run stores (``client_settings`` in config.json), per-process ones left out."""
    drop = {"bootstrap.servers", "client.id", "group.id"}
    return {"producer": {k: v for k, v in java_producer_settings(ctx).items() if k not in drop},
            "consumer": {k: v for k, v in java_consumer_settings(ctx).items() if k not in drop}}


def _open_config(txn_id: str | None = None, send_offsets: bool = False) -> Callable[[ClientContext], dict]:
    def config(ctx: ClientContext) -> dict[str, Any]:
        return {"topic": ctx.topic, "partitions": ctx.partitions, "process": ctx.process,
                "op_timeout_ms": int(ctx.op_timeout_s * 1000), "poll_timeout_ms": int(ctx.poll_timeout_s * 1000),
                "message_bytes": ctx.message_bytes, "transactional_id": txn_id, "send_offsets": send_offsets,
                "producer": java_producer_settings(ctx, txn_id),
                "consumer": java_consumer_settings(ctx, txn_id)}   # a txn consumer's group: its txn id
    return config


#: The workload kinds (workloads/kinds.py) the Java driver runs, and its client for each.
JAVA_KINDS: dict[str, Callable[[Any, int, int], Client]] = {
    "assign": lambda w, seed, worker: DriverClient(_open_config()),
    "group": lambda w, seed, worker: DriverClient(_open_config(), member_ops=_MEMBER_OPS),
    # The pipelined kinds' polls; their sends go to a driver's pipelined producer
    # (workloads/java_pipelined.py, which workloads/kinds.py ``with_client`` makes the pump).
    "pipelined": lambda w, seed, worker: DriverClient(_open_config()),
    "pipelined-group": lambda w, seed, worker: DriverClient(_open_config(), member_ops=_MEMBER_OPS),
    "transactions": lambda w, seed, worker: DriverClient(
        _open_config(transactional_id(seed, worker), bool(w.txn_send_offsets))),
}


def java_wait_for_coordinator(ctx: ClientContext, seed: int, log: logging.Logger, timeout_s: float = 60.0) -> None:
    """Before the clock starts: a driver with a warm-up transactional id opens
    (``initTransactions``) until the coordinator answers, as the librdkafka
    kind's set-up does (workloads/txn.py ``wait_for_coordinator``)."""
    t0 = time.monotonic()
    while True:
        client = DriverClient(_open_config(f"kchaos-{seed}-warmup"))
        try:
            client.open(ctx)
            log.info("transaction coordinator ready after %.1f s (Java client %s)", time.monotonic() - t0,
                     client.identity.get("version"))
            return
        except Exception as exc:
            if time.monotonic() - t0 >= timeout_s:
                log.warning("transaction coordinator not ready after %.0f s: %s", timeout_s, exc)
                return
            time.sleep(0.5)
        finally:
            client.close()


def java_settings_check(ctx: ClientContext) -> dict[str, Any]:
    """What the driver's ``check`` request carries: the settings its clients would use (a transactional producer's
    too: its settings are the producer's plus the transactional id the driver adds)."""
    return {"producer": java_producer_settings(ctx, "kchaos-check"), "consumer": java_consumer_settings(ctx)}
