"""The queue workload against the real 3-node cluster."""
from __future__ import annotations

import random
import time

import pytest

from history.ops import read_history
from history.writer import HistoryWriter
from workloads import ClientContext, QueueClient, drain

pytestmark = pytest.mark.cluster

P = 3


def open_client(bootstrap: str, topic: str, process: int = 0, **kw) -> QueueClient:
    c = QueueClient()
    c.open(ClientContext(bootstrap=bootstrap, topic=topic, partitions=P, process=process, **kw))
    return c


@pytest.fixture(scope="module")
def loaded(kafka_cluster):
    """A topic with 200 recorded send ops through one client: (topic, completions)."""
    kafka = kafka_cluster.kafka
    topic = f"wl-{random.randrange(1 << 30):08x}"
    kafka.create_topic(topic, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    rng = random.Random(7)
    counters = [0] * P
    client = open_client(kafka.bootstrap(), topic, node="all")
    sends = []
    try:
        for _ in range(200):
            batch = []
            for _ in range(rng.randint(1, 4)):
                p = rng.randrange(P)
                batch.append([p, counters[p], None])
                counters[p] += 1
            op = {"f": "send", "value": batch}
            sends.append((op, client.invoke(op)))
    finally:
        client.close()
    return topic, sends


def acked(sends) -> list[tuple[int, int, int]]:
    return [(p, off, v) for _, comp in sends for p, v, off in comp["value"]]


def test_sends_are_ok_with_increasing_offsets(loaded):
    _, sends = loaded
    assert all(comp["type"] == "ok" for _, comp in sends), [c for _, c in sends if c["type"] != "ok"][:3]
    for op, comp in sends:
        assert comp["f"] == "send" and comp["node"] == "all"
        assert [[p, v] for p, v, _ in comp["value"]] == [[p, v] for p, v, _ in op["value"]]
        assert op["value"][0][2] is None          # the invocation is left alone
    last = {}
    for p, off, v in acked(sends):
        assert isinstance(off, int) and off > last.get(p, -1)
        last[p] = off


def test_assign_mode_poll_reads_them_back(kafka_cluster, loaded):
    topic, sends = loaded
    want = {(p, off, v) for p, off, v in acked(sends)}
    client = open_client(kafka_cluster.kafka.bootstrap(), topic, process=1, poll_max_messages=100)
    seen: dict[tuple[int, int], int] = {}
    try:
        a = client.invoke({"f": "assign", "value": list(range(P))})
        assert a == {"type": "ok", "f": "assign", "value": [0, 1, 2]}
        deadline = time.monotonic() + 30
        while len(seen) < len(want) and time.monotonic() < deadline:
            comp = client.invoke({"f": "poll", "value": None})
            assert comp["type"] == "ok", comp
            for key, pairs in comp["value"].items():
                offsets = [o for o, _ in pairs]
                assert offsets == sorted(offsets)
                for o, v in pairs:
                    assert (int(key), o) not in seen
                    seen[(int(key), o)] = v
        # Keeping a partition in a new assignment continues where it was.
        again = client.invoke({"f": "assign", "value": [0, 1]})
        assert again["type"] == "ok"
        assert client.invoke({"f": "poll", "value": None}) == {"type": "ok", "f": "poll", "value": {}}
    finally:
        client.close()
    assert {(p, o, v) for (p, o), v in seen.items()} == want


def test_drain_reads_every_acknowledged_message(kafka_cluster, loaded, tmp_path):
    topic, sends = loaded
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        done = drain(kafka_cluster.kafka.bootstrap(), topic, P, {}, writer.append, timeout_s=60,
                     process_base=100, batch=50)
    assert done == {0: True, 1: True, 2: True}
    ops = list(read_history(path))
    assert ops and all(op["f"] == "poll" and op["drain"] is True for op in ops)
    read = set()
    by_process: dict[int, list[dict]] = {}
    for op in ops:                              # partitions drain in parallel: pair per process
        by_process.setdefault(op["process"], []).append(op)
    assert sorted(by_process) == [100, 101, 102]
    for process, pops in by_process.items():
        for inv, comp in zip(pops[::2], pops[1::2]):
            assert inv["type"] == "invoke" and inv["value"] is None
            assert comp["type"] == "ok" and list(comp["value"]) == [str(process - 100)], comp
            for key, pairs in comp["value"].items():
                read |= {(int(key), o, v) for o, v in pairs}
    assert set(acked(sends)) <= read
    assert len(read) == len(acked(sends))


def test_send_to_a_missing_topic_fails(kafka_cluster):
    # A short propagation window makes librdkafka give up on the topic before
    # the message times out; the messages never had a leader, so never left.
    client = open_client(kafka_cluster.kafka.bootstrap(), "no-such-topic-kchaos", op_timeout_s=6,
                         producer_config={"topic.metadata.propagation.max.ms": 500})
    try:
        first = client.invoke({"f": "send", "value": [[0, 1, None], [1, 1, None]]})
        assert first["type"] == "fail", first
        assert first["value"] == [[0, 1, None], [1, 1, None]] and first["outcomes"] == ["fail", "fail"]
        assert "UNKNOWN_TOPIC" in first["error"]
        second = client.invoke({"f": "send", "value": [[0, 2, None]]})
        assert second["type"] == "fail" and "refused by produce()" in second["error"], second
    finally:
        client.close()


def test_too_large_messages_fail(kafka_cluster, topic_name):
    kafka = kafka_cluster.kafka
    kafka.create_topic(topic_name, partitions=P, replication_factor=3, config={"max.message.bytes": 2000})
    bootstrap = kafka.bootstrap()
    # Rejected by the broker (topic limit) ...
    client = open_client(bootstrap, topic_name, message_bytes=5000)
    try:
        comp = client.invoke({"f": "send", "value": [[0, 1, None]]})
        assert comp["type"] == "fail" and "MSG_SIZE_TOO_LARGE" in comp["error"], comp
    finally:
        client.close()
    # ... and refused by the client itself (message.max.bytes), never queued.
    client = open_client(bootstrap, topic_name, message_bytes=2_000_000)
    try:
        comp = client.invoke({"f": "send", "value": [[1, 1, None], [2, 1, None]]})
        assert comp["type"] == "fail" and comp["outcomes"] == ["fail", "fail"], comp
        assert "refused by produce()" in comp["error"]
    finally:
        client.close()


def test_mixed_batch_keeps_acknowledged_offsets(kafka_cluster, topic_name):
    kafka = kafka_cluster.kafka
    kafka.create_topic(topic_name, partitions=P, replication_factor=3)
    client = open_client(kafka.bootstrap(), topic_name)
    try:
        assert client.invoke({"f": "send", "value": [[0, 0, None]]})["type"] == "ok"
        # Partition 7 does not exist: produce() refuses it (metadata is known by now).
        comp = client.invoke({"f": "send", "value": [[0, 1, None], [7, 1, None], [1, 1, None]]})
    finally:
        client.close()
    assert comp["type"] == "info", comp
    assert comp["outcomes"] == ["ok", "fail", "ok"]
    (p0, v0, o0), (p7, v7, o7), (p1, v1, o1) = comp["value"]
    assert (p0, v0, o0) == (0, 1, 1) and (p7, v7, o7) == (7, 1, None) and (p1, v1, o1) == (1, 1, 0)
    assert comp["error"].startswith("1/3 _UNKNOWN_PARTITION")


def test_unreachable_broker_times_out_as_info(kafka_cluster, topic_name):
    node = kafka_cluster.kafka.nodes[0]
    client = open_client(f"{node.address}:9", topic_name, op_timeout_s=3, node=node.name)
    try:
        t0 = time.monotonic()
        comp = client.invoke({"f": "send", "value": [[0, 1, None], [1, 1, None]]})
        took = time.monotonic() - t0
        assert comp["type"] == "info" and comp["node"] == node.name, comp
        assert comp["value"] == [[0, 1, None], [1, 1, None]] and comp["outcomes"] == ["info", "info"]
        assert took < 3.2, took
        t0 = time.monotonic()
        assert client.invoke({"f": "assign", "value": [0]})["type"] == "ok"
        poll = client.invoke({"f": "poll", "value": None})
        assert poll["type"] in ("ok", "fail", "info") and not poll["value"]
        assert time.monotonic() - t0 < 3
    finally:
        t0 = time.monotonic()
        client.close()
        assert time.monotonic() - t0 < 5


def test_subscribe_mode_reads_through_the_group(kafka_cluster, loaded):
    topic, sends = loaded
    want = set(acked(sends))
    client = open_client(kafka_cluster.kafka.bootstrap(), topic, process=2, mode="subscribe",
                         group_id=f"g-{topic}", poll_timeout_s=0.5)
    seen = set()
    try:
        assert client.invoke({"f": "subscribe", "value": topic}) == {"type": "ok", "f": "subscribe",
                                                                    "value": topic}
        deadline = time.monotonic() + 60
        while seen != want and time.monotonic() < deadline:
            comp = client.invoke({"f": "poll", "value": None})
            assert comp["type"] == "ok", comp
            seen |= {(int(k), o, v) for k, pairs in comp["value"].items() for o, v in pairs}
    finally:
        client.close()
    assert seen == want


def test_drain_of_empty_partitions_and_of_an_unreachable_cluster(kafka_cluster, topic_name):
    kafka = kafka_cluster.kafka
    kafka.create_topic(topic_name, partitions=P, replication_factor=3)
    ops: list[dict] = []
    assert drain(kafka.bootstrap(), topic_name, [0, 2], None, ops.append, timeout_s=30) == {0: True, 2: True}
    comps = sorted((op for op in ops if op["type"] != "invoke"), key=lambda op: op["process"])
    assert [(op["type"], op["value"]) for op in comps] == [("ok", {"0": []}), ("ok", {"2": []})]

    ops.clear()
    t0 = time.monotonic()
    node = kafka.nodes[1]
    assert drain(f"{node.address}:9", topic_name, 2, None, ops.append, timeout_s=2, node=node.name) == \
        {0: False, 1: False}
    assert time.monotonic() - t0 < 4
    assert sorted(op["type"] for op in ops) == ["info", "info", "invoke", "invoke"]
    for op in ops:
        assert op["drain"] is True and op["f"] == "poll" and op["node"] == node.name
        if op["type"] == "info":
            assert op["value"] is None and "incomplete" in op["error"]
