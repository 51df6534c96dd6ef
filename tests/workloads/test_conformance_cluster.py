"""The client protocol's conformance suite (docs/design.md, "The client
protocol"): every client, librdkafka in the runner's process and the Java
driver (workloads/java_driver) in a child process, against the one real
cluster of the session. Each op's completion fields; ok / fail / info of a
refused send, a send timed out, an aborted transaction, a fenced producer, a
commit whose outcome is unknown; a crash whose successor takes the same
transactional id; a group member on both group protocols.

Timeouts and the unknown commit are made with the project's own pause fault
(every broker SIGSTOPped, broker/lifecycle.py ``pause``): a request sent then
is neither answered nor refused. What only the Java driver has (transactions
v2, pipelined sends) is in test_java_driver_cluster.py."""
from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable

import pytest

from harness.client_config import java_driver
from history.ops import FAIL, INFO, OK
from infra.distribution import DEFAULT_KAFKA_VERSION
from infra.node import parallel
from workloads.client import Client, ClientContext
from workloads.java_client import JAVA_KINDS
from workloads.kinds import KINDS

pytestmark = pytest.mark.cluster

P = 3
DRIVERS = ("librdkafka", "java")
#: Per driver, a seed of its own: the transactional ids (kchaos-<seed>-w<worker>) never meet
#: another driver's, nor those of test_java_driver_cluster.py on the same cluster (seed 1).
SEEDS = {"librdkafka": 2901, "java": 2902}


class _Workload:
    txn_send_offsets = False


def make_client(driver: str, kind: str, worker: int = 0) -> Client:
    """The client ``driver`` runs for workload ``kind`` (workloads/kinds.py; workloads/java_client.py)."""
    make: Callable[[Any, int, int], Client] = KINDS[kind].make_client if driver == "librdkafka" else JAVA_KINDS[kind]
    return make(_Workload(), SEEDS[driver], worker)


def open_client(driver: str, kind: str, bootstrap: str, topic: str, process: int = 0, worker: int = 0,
                **kw) -> Client:
    client = make_client(driver, kind, worker)
    command = java_driver(DEFAULT_KAFKA_VERSION) if driver == "java" else ()
    client.open(ClientContext(bootstrap=bootstrap, topic=topic, partitions=P, process=process, driver=command,
                              node="all", **kw))
    return client


def new_topic(kafka_cluster) -> str:
    name = f"conf-{random.randrange(1 << 30):08x}"
    kafka_cluster.kafka.create_topic(name, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    return name


@pytest.fixture(scope="module")
def topic(kafka_cluster):
    """A topic with 30 messages on it, for the group members to read."""
    name = new_topic(kafka_cluster)
    producer = open_client("librdkafka", "assign", kafka_cluster.kafka.bootstrap(), name, process=80)
    try:
        done = producer.invoke({"f": "send", "value": [[v % P, v, None] for v in range(30)]})
        assert done["type"] == OK, done
    finally:
        producer.close()
    return name


@pytest.fixture(params=DRIVERS)
def driver(request) -> str:
    return request.param


def events_of(client: Client, completion: dict) -> list[dict]:
    """The rebalance events an op brought, as the runner takes them (harness/worker_loops.py):
    in its completion (librdkafka's group member) or from the client (a driver's)."""
    return completion.pop("events", None) or client.take_events()


def poll_until(client: Client, want: int, timeout_s: float = 30.0, events: list | None = None) -> dict[int, list]:
    """Poll until ``want`` messages were read; partition -> [[offset, value], ...]. The
    polls' rebalance events go to ``events``."""
    seen: dict[int, list] = {}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, seen.values())) < want and time.monotonic() < deadline:
        comp = client.invoke({"f": "poll", "value": None})
        (events if events is not None else []).extend(events_of(client, comp))
        assert comp["type"] == OK and comp["f"] == "poll" and comp["node"] == "all", comp
        for key, pairs in comp["value"].items():
            seen.setdefault(int(key), []).extend(pairs)
    return seen


