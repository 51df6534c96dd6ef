"""What only the Java driver (workloads/java_driver) has, against the real
cluster: transactions v2 on 4.x, pipelined sends (docs/design.md, "The client
protocol"). The conformance suite every client passes, this one included (its
identity and a crash that kills its JVM too), is test_conformance_cluster.py."""
from __future__ import annotations

import random

import pytest

from harness.client_config import java_driver
from history.ops import INFO, OK
from infra.distribution import DEFAULT_KAFKA_VERSION, KAFKA_LIB
from infra.kafka_versions import features
from workloads.client import ClientContext
from workloads.java_client import JAVA_KINDS

pytestmark = pytest.mark.cluster

P = 3


class _Workload:
    txn_send_offsets = False


def open_client(kind: str, bootstrap: str, topic: str, process: int = 0, worker: int = 0, seed: int = 1,
                **kw):
    client = JAVA_KINDS[kind](_Workload(), seed, worker)
    client.open(ClientContext(bootstrap=bootstrap, topic=topic, partitions=P, process=process,
                              driver=java_driver(DEFAULT_KAFKA_VERSION), node="all", **kw))
    return client


@pytest.fixture(scope="module")
def topic(kafka_cluster):
    name = f"java-{random.randrange(1 << 30):08x}"
    kafka_cluster.kafka.create_topic(name, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    return name


def txn(values, abort=False):
    op = {"f": "txn", "value": [["send", p, v] for p, v in values] + [["poll"]]}
    if abort:
        op["abort"] = True
    return op


def producer_epoch(kafka_cluster, txn_id: str) -> int:
    """The coordinator's producer epoch of ``txn_id`` (Kafka's own TransactionsCommand, run on n1)."""
    node = kafka_cluster.nodes[0]
    res = node.run(["java", "-Xmx128m", "-cp", f"{KAFKA_LIB}/*", "org.apache.kafka.tools.TransactionsCommand",
                    "--bootstrap-server", kafka_cluster.kafka.bootstrap(), "describe", "--transactional-id",
                    txn_id], check=False, timeout=120)
    header, row = [line.split() for line in res.out.strip().splitlines()[:2]]
    return int(row[header.index("ProducerEpoch")])


@pytest.mark.skipif(not features(DEFAULT_KAFKA_VERSION).transaction_version_2, reason="transactions v2 is 4.x's")
def test_transactions_run_as_v2_on_4x(kafka_cluster, topic):
    """Transactions v2 (KIP-890) bumps the producer epoch at every commit and abort; v0 keeps it.
    Three committed transactions of a fresh producer leave its epoch 3 further on."""
    client = open_client("transactions", kafka_cluster.kafka.bootstrap(), topic, worker=6)
    try:
        client.invoke({"f": "assign", "value": [0]})
        before = producer_epoch(kafka_cluster, "kchaos-1-w6")
        for v in (4000, 4001, 4002):
            done = client.invoke(txn([(0, v)]))
            assert done["type"] == OK, done
        assert producer_epoch(kafka_cluster, "kchaos-1-w6") == before + 3
    finally:
        client.close()


def test_pipelined_sends_complete_by_op_id_in_send_order(kafka_cluster, topic):
    """send-async requests and sent lines (workloads/java_pipelined.py): every message is
    acknowledged, each producer's sends to a partition get increasing offsets in send order,
    and a crash (the driver killed) starts a new driver under a new name."""
    import itertools

    from history.ops import INVOKE
    from workloads.java_pipelined import DriverPipelinedProducer
    rows: list[tuple] = []
    processes, names = itertools.count(), (f"p{i}" for i in itertools.count())
    ctx = ClientContext(bootstrap=kafka_cluster.kafka.bootstrap(), topic=topic, partitions=P, node="all",
                        driver=java_driver(DEFAULT_KAFKA_VERSION), producer_config={
                            "max.in.flight.requests.per.connection": 5})
    pump = DriverPipelinedProducer(ctx, 50, lambda op: None, lambda: next(processes), lambda: next(names),
                                   record_sends=lambda r, node: rows.extend(r))
    messages = ((v % P, v) for v in range(2000))
    try:
        pump.pump(itertools.islice(messages, 1000), lambda: False)
        pump.crash()
        pump.pump(messages, lambda: False)
        pump.close(flush_s=20)
    finally:
        pump.crash()
    done = [r for r in rows if r[1] != INVOKE]
    assert len(done) == 2000 and sum(r[1] == INVOKE for r in rows) == 2000
    ok = [r for r in done if r[1] == OK]
    assert len(ok) >= 1900, {r[6] for r in done if r[1] != OK}     # what the crash caught in flight: info
    assert all(r[1] in (OK, INFO) for r in done)
    assert {r[5] for r in done} == {"p0", "p1"} and pump.identity["version"] == DEFAULT_KAFKA_VERSION
    for name in ("p0", "p1"):
        for p in range(P):
            offsets = [r[4] for r in sorted((r for r in ok if r[5] == name and r[2] == p), key=lambda r: r[3])]
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
