"""The final drain on the real 3-node cluster proves it is complete: before it,
the wait sees every partition's high watermark cover the acknowledged writes;
every drain completion records the watermarks, the end it read to and the wait."""
from __future__ import annotations

import random

import pytest
from confluent_kafka import Producer

from history.ops import read_history
from history.writer import HistoryWriter
from history.recorder import Recorder
from workloads import ClientContext, QueueClient
from workloads.drain import WatermarkProbe, drain
from workloads.drain_wait import partition_ready, wait_for_drain

pytestmark = pytest.mark.cluster

P = 3


def test_drain_records_watermarks_end_and_wait(kafka_cluster, tmp_path):
    kafka = kafka_cluster.kafka
    topic = f"dc-{random.randrange(1 << 30):08x}"
    kafka.create_topic(topic, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    rec = Recorder(HistoryWriter(tmp_path / "history.jsonl"))
    client = QueueClient()
    client.open(ClientContext(bootstrap=kafka.bootstrap(), topic=topic, partitions=P, process=0))
    rng = random.Random(11)
    counters = [0] * P
    try:
        for _ in range(150):
            batch = []
            for _ in range(rng.randint(1, 3)):
                p = rng.randrange(P - 1)  # partition P-1 gets nothing: an empty partition drains too
                batch.append([p, counters[p], None])
                counters[p] += 1
            rec.append({"process": 0, "type": "invoke", "f": "send", "value": batch})
            comp = client.invoke({"f": "send", "value": batch})
            assert comp["type"] == "ok", comp
            rec.append({"process": 0, **comp})
    finally:
        client.close()
    acked = {(p, off): v for o in read_history(tmp_path / "history.jsonl")
             if o["f"] == "send" and o["type"] == "ok" for p, v, off in o["value"]}
    want_max = {p: max(off for (q, off) in acked if q == p) for p in range(P - 1)}
    assert rec.max_acked == want_max and P - 1 not in rec.max_acked

    probe = WatermarkProbe(kafka.bootstrap(), topic, None)
    try:
        waits = wait_for_drain(lambda: kafka.partition_states(topic), probe, dict(rec.max_acked), P, 30)
    finally:
        probe.close()
    assert all(w["reached"] for w in waits.values()), waits
    for p in range(P - 1):
        assert waits[p]["why"] == (f"high watermark {want_max[p] + 1} >= {want_max[p] + 1} "
                                   f"(acknowledged up to offset {want_max[p]})"), waits[p]
    assert waits[P - 1]["why"] == "high watermark 0, no acknowledged write"
    assert 0 <= waits[0]["waited_s"] < 30

    done = drain(kafka.bootstrap(), topic, P, None, rec.append, 60, batch=50,
                 max_acked=dict(rec.max_acked), wait=waits)
    rec.writer.close()
    assert done == {p: True for p in range(P)}

    ops = list(read_history(tmp_path / "history.jsonl"))
    drains = [o for o in ops if o.get("drain") and o["type"] != "invoke"]
    read: dict[tuple[int, int], int] = {}
    for p in range(P):
        mine = [o for o in drains if o["process"] == 1_000_000 + p]
        assert mine and all(o["type"] == "ok" for o in mine), mine[-1:]
        m = want_max.get(p)
        for o in mine:
            wm = o["watermarks"]
            high = m + 1 if m is not None else 0
            assert wm == {"log_start": 0, "high": high, "stable": high, "max_acked": m}
            assert wm["high"] >= (m if m is not None else -1) + 1
            assert o["wait"] == waits[p]
        last = mine[-1]
        assert last["end"] == last["watermarks"]["high"]
        ends = [o["end"] for o in mine]
        assert ends == sorted(ends)                  # each op says how far the drain had read
        for o in mine:
            for off, v in o["value"][str(p)]:
                assert off < o["end"]
                read[(p, off)] = v
    assert read == acked


def _txn_producer(bootstrap: str, txn_id: str, timeout_ms: int) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms})
    producer.init_transactions(30)
    return producer


