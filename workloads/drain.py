"""The final drain: read every partition from its start to its end.

For each partition a fresh consumer (its own throwaway group, no commits)
asks the partition's high watermark at drain start, assigns itself the
partition from the beginning and consumes until its position reaches that
watermark. Every batch read is recorded as one poll op of process
``process_base + partition``::

    {"process": q, "type": "invoke", "f": "poll", "drain": True, "value": None}
    {"process": q, "type": "ok", "f": "poll", "drain": True,
     "value": {"<p>": [[offset, value], ...]}}

An op completes ``ok`` when its call returned messages, or with
``{"<p>": []}`` when the partition turned out to be fully read (so an empty
partition is recorded as drained too). Consumer errors and empty fetches are
retried inside the op. When the timeout ends the drain of a partition before
its end, that partition's last op is an ``info`` completion with value null
and the reason in ``error`` (an outstanding op, or a new invoke/info pair), so
a partition that did not complete always has a non-ok drain op in the history.
"""
from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from workloads.core import INFO, OK, librdkafka_logger, merge_settings
from workloads.queue import shape_poll, errors_text

log = logging.getLogger(__name__)

#: Drain ops of partition p run as process DRAIN_PROCESS_BASE + p by default;
#: pass the runner's next free process number instead.
DRAIN_PROCESS_BASE = 1_000_000

Record = Callable[[dict], dict]


def drain_settings(bootstrap: str, consumer_config: dict | None, partition: int) -> dict[str, Any]:
    defaults = {
        "bootstrap.servers": bootstrap,
        "client.id": f"kchaos-drain-{partition}",
        "group.id": f"kchaos-drain-{uuid.uuid4().hex[:12]}",
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    }
    conf = merge_settings(defaults, consumer_config)
    # Not overridable: a drain never commits and must see the partition's end.
    conf.update({"enable.auto.commit": False, "enable.partition.eof": True,
                 "logger": librdkafka_logger()})
    return conf


def drain(bootstrap: str, topic: str, partitions: int | Iterable[int], consumer_config: dict | None,
          record: Record, timeout_s: float, *, process_base: int = DRAIN_PROCESS_BASE,
          batch: int = 1000, node: str | None = None, max_workers: int = 4) -> dict[int, bool]:
    """Read each partition from its beginning to its high watermark at drain
    start, recording every batch; return {partition: completed}. ``partitions``
    is a count (0..P-1) or the partition numbers. All partitions share one
    deadline, ``timeout_s`` from now."""
    parts = list(range(partitions)) if isinstance(partitions, int) else [int(p) for p in partitions]
    deadline = time.monotonic() + timeout_s
    if not parts:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(parts))),
                            thread_name_prefix="kchaos-drain") as pool:
        done = pool.map(lambda p: _drain_partition(bootstrap, topic, p, consumer_config, record, deadline,
                                                   process_base + p, batch, node), parts)
        return dict(zip(parts, done))


class _Ops:
    """Invoke/complete pairs for one drain process."""

    def __init__(self, record: Record, process: int, node: str | None):
        self.record, self.process, self.node = record, process, node
        self.open = False

    def _op(self, typ: str, value: Any, error: str | None = None) -> dict:
        op = {"process": self.process, "type": typ, "f": "poll", "drain": True, "value": value}
        if error is not None:
            op["error"] = error
        if self.node is not None:
            op["node"] = self.node
        return op

    def invoke(self) -> None:
        if not self.open:
            self.record(self._op("invoke", None))
            self.open = True

    def complete(self, typ: str, value: Any, error: str | None = None) -> None:
        self.invoke()
        self.record(self._op(typ, value, error))
        self.open = False


def _drain_partition(bootstrap: str, topic: str, p: int, consumer_config: dict | None, record: Record,
                     deadline: float, process: int, batch: int, node: str | None) -> bool:
    ops = _Ops(record, process, node)
    key = str(p)
    tp = TopicPartition(topic, p)
    high: int | None = None
    position = -1                      # next offset to read, as far as we know
    last_errors: list[Any] = []
    consumer = None
    try:
        consumer = Consumer(drain_settings(bootstrap, consumer_config, p))
        while high is None and time.monotonic() < deadline:
            try:
                low, high = consumer.get_watermark_offsets(
                    tp, timeout=max(0.1, min(5.0, deadline - time.monotonic())), cached=False)
            except KafkaException as exc:
                last_errors = [exc.args[0]]
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        if high is None:
            ops.complete(INFO, None, f"drain of partition {p} incomplete: no high watermark before the timeout"
                         + (f" ({errors_text(last_errors)})" if last_errors else ""))
            return False
        if high <= low:
            ops.complete(OK, {key: []})
            return True
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        while time.monotonic() < deadline:
            ops.invoke()
            remaining = deadline - time.monotonic()
            try:
                msgs = consumer.consume(batch, max(0.0, min(1.0, remaining)))
            except KafkaException as exc:
                last_errors = [exc.args[0]]
                log.debug("drain %s[%d]: %s", topic, p, exc)
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            value, errors = shape_poll(msgs)
            if errors:
                last_errors = errors
                log.debug("drain %s[%d]: %s", topic, p, errors_text(errors))
            for m in msgs:
                if m.error() is None:
                    position = max(position, m.offset() + 1)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    position = max(position, m.offset())
            reached = position >= high
            if value.get(key) or reached:
                ops.complete(OK, {key: value.get(key, [])})
            if reached:
                return True
        ops.complete(INFO, None, f"drain of partition {p} incomplete: read to offset {max(position, 0)} "
                     f"of {high} before the timeout" + (f" ({errors_text(last_errors)})" if last_errors else ""))
        return False
    except Exception as exc:
        log.warning("drain %s[%d] failed: %s: %s", topic, p, type(exc).__name__, exc)
        try:
            ops.complete(INFO, None, f"drain of partition {p} failed: {type(exc).__name__}: {exc}")
        except Exception as rec_exc:  # the history itself is broken: nothing more to record
            log.error("drain %s[%d]: cannot record: %s", topic, p, rec_exc)
        return False
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                pass
