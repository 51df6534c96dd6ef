"""The final drain: read every partition from its start to its end.

Before it, the runner waits until every partition is ready to be drained
(``workloads.drain_wait``). Then, for each partition, in a process of its own
(``workloads.drain_process``), a fresh consumer (its own throwaway group, no commits) asks
the partition's log start offset, high watermark and last stable offset at
drain start, assigns itself the partition from the beginning and consumes
until its position reaches that high watermark.

The high watermark is asked with isolation read_uncommitted and the last
stable offset with read_committed: librdkafka's ListOffsets carries the
consumer's isolation level, so a read_committed consumer's "high watermark"
is the last stable offset. A drain aiming at that would stop in front of a
transaction left open by a crashed producer, call the partition complete,
and leave the committed records past it unread: the checkers would then
report them lost or their transactions torn. Aiming at the real high
watermark, a drain held at an open transaction ends ``info`` instead (the
partition is not complete and nothing past it is judged). Every batch read is recorded as one poll op of
process ``process_base + partition``::

    {"process": q, "type": "invoke", "f": "poll", "drain": True, "value": None}
    {"process": q, "type": "ok", "f": "poll", "drain": True,
     "value": {"<p>": [[offset, value], ...]},
     "watermarks": {"log_start": 0, "high": 120, "stable": 120, "max_acked": 117},
     "end": 120,
     "wait": {"waited_s": 0.4, "reached": True,
              "why": "high watermark 120 >= 118 (acknowledged up to offset 117)"}}

Every drain completion carries ``watermarks`` (measured at drain start; the
log start, high watermark and last stable offset are null when they could
not be had;
``max_acked`` is null when no write to the partition was acknowledged),
``end`` (the offset the drain had read the partition up to, exclusive, when
the op completed; null when nothing could be read) and, when the runner
waited, ``wait`` (the pre-drain wait, the same for every op of a partition).

An op completes ``ok`` when its call returned messages, or with
``{"<p>": []}`` when the partition turned out to be fully read (so an empty
partition is recorded as drained too). Consumer errors and empty fetches are
retried inside the op. Whenever the drain of a partition ends before its
position reaches the high watermark taken at drain start (the timeout, no
watermark, no leader, any error), that partition's last op is an ``info``
completion with value null and the reason in ``error`` (an outstanding op,
or a new invoke/info pair), so a partition that did not complete always has
a non-ok drain op, and a partition whose last drain op is ``ok`` was read to
its recorded ``watermarks.high``.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from history import child_process
from history.ops import INVOKE
from workloads.client import INFO, OK, librdkafka_logger, merge_settings
from workloads.drain_wait import Watermark
from workloads.queue import shape_poll, errors_text

log = logging.getLogger(__name__)

#: Drain ops of partition p run as process DRAIN_PROCESS_BASE + p by default;
#: pass the runner's next free process number instead.
DRAIN_PROCESS_BASE = 1_000_000
#: A partition's drain process still running this long after the drain's
#: deadline is killed (its partition then ends ``info``).
DRAIN_PROCESS_GRACE_S = 30.0

Record = Callable[[dict], Any]
#: Records an op encoded elsewhere: (its process, type, f and more, its JSON text).
RecordText = Callable[[dict, str], None]


def drain_settings(bootstrap: str, consumer_config: dict | None, partition: int,
                   isolation: str = "read_committed") -> dict[str, Any]:
    defaults = {
        "bootstrap.servers": bootstrap,
        "client.id": f"kchaos-drain-{partition}",
        "group.id": f"kchaos-drain-{uuid.uuid4().hex[:12]}",
        "auto.offset.reset": "earliest",
        # Fetches of up to 32 MiB a partition, not librdkafka's 1 MiB: a drain reads a partition
        # from its start, and at 1 MiB a fetch it waited between fetches (3M small records:
        # 130,000 a second at 13% of a core; at 32 MiB 918,000 a second, bound by its own CPU;
        # docs/benchmarks.md, "A 10-minute soak"). A workload's consumer settings may still set them.
        "max.partition.fetch.bytes": 32 << 20,
    }
    conf = merge_settings(defaults, consumer_config)
    # Not overridable: a drain never commits and must see the partition's end;
    # it reads what the log holds as committed (read_committed: a transaction's
    # writes only once committed, never an aborted one), whatever isolation the
    # workload's consumers use, so its ops carry no ``isolation`` (null means
    # read_committed in the history contract). ``isolation`` read_uncommitted
    # is for the consumer that only asks the high watermark (module docstring).
    conf.update({"enable.auto.commit": False, "enable.partition.eof": True,
                 "isolation.level": isolation, "logger": librdkafka_logger()})
    return conf


def _offsets(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """(log start, end) as ``consumer``'s isolation level sees it: the end is
    the high watermark for read_uncommitted, the last stable offset for
    read_committed (module docstring)."""
    low, end = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
    return int(low), int(end)


class WatermarkProbe:
    """Asks partitions' log start offset, high watermark and last stable
    offset (the requests the drain makes at its start): one consumer per
    isolation level."""

    def __init__(self, bootstrap: str, topic: str, consumer_config: dict | None):
        self.topic = topic
        self.uncommitted = Consumer(drain_settings(bootstrap, consumer_config, -1, "read_uncommitted"))
        self.committed = Consumer(drain_settings(bootstrap, consumer_config, -1))

    def __call__(self, partitions: Iterable[int], timeout_s: float = 2.0) -> dict[int, Watermark]:
        out: dict[int, Watermark] = {}
        for p in partitions:
            tp = TopicPartition(self.topic, int(p))
            try:
                low, high = _offsets(self.uncommitted, tp, timeout_s)
            except KafkaException as exc:
                log.debug("watermarks of %s[%d]: %s", self.topic, p, exc)
                out[int(p)] = None
                continue
            try:
                stable: int | None = _offsets(self.committed, tp, timeout_s)[1]
            except KafkaException as exc:
                log.debug("last stable offset of %s[%d]: %s", self.topic, p, exc)
                stable = None
            out[int(p)] = (low, high, stable)
        return out

    def close(self) -> None:
        for consumer in (self.uncommitted, self.committed):
            try:
                consumer.close()
            except Exception:
                pass


# -- the drain ---------------------------------------------------------------------------
def drain(bootstrap: str, topic: str, partitions: int | Iterable[int], consumer_config: dict | None,
          record: Record, timeout_s: float, *, process_base: int = DRAIN_PROCESS_BASE,
          batch: int = 1000, node: str | None = None, max_workers: int = 4,
          max_acked: Mapping[int, int] | None = None,
          wait: Mapping[int, dict] | None = None, in_processes: bool = True,
          record_text: RecordText | None = None) -> dict[int, bool]:
    """Read each partition from its beginning to its high watermark at drain
    start, recording every batch; return {partition: completed}. ``partitions``
    is a count (0..P-1) or the partition numbers. All partitions share one
    deadline, ``timeout_s`` from now. ``max_acked`` (partition -> highest
    acknowledged offset) and ``wait`` (partition -> ``drain_wait.wait_for_drain`` record)
    are recorded on every drain completion. Each partition is read in a
    process of its own (``workloads.drain_process``) unless ``in_processes``
    is False (then in a thread of this one); ``record_text`` (the
    ``Recorder.append_text`` of the history being written) records a process's
    ops as it encoded them, else each is decoded and given to ``record``."""
    parts = list(range(partitions)) if isinstance(partitions, int) else [int(p) for p in partitions]
    deadline = time.monotonic() + timeout_s
    if not parts:
        return {}
    acked = dict(max_acked or {})
    waits = dict(wait or {})
    def one(p: int) -> bool:
        if in_processes:
            return _drain_in_process(bootstrap, topic, p, consumer_config, record, record_text, deadline,
                                     process_base + p, batch, node, acked.get(p), waits.get(p))
        return _drain_partition(bootstrap, topic, p, consumer_config, record, deadline, process_base + p, batch,
                                node, acked.get(p), waits.get(p))
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(parts))),
                            thread_name_prefix="kchaos-drain") as pool:
        return dict(zip(parts, pool.map(one, parts)))


def _drain_in_process(bootstrap: str, topic: str, p: int, consumer_config: dict | None, record: Record,
                      record_text: RecordText | None, deadline: float, process: int, batch: int,
                      node: str | None, max_acked: int | None = None, wait: dict | None = None) -> bool:
    """``_drain_partition`` in a process of its own (``workloads.drain_process``),
    its ops recorded here in the order it made them. A process that cannot
    start: the drain runs in this thread. Each op is recorded by
    ``record_text(what it counts, its text)`` when given (the text written as
    the process encoded it), else by ``record(op)``. One that ends without saying whether
    it completed (it crashed, or was killed at the deadline's grace) leaves its
    partition with an ``info`` completion, as any drain that did not finish."""
    settings = {"bootstrap": bootstrap, "topic": topic, "partition": p, "consumer_config": consumer_config,
                "seconds": deadline - time.monotonic(), "process": process, "batch": batch, "node": node,
                "max_acked": max_acked, "wait": wait, "log_level": log.getEffectiveLevel()}
    try:
        proc = child_process.start("workloads.drain_process", settings, text=False)
    except (OSError, TypeError, ValueError) as exc:     # TypeError/ValueError: settings that are not JSON
        log.info("drain of partition %d in the recording process (%s: %s)", p, type(exc).__name__, exc)
        return _drain_partition(bootstrap, topic, p, consumer_config, record, deadline, process, batch, node,
                                max_acked, wait)
    ops = _Ops(record, process, node, max_acked, wait)
    completed: bool | None = None
    grace = threading.Timer(max(0.0, deadline - time.monotonic()) + DRAIN_PROCESS_GRACE_S, proc.kill)
    grace.daemon = True
    grace.start()
    try:
        for line in proc.stdout:
            head, tab, text = line.partition(b"\t")
            try:
                if not line.endswith(b"\n"):       # the last words of a process killed mid-line
                    raise ValueError("a line cut short")
                msg = json.loads(head)
            except ValueError as exc:
                log.warning("drain of partition %d: a line from its process not recorded (%s)", p, exc)
                continue
            if tab:                 # an op (workloads.drain_process.record)
                if record_text is not None:
                    record_text(msg, text.rstrip(b"\n").decode())
                else:
                    record(json.loads(text))
                ops.open = msg["type"] == INVOKE
                if not ops.open:
                    ops.watermarks, ops.end = msg["watermarks"], msg["end"]
            elif "completed" in msg:
                completed = bool(msg["completed"])
            else:
                child_process.relay_log(msg, log)
    finally:
        grace.cancel()
        proc.stdin.close()
        code = proc.wait()
    if completed is None:
        ops.complete(INFO, None, f"drain of partition {p} incomplete: its process ended with status {code} "
                                 f"before it said whether it read the partition to its end")
        return False
    return completed


class _Ops:
    """Invoke/complete pairs for one drain process; completions carry the
    partition's ``watermarks``, ``end`` and ``wait``."""

    def __init__(self, record: Record, process: int, node: str | None, max_acked: int | None,
                 wait: dict | None):
        self.record, self.process, self.node = record, process, node
        self.open = False
        self.watermarks: dict[str, int | None] = {"log_start": None, "high": None, "stable": None,
                                                    "max_acked": max_acked}
        self.end: int | None = None
        self.wait = wait

    def _op(self, typ: str, value: Any, error: str | None = None) -> dict:
        op = {"process": self.process, "type": typ, "f": "poll", "drain": True, "value": value}
        if error is not None:
            op["error"] = error
        if self.node is not None:
            op["node"] = self.node
        if typ != "invoke":
            op["watermarks"] = dict(self.watermarks)
            op["end"] = self.end
            if self.wait is not None:
                op["wait"] = dict(self.wait)
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
                     deadline: float, process: int, batch: int, node: str | None,
                     max_acked: int | None = None, wait: dict | None = None) -> bool:
    ops = _Ops(record, process, node, max_acked, wait)
    key = str(p)
    tp = TopicPartition(topic, p)
    high: int | None = None
    position = -1                      # next offset to read, as far as we know
    last_errors: list[Any] = []
    consumer = probe = None
    try:
        consumer = Consumer(drain_settings(bootstrap, consumer_config, p))
        probe = Consumer(drain_settings(bootstrap, consumer_config, p, "read_uncommitted"))
        while high is None and time.monotonic() < deadline:
            try:
                low, high = _offsets(probe, tp, max(0.1, min(5.0, deadline - time.monotonic())))
            except KafkaException as exc:
                last_errors = [exc.args[0]]
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        if high is None:
            ops.complete(INFO, None, f"drain of partition {p} incomplete: no high watermark before the timeout"
                         + (f" ({errors_text(last_errors)})" if last_errors else ""))
            return False
        ops.watermarks.update(log_start=low, high=high, stable=_stable_offset(consumer, tp, deadline))
        ops.end = low
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
            pairs = plain_pairs(msgs)
            if pairs is not None:         # the common batch: every message kchaos's, no event
                value = {key: pairs} if pairs else {}
                if pairs:
                    position = max(position, max(offset for offset, _ in pairs) + 1)
            else:
                value, errors = shape_poll(msgs)
                if errors:
                    last_errors = errors
                    log.debug("drain %s[%d]: %s", topic, p, errors_text(errors))
                for m in msgs:
                    if m.error() is None:
                        position = max(position, m.offset() + 1)
                    elif m.error().code() == KafkaError._PARTITION_EOF:
                        position = max(position, m.offset())
            ops.end = max(low, position)
            reached = position >= high
            if value.get(key) or reached:
                ops.complete(OK, {key: value.get(key, [])})
            if reached:
                return True
        stable = _stable_offset(consumer, tp, time.monotonic() + 2.0)
        held = (f": the last stable offset is {stable}, a transaction still open"
                if stable is not None and stable < high else "")
        ops.complete(INFO, None, f"drain of partition {p} incomplete: read to offset {max(position, low)} "
                     f"of {high} before the timeout{held}" + (f" ({errors_text(last_errors)})" if last_errors else ""))
        return False
    except Exception as exc:
        log.warning("drain %s[%d] failed: %s: %s", topic, p, type(exc).__name__, exc)
        try:
            ops.complete(INFO, None, f"drain of partition {p} failed: {type(exc).__name__}: {exc}")
        except Exception as rec_exc:  # the history itself is broken: nothing more to record
            log.error("drain %s[%d]: cannot record: %s", topic, p, rec_exc)
        return False
    finally:
        for c in (consumer, probe):
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass


def plain_pairs(msgs: list[Any]) -> list[list[int]] | None:
    """``[[offset, value], ...]`` of a batch of one partition's messages when
    every one is a message (no error, no end-of-partition event) whose value
    is an int, as ``shape_poll`` would shape it; else None (the caller takes
    ``shape_poll``'s path, which names each exception). The final drain reads
    every message a run wrote, so this is its hot loop: two passes of a few
    calls each instead of ``shape_poll``'s per-message branches and lookups
    (about a third of the Python time per message; docs/benchmarks.md, "A
    10-minute soak")."""
    for m in msgs:
        if m.error() is not None:
            return None
    try:
        return [[m.offset(), int(m.value())] for m in msgs]
    except (TypeError, ValueError):      # a value that is not an int (or none): shape_poll names it
        return None


def _stable_offset(consumer: Consumer, tp: TopicPartition, deadline: float) -> int | None:
    """The partition's last stable offset (``consumer`` reads read_committed), or None."""
    try:
        return _offsets(consumer, tp, max(0.1, min(5.0, deadline - time.monotonic())))[1]
    except KafkaException as exc:
        log.debug("last stable offset of %s[%d]: %s", tp.topic, tp.partition, exc)
        return None
