"""The pipelined producer without a broker: real librdkafka, nothing listening.

What must hold whatever the cluster does: one op outstanding per process,
every invoke completed (info when nothing was heard), an info op retires its
process, every op names its producer.
"""
from __future__ import annotations

import itertools
import socket
import time

from workloads.client import ClientContext
from workloads.pipelined import PipelinedProducer


def _dead_bootstrap() -> str:
    """A loopback port nothing listens on."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def _producer(ops: list, in_flight: int, op_timeout: float = 2.0, **kw) -> PipelinedProducer:
    procs = itertools.count(100)
    names = itertools.count()
    ctx = ClientContext(bootstrap=_dead_bootstrap(), topic="t", partitions=2, op_timeout_s=op_timeout)
    return PipelinedProducer(ctx, in_flight, ops.append, lambda: next(procs), lambda: f"p{next(names)}", **kw)


def _check_one_at_a_time(ops: list) -> None:
    outstanding: dict[int, dict] = {}
    for op in ops:
        assert op["producer"] == "p0" and op["f"] == "send" and len(op["value"]) == 1
        if op["type"] == "invoke":
            assert op["process"] not in outstanding, f"process {op['process']} invoked twice"
            outstanding[op["process"]] = op
        else:
            inv = outstanding.pop(op["process"])
            assert op["value"][0][:2] == inv["value"][0][:2]
    assert not outstanding


def test_unreachable_cluster_fills_the_slots_and_times_out_info():
    ops: list = []
    prod = _producer(ops, in_flight=3)
    for v in range(3):
        assert prod.wait_for_slot(lambda: False)
        prod.send(v % 2, v)
    assert prod.outstanding == 3
    # No slot is free until librdkafka times the messages out (message.timeout.ms < op_timeout).
    assert not prod.wait_for_slot(lambda: True)
    end = time.monotonic() + 10
    while prod.outstanding and time.monotonic() < end:
        prod.serve(0.1)
    assert prod.outstanding == 0
    _check_one_at_a_time(ops)
    done = [o for o in ops if o["type"] != "invoke"]
    assert [o["type"] for o in done] == ["info"] * 3
    assert all("_MSG_TIMED_OUT" in o["error"] for o in done)
    # Each info retired its process: the next sends go out on new numbers.
    first = {o["process"] for o in done}
    for v in range(3, 6):
        assert prod.wait_for_slot(lambda: False)
        prod.send(0, v)
    later = {o["process"] for o in ops[-3:]}
    assert not first & later
    prod.close()
    _check_one_at_a_time(ops)


def test_close_completes_every_outstanding_send_info():
    ops: list = []
    prod = _producer(ops, in_flight=5, op_timeout=30.0)
    for v in range(5):
        prod.wait_for_slot(lambda: False)
        prod.send(1, v)
    prod.close(flush_s=0.2)
    _check_one_at_a_time(ops)
    done = [o for o in ops if o["type"] != "invoke"]
    assert len(done) == 5 and all(o["type"] == "info" for o in done)


def test_expired_sends_are_completed_info_and_late_reports_ignored():
    ops: list = []
    prod = _producer(ops, in_flight=2, op_timeout=30.0, expire_s=0.3)
    for v in range(2):
        prod.send(0, v)
    time.sleep(0.4)
    prod.serve(0)
    done = [o for o in ops if o["type"] != "invoke"]
    assert len(done) == 2 and all(o["error"] == "no delivery report by the op deadline" for o in done)
    prod.close()                    # the purge reports of the expired messages record nothing more
    assert len([o for o in ops if o["type"] != "invoke"]) == 2
    _check_one_at_a_time(ops)


def test_pump_records_a_batch_of_invokes_at_once_and_completions_per_poll():
    """The runner's loop: as many messages as free slots, their invokes in one
    record_many call before produce; the completions one poll (here: the
    close's flush of purge reports) serves, in one call after it returns."""
    ops: list = []
    calls: list[list] = []

    def record_many(batch: list) -> None:
        calls.append([o["type"] for o in batch])
        ops.extend(batch)

    procs = itertools.count(100)
    ctx = ClientContext(bootstrap=_dead_bootstrap(), topic="t", partitions=3, op_timeout_s=30.0)
    prod = PipelinedProducer(ctx, 4, ops.append, lambda: next(procs), lambda: "p0", record_many=record_many)
    messages = iter([(v % 3, v) for v in range(10)])
    prod.pump(messages, stop=lambda: prod.outstanding == 4)
    assert calls == [["invoke"] * 4]
    assert [o["value"][0][:2] for o in ops] == [[v % 3, v] for v in range(4)]
    assert len({o["process"] for o in ops}) == 4
    assert next(messages) == (1, 4), "pump took only as many messages as there were free slots"
    prod.close(flush_s=0.1)
    assert calls[1:] == [["info"] * 4], calls
    _check_one_at_a_time(ops)


def test_pump_stops_when_the_messages_run_out():
    ops: list = []
    prod = _producer(ops, in_flight=5, op_timeout=30.0)
    prod.pump(iter([(0, 1), (1, 2)]), stop=lambda: False)
    assert [o["type"] for o in ops] == ["invoke", "invoke"] and prod.outstanding == 2
    prod.close()
    _check_one_at_a_time(ops)


class _Stamped(list):
    """Ops as recorded, each with the monotonic time it was recorded at."""

    def append(self, op: dict) -> None:
        super().append({**op, "at": time.monotonic()})


def test_pump_at_sends_each_message_at_its_time_and_hands_back_the_one_it_held():
    ops: list = _Stamped()
    prod = _producer(ops, in_flight=5, op_timeout=30.0)
    start = time.monotonic()
    timed = iter([(start + 0.2, 0, 1), (start + 0.6, 1, 3), (start + 5.0, 0, 5)])
    left = prod.pump_at(timed, stop=lambda: time.monotonic() > start + 1.0)
    assert left == (start + 5.0, 0, 5), "the message due after the stop is handed back, not lost"
    invokes = [o for o in ops if o["type"] == "invoke"]
    assert [o["value"][0][:2] for o in invokes] == [[0, 1], [1, 3]]
    assert start + 0.2 <= invokes[0]["at"] < start + 0.5 and start + 0.6 <= invokes[1]["at"] < start + 0.9
    assert prod.pump_at(iter([]), stop=lambda: False) is None
    prod.close()
    _check_one_at_a_time([{k: v for k, v in o.items() if k != "at"} for o in ops])
