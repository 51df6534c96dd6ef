"""Plain confluent-kafka produce/read helpers for tests (not the workload under test)."""
from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


def produce(bootstrap: str, topic: str, values: list[int], partition: int | None = None,
            timeout_s: float = 60.0) -> list[tuple[int, int, int]]:
    """Produce with acks=all; return (partition, offset, value) of every acknowledged message."""
    acked: list[tuple[int, int, int]] = []
    errors: list[str] = []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), int(msg.value())))
        else:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": int(timeout_s * 1000) - 1000, "linger.ms": 5, "log_level": 0})
    for v in values:
        kwargs = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=str(v).encode(), key=str(v).encode(), on_delivery=on_delivery, **kwargs)
        p.poll(0)
    p.flush(timeout_s)
    return acked


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> dict[int, dict[int, int]]:
    """Every partition from its start to the current end: {partition: {offset: value}}."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
    out: dict[int, dict[int, int]] = {p: {} for p in range(partitions)}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while any(len(out[p]) < ends[p] and (max(out[p], default=-1) + 1) < ends[p] for p in out):
            if time.monotonic() > deadline:
                break
            for m in c.consume(500, timeout=1):
                if m.error() is None:
                    out[m.partition()][m.offset()] = int(m.value())
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    pass
    finally:
        c.close()
    return out