def committed_values(driver: str, bootstrap: str, topic: str, partitions: list[int], until: set[int],
                     timeout_s: float = 20.0) -> set[int]:
    """The values a read_committed reader of ``driver`` finds on ``partitions``, read until
    ``until`` was seen (each partition is read in offset order: what stands before a value
    seen was read too)."""
    reader = open_client(driver, "assign", bootstrap, topic, process=90)
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        assert reader.invoke({"f": "assign", "value": partitions})["type"] == OK
        while not until <= seen and time.monotonic() < deadline:
            comp = reader.invoke({"f": "poll", "value": None})
            assert comp["type"] == OK, comp
            seen.update(v for pairs in comp["value"].values() for _, v in pairs)
        return seen
    finally:
        reader.close()


def txn(values, abort=False) -> dict:
    op = {"f": "txn", "value": [["send", p, v] for p, v in values] + [["poll"]]}
    if abort:
        op["abort"] = True
    return op


def test_send_poll_assign_completions(kafka_cluster, driver):
    bootstrap, topic = kafka_cluster.kafka.bootstrap(), new_topic(kafka_cluster)
    producer = open_client(driver, "assign", bootstrap, topic)
    sends = []
    try:
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
    consumer = open_client(driver, "assign", bootstrap, topic, process=1)
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


def test_send_to_a_missing_partition_fails(kafka_cluster, topic, driver):
    """A message for a partition the topic lacks, refused by a producer that knows the topic's
    partitions, never reaches the log: fail, per message. (Before its first metadata librdkafka
    queues it and reports _UNKNOWN_PARTITION, which it also reports for a partition gone from
    metadata after a send: info there, workloads/classify.py.)"""
    client = open_client(driver, "assign", kafka_cluster.kafka.bootstrap(), topic, op_timeout_s=3.0)
    try:
        assert client.invoke({"f": "send", "value": [[0, 100, None]]})["type"] == OK     # metadata known
        comp = client.invoke({"f": "send", "value": [[P + 5, 1, None]]})
        assert comp["type"] == FAIL and comp["value"] == [[P + 5, 1, None]] and comp["outcomes"] == [FAIL], comp
        assert comp["error"].startswith("1/1 ")
    finally:
        client.close()


def test_transactions_commit_abort_and_fields(kafka_cluster, driver):
    """ok when committed, fail when aborted by choice; read_committed never sees the aborted write."""
    bootstrap, topic = kafka_cluster.kafka.bootstrap(), new_topic(kafka_cluster)
    client = open_client(driver, "transactions", bootstrap, topic, worker=3)
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
    values = committed_values(driver, bootstrap, topic, [0, 1, 2], until={1000, 1001, 1003})
    assert {1000, 1001, 1003} <= values and 1002 not in values      # 1003 stands after 1002 on partition 2


def test_a_fenced_producer_never_commits_and_its_successor_does(kafka_cluster, driver):
    bootstrap, topic = kafka_cluster.kafka.bootstrap(), new_topic(kafka_cluster)
    old = open_client(driver, "transactions", bootstrap, topic, worker=4, process=0)
    try:
        first = old.invoke(txn([(0, 2000)]))
        assert first["type"] == OK, first
        new = open_client(driver, "transactions", bootstrap, topic, worker=4, process=1)   # same id: fences the old
        try:
            fenced = old.invoke(txn([(0, 2001)]))
            assert fenced["type"] in (FAIL, INFO) and "fenced" in fenced.get("error", "").lower(), fenced
            after = new.invoke(txn([(0, 2002)]))
            assert after["type"] == OK, after
        finally:
            new.close()
    finally:
        old.close()
    values = committed_values(driver, bootstrap, topic, [0], until={2000, 2002})
    assert {2000, 2002} <= values and 2001 not in values


def pause_all(kafka_cluster) -> None:
    assert all(parallel(lambda b: b.pause(), kafka_cluster.kafka.brokers.values()))


def resume_all(kafka_cluster) -> None:
    parallel(lambda b: b.resume(), kafka_cluster.kafka.brokers.values())