def test_a_transaction_left_open_holds_the_drain_until_its_coordinator_aborts_it(kafka_cluster, tmp_path):
    """A producer that stops inside a transaction holds the partition's last
    stable offset; committed records past it are in the log. The drain must
    not call the partition complete at the last stable offset (librdkafka's
    read_committed "high watermark"): it ends info while the transaction is
    open, and the wait holds it until the coordinator aborts it."""
    kafka = kafka_cluster.kafka
    topic = f"lso-{random.randrange(1 << 30):08x}"
    kafka.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    hanging = _txn_producer(kafka.bootstrap(), f"{topic}-hanging", 12_000)  # aborted 12-22 s on
    hanging.begin_transaction()
    hanging.produce(topic, value=b"1", partition=0)
    hanging.flush(30)                                   # offset 0, its transaction left open
    committer = _txn_producer(kafka.bootstrap(), f"{topic}-committer", 30_000)
    committer.begin_transaction()
    committer.produce(topic, value=b"2", partition=0)
    committer.commit_transaction(30)                    # offset 1 and its COMMIT marker at 2

    rec = Recorder(HistoryWriter(tmp_path / "history.jsonl"))
    done = drain(kafka.bootstrap(), topic, 1, None, rec.append, 4, max_acked={0: 1})
    assert done == {0: False}
    held = [o for o in read_history(tmp_path / "history.jsonl") if o["type"] != "invoke"][-1]
    # the committed record is at 1 (its marker at 2 follows the commit asynchronously)
    assert held["type"] == "info" and held["watermarks"]["high"] in (2, 3) and held["watermarks"]["stable"] == 0
    assert "a transaction still open" in held["error"], held["error"]

    probe = WatermarkProbe(kafka.bootstrap(), topic, None)
    try:
        assert not partition_ready(kafka.partition_states(topic)[0], probe([0])[0], 1)[0]
        waits = wait_for_drain(lambda: kafka.partition_states(topic), probe, {0: 1}, 1, 60)
    finally:
        probe.close()
    assert waits[0]["reached"], waits                  # aborted on transaction.timeout.ms
    done = drain(kafka.bootstrap(), topic, 1, None, rec.append, 30, max_acked={0: 1}, wait=waits)
    rec.writer.close()
    assert done == {0: True}
    last = [o for o in read_history(tmp_path / "history.jsonl") if o["type"] != "invoke"][-1]
    assert last["type"] == "ok" and last["watermarks"]["stable"] == last["watermarks"]["high"] == last["end"] == 4
    read = [v for o in read_history(tmp_path / "history.jsonl") if o["type"] == "ok" for _, v in o["value"]["0"]]
    assert read == [2]                                   # the committed record, not the aborted one


def _strip(ops: list[dict]) -> list[dict]:
    return [{k: v for k, v in o.items() if k not in ("index", "time")} for o in ops]


def test_a_drain_in_processes_records_what_one_in_threads_records(kafka_cluster, tmp_path):
    """The runner's drain (a process per partition, its ops written as the
    process encoded them: ``record_text``) and the drain in threads write the
    same ops, in the same order per partition, and the recorder counts them
    alike; the drain with ``record`` only (decoded in this process) too."""
    kafka = kafka_cluster.kafka
    topic = f"dp-{random.randrange(1 << 30):08x}"
    kafka.create_topic(topic, partitions=P, replication_factor=3, config={"min.insync.replicas": 2})
    producer = Producer({"bootstrap.servers": kafka.bootstrap(), "acks": "all", "linger.ms": 5})
    for i in range(3000):
        producer.produce(topic, value=str(i).encode(), partition=i % (P - 1))   # partition P-1 stays empty
    assert producer.flush(30) == 0
    histories = {}
    for how, kwargs in (("threads", {"in_processes": False}), ("text", {"record_text": True}),
                        ("decoded", {})):
        rec = Recorder(HistoryWriter(tmp_path / how / "history.jsonl", columnar=False))
        if kwargs.get("record_text"):
            kwargs = {"record_text": rec.append_text}
        assert drain(kafka.bootstrap(), topic, P, None, rec.append, 60, batch=400, **kwargs) == \
            {p: True for p in range(P)}
        rec.writer.close()
        ops = list(read_history(tmp_path / how / "history.jsonl"))
        histories[how] = ({p: _strip([o for o in ops if o["process"] == 1_000_000 + p]) for p in range(P)},
                          dict(rec.counts), rec.outstanding)
    by_partition, counts, outstanding = histories["threads"]
    assert sum(len(o["value"][str(p)]) for p in range(P) for o in by_partition[p] if o["type"] == "ok") == 3000
    assert outstanding == {} and counts[("poll", "ok")] >= P
    for how in ("text", "decoded"):
        assert histories[how] == histories["threads"], how
