"""What the runner's sampler thread reads, every ``sample_interval`` seconds,
and how each read becomes a history op (the history contract: history/ops.py,
``sample`` and ``offsets``; docs/design.md, "The history").

* ``metadata_sample``: the active controller and, as its broker sees them,
  each partition's leader, ISR and epoch (a ``sample`` event). A view that
  cannot be had from the controller is no sample: a stale one is worse.
* ``GroupOffsetSampler``: a consumer group's committed offsets, read by
  Kafka's OffsetFetch to the group coordinator, as an ``offsets`` op: an invoke when
  the request goes out and a completion when the answer comes, so the
  checkers know the read happened in between (checkers/committed_offsets.py:
  a committed offset changes only by a commit of its group). The runner
  takes one more after the final drain (``final``).

The OffsetFetch goes through a consumer of the group that never subscribes
(``Consumer.committed``: it joins nothing, so it is no member), not through
``AdminClient.list_consumer_group_offsets``: with confluent-kafka 2.16.1 that
call killed the process with SIGSEGV at the first read against Kafka 4.3.1
(twice: a run, and a bare call for a group with no offsets).

Side effects at the edge: the reads and the recording; what the values mean
is the checkers'.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from confluent_kafka import Consumer, TopicPartition

from history.ops import INFO, INVOKE, OFFSET_SAMPLER, OFFSETS, OK, SAMPLE, SAMPLER

log = logging.getLogger(__name__)

# librdkafka's "no offset" (OFFSET_INVALID): the group has not committed the partition.
NO_OFFSET = -1001


def metadata_sample(kafka: Any, topic: str) -> dict[str, Any] | None:
    """A ``sample`` event from the active controller's view, or None when it cannot be had."""
    controller = kafka.active_controller()
    states = kafka.authoritative_partition_states(topic, controller) if controller else None
    if states is None:
        return None
    return {"process": SAMPLER, "type": OK, "f": SAMPLE, "value": {
        "controller": controller,
        "partitions": {str(s.partition): {"leader": s.leader, "isr": list(s.isr), "epoch": s.epoch}
                       for s in states}}}


def controller_partition_states(kafka: Any, topic: str) -> list:
    """Leaders and ISRs for the pre-drain wait: the active controller's view
    when it can be had (another broker's may be stale), else any broker's."""
    controller = kafka.active_controller()
    states = kafka.authoritative_partition_states(topic, controller) if controller else None
    return states if states is not None else kafka.partition_states(topic)


def offsets_value(topic_partitions: list[Any]) -> dict[str, int | None]:
    """The ``offsets`` completion value of an answer's topic partitions: the
    committed offset, null for none, and partitions with an error left out."""
    out: dict[str, int | None] = {}
    for tp in sorted(topic_partitions, key=lambda tp: tp.partition):
        if tp.error is not None:
            continue
        out[str(tp.partition)] = None if tp.offset < 0 else int(tp.offset)
    return out


class GroupOffsetSampler:
    """Reads one group's committed offsets of the run's topic and records each
    read. ``sample`` may be called from two threads (the sampler's, and the
    final phase's last read): one read at a time, so the invoke and completion
    of a read pair up in the history."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int,
                 record: Callable[[dict], Any], timeout_s: float = 5.0):
        self.group, self.topic, self.partitions = group, topic, partitions
        self.record = record
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._final = False           # the final read is the last: later calls read nothing
        self._reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                 "enable.auto.commit": False, "enable.auto.offset.store": False,
                                 "socket.timeout.ms": int(timeout_s * 1000),
                                 "socket.connection.setup.timeout.ms": int(timeout_s * 1000)})

    def sample(self, final: bool = False) -> None:
        """One read, recorded as an invoke and its completion; never raises."""
        extra = {"final": True} if final else {}
        with self._lock:
            if self._final:
                return
            self._final = final
            self.record({"process": OFFSET_SAMPLER, "type": INVOKE, "f": OFFSETS, "value": {"group": self.group},
                         "group": self.group, **extra})
            try:
                tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
                answer = self._reader.committed(tps, timeout=self.timeout_s)
                done = {"type": OK, "value": offsets_value(answer)}
            except Exception as exc:  # noqa: BLE001 - no answer: the op says so, the run goes on
                log.debug("committed offsets of %s: %s", self.group, exc)
                done = {"type": INFO, "value": None, "error": str(exc)[:300]}
            self.record({"process": OFFSET_SAMPLER, "f": OFFSETS, "group": self.group, **done, **extra})

    def close(self) -> None:
        """Release the reader (it never joined the group: nothing to leave)."""
        try:
            self._reader.close()
        except Exception as exc:  # noqa: BLE001
            log.debug("closing the offsets reader: %s", exc)