def test_unanswered_requests_are_info_and_a_crashed_instances_successor_commits(heal_cluster, driver):
    """Every broker paused while a transaction polls, after its sends were acknowledged: its
    commit is sent and never answered (info: the outcome unknown); a send then times out
    (info, per message). After the resume the process crashes; its successor, same
    transactional id, fences it and commits, and the unknown transaction is all or nothing."""
    kafka_cluster = heal_cluster
    bootstrap, topic = kafka_cluster.kafka.bootstrap(), new_topic(kafka_cluster)
    # The txn's poll waits its whole poll timeout (partition 2 holds nothing committed), so the
    # pause, 1.5 s in, falls after the sends and before the commit.
    txn_client = open_client(driver, "transactions", bootstrap, topic, worker=5, op_timeout_s=6.0,
                             poll_timeout_s=3.0)
    sender = open_client(driver, "assign", bootstrap, topic, process=1, op_timeout_s=3.0)
    unknown: dict = {}
    try:
        assert txn_client.invoke({"f": "assign", "value": [2]})["type"] == OK
        if driver == "java":
            assert txn_client.identity == {"client": "kafka-clients", "version": DEFAULT_KAFKA_VERSION,
                                           "java": txn_client.identity["java"]}
        assert txn_client.invoke(txn([(0, 3000)]))["type"] == OK       # warm: coordinator, connections
        assert sender.invoke({"f": "send", "value": [[1, 3001, None]]})["type"] == OK
        waiter = threading.Thread(target=lambda: unknown.update(txn_client.invoke(txn([(0, 3002), (1, 3003)]))))
        waiter.start()
        time.sleep(1.5)
        pause_all(kafka_cluster)
        try:
            timed_out = sender.invoke({"f": "send", "value": [[1, 3004, None]]})
            waiter.join(30)
        finally:
            resume_all(kafka_cluster)
        assert timed_out["type"] == INFO and timed_out["outcomes"] == [INFO], timed_out
        assert timed_out["value"] == [[1, 3004, None]] and timed_out["error"].startswith("1/1 ")
        assert unknown["type"] == INFO, unknown
        assert all(type(m[3]) is int for m in unknown["value"][:2]), unknown    # acknowledged: the commit was sent
    finally:
        sender.close()
        jvm = txn_client._proc.proc if driver == "java" else None
        txn_client.crash()
    if jvm is not None:
        assert jvm.poll() is not None             # the driver's JVM killed, not closed
    successor = open_client(driver, "transactions", bootstrap, topic, worker=5, process=2, op_timeout_s=20.0)
    try:
        done = successor.invoke(txn([(0, 3005), (1, 3006)]))
        assert done["type"] == OK, done
    finally:
        successor.close()
    values = committed_values(driver, bootstrap, topic, [0, 1], until={3000, 3005, 3006})
    assert {3000, 3005, 3006} <= values
    assert {3002, 3003} <= values or not {3002, 3003} & values, values


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_member_fields_events_and_commit(kafka_cluster, topic, driver, protocol):
    """A member of either group protocol (KIP-848's "consumer" too): subscribe, rebalance
    events with its partitions, sync and async commits of what it read, revocation at close."""
    group = f"g-{topic}-{driver}-{protocol}"
    client = open_client(driver, "group", kafka_cluster.kafka.bootstrap(), topic, group_id=group,
                         consumer_config={"group.protocol": protocol} if protocol == "consumer" else {})
    try:
        sub = client.invoke({"f": "subscribe", "value": topic})
        assert sub == {"type": OK, "f": "subscribe", "value": topic, "node": "all", "group": group,
                       "isolation": "read_committed"}
        events = events_of(client, sub)
        read = poll_until(client, 1, events=events)
        assert read
        assert events and all(e["f"] == "rebalance" and e["type"] == OK and e["group"] == group for e in events)
        assert {p for e in events for p in e["value"]["assigned"]} == {0, 1, 2}, events
        commit = client.invoke({"f": "commit", "value": None})
        events_of(client, commit)
        assert commit["type"] == OK and commit["group"] == group, commit
        assert all(commit["value"][str(p)] == pairs[-1][0] + 1 for p, pairs in read.items())
        async_commit = client.invoke({"f": "commit", "value": None, "async": True})
        assert async_commit["type"] in (OK, FAIL), async_commit      # fail: nothing new to commit
    finally:
        client.close()
    revoked = client.take_events()
    assert {p for e in revoked for p in e["value"]["revoked"]} == {0, 1, 2}, revoked
