"""Conformance of the Java driver (workloads/java_driver) against the real
cluster: each op's completion fields, the ok / fail / info of an aborted
transaction and a fenced producer, and a crash (docs/design.md, "The client
protocol")."""
from __future__ import annotations

import random
import time

import pytest

from harness.client_config import java_driver
from history.ops import FAIL, INFO, OK
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


def poll_until(client, want: int, timeout_s: float = 30.0) -> dict[int, list]:
    """Poll until ``want`` messages were read; partition -> [[offset, value], ...]."""
    seen: dict[int, list] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, seen.values())) < want and time.monotonic() < deadline:
        comp = client.invoke({"f": "poll", "value": None})
        assert comp["type"] == OK and comp["f"] == "poll" and comp["node"] == "all", comp
        for key, pairs in comp["value"].items():
            seen.setdefault(int(key), []).extend(pairs)
    return seen


def test_send_poll_assign_completions(kafka_cluster, topic):
    bootstrap = kafka_cluster.kafka.bootstrap()
    producer = open_client("assign", bootstrap, topic)
    try:
        assert producer.identity["client"] == "kafka-clients"
        assert producer.identity["version"] == DEFAULT_KAFKA_VERSION
        sends = []
        for i in range(20):
            op = {"f": "send", "value": [[i % P, 2 * i, None], [i % P, 2 * i + 1, None]]}
            comp = producer.invoke(dict(op))
            assert comp["type"] == OK and comp["f"] == "send" and comp["node"] == "all", comp
            assert [m[:2] for m in comp["value"]] == [m[:2] for m in op["value"]]
            assert all(type(m[2]) is int for m in comp["value"]) and "outcomes" not in comp
            assert comp["value"][1][2] == comp["value"][0][2] + 1
            sends.extend(comp["value"])
    finally:
        producer.close()
    consumer = open_client("assign", bootstrap, topic, process=1)
    try:
        assert consumer.invoke({"f": "assign", "value": [0, 1, 2]}) == {
            "type": OK, "f": "assign", "value": [0, 1, 2], "node": "all"}
        seen = poll_until(consumer, len(sends))
        got = {(p, o, v) for p, pairs in seen.items() for o, v in pairs}
        assert {(p, o, v) for p, v, o in sends} <= got
        # A kept partition goes on where the reads left it; a new one starts at the beginning.
        assert consumer.invoke({"f": "assign", "value": [0]})["type"] == OK
        assert poll_until(consumer, 1, timeout_s=2) == {}
        assert consumer.invoke({"f": "assign", "value": [0, 1]})["type"] == OK
        again = poll_until(consumer, len(seen.get(1, [])), timeout_s=20)
        assert set(again) == {1} and again[1] == seen[1]
    finally:
        consumer.close()


def test_send_to_a_missing_partition_fails(kafka_cluster, topic):
    """A message for a partition the topic lacks never reaches the log: fail, per message."""
    client = open_client("assign", kafka_cluster.kafka.bootstrap(), topic, op_timeout_s=3.0)
    try:
        comp = client.invoke({"f": "send", "value": [[P + 5, 1, None]]})
        assert comp["type"] == FAIL and comp["value"] == [[P + 5, 1, None]] and comp["outcomes"] == [FAIL], comp
        assert comp["error"].startswith("1/1 ")
    finally:
        client.close()


def txn(values, abort=False):
    op = {"f": "txn", "value": [["send", p, v] for p, v in values] + [["poll"]]}
    if abort:
        op["abort"] = True
    return op


def test_transactions_commit_abort_and_fields(kafka_cluster, topic):
    client = open_client("transactions", kafka_cluster.kafka.bootstrap(), topic, worker=3)
    try:
        assert client.invoke({"f": "assign", "value": [0, 1, 2]})["type"] == OK
        ok = client.invoke(txn([(0, 1000), (1, 1001)]))
        assert ok["type"] == OK and ok["f"] == "txn", ok
        assert ok["producer"] == "t0.0" and ok["isolation"] == "read_committed" and ok["node"] == "all"
        assert [m[:3] for m in ok["value"][:2]] == [["send", 0, 1000], ["send", 1, 1001]]
        assert all(type(m[3]) is int for m in ok["value"][:2])
        assert ok["value"][2][0] == "poll" and isinstance(ok["value"][2][1], dict)
        aborted = client.invoke(txn([(2, 1002)], abort=True))
        assert aborted["type"] == FAIL and aborted["abort"] is True, aborted
        later = client.invoke(txn([(2, 1003)]))
        assert later["type"] == OK, later
    finally:
        client.close()
    reader = open_client("assign", kafka_cluster.kafka.bootstrap(), topic, process=9)
    try:
        reader.invoke({"f": "assign", "value": [2]})
        values = [v for pairs in poll_until(reader, 10_000, timeout_s=5).values() for _, v in pairs]
        assert 1003 in values and 1002 not in values      # read_committed: the aborted write is not seen
    finally:
        reader.close()


def test_a_fenced_producer_never_commits_and_its_successor_does(kafka_cluster, topic):
    bootstrap = kafka_cluster.kafka.bootstrap()
    old = open_client("transactions", bootstrap, topic, worker=4, process=0)
    try:
        first = old.invoke(txn([(0, 2000)]))
        assert first["type"] == OK, first
        new = open_client("transactions", bootstrap, topic, worker=4, process=1)   # same id: fences the old
        try:
            fenced = old.invoke(txn([(0, 2001)]))
            assert fenced["type"] in (FAIL, INFO) and "Fenced" in fenced.get("error", ""), fenced
            after = new.invoke(txn([(0, 2002)]))
            assert after["type"] == OK, after
        finally:
            new.close()
    finally:
        old.close()


def test_a_crash_kills_the_driver_and_the_successor_fences_its_open_transaction(kafka_cluster, topic):
    bootstrap = kafka_cluster.kafka.bootstrap()
    first = open_client("transactions", bootstrap, topic, worker=5, process=0)
    proc = first._proc.proc
    first.crash()
    assert proc.poll() is not None            # killed, not closed
    second = open_client("transactions", bootstrap, topic, worker=5, process=1)
    try:
        done = second.invoke(txn([(1, 3000)]))
        assert done["type"] == OK, done
    finally:
        second.close()


def test_group_member_fields_events_and_commit(kafka_cluster, topic):
    client = open_client("group", kafka_cluster.kafka.bootstrap(), topic, group_id=f"g-{topic}")
    try:
        sub = client.invoke({"f": "subscribe", "value": topic})
        assert sub == {"type": OK, "f": "subscribe", "value": topic, "node": "all", "group": f"g-{topic}",
                       "isolation": "read_committed"}
        read = poll_until(client, 1)
        assert read
        events = client.take_events()
        assert events and events[0]["f"] == "rebalance" and events[0]["type"] == OK
        assert events[0]["value"]["assigned"] == [0, 1, 2] and events[0]["group"] == f"g-{topic}"
        commit = client.invoke({"f": "commit", "value": None})
        assert commit["type"] == OK and commit["group"] == f"g-{topic}", commit
        assert all(commit["value"][str(p)] == pairs[-1][0] + 1 for p, pairs in read.items())
        async_commit = client.invoke({"f": "commit", "value": None, "async": True})
        assert async_commit["type"] == OK, async_commit
    finally:
        client.close()
    revoked = client.take_events()
    assert revoked and revoked[-1]["value"]["revoked"] == [0, 1, 2]


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
