"""The pre-drain wait's condition (pure), the wait loop on a fake clock, the
recorder's highest acknowledged offsets, the drain_wait setting, the
fields drain completions carry when no broker answers, and a drain process
that dies or cannot start."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, Message

from workloads.drain import drain, plain_pairs
from workloads.drain_wait import drain_ready, partition_ready, settle_seconds, wait_for_drain
from workloads.queue import shape_poll


@dataclass(frozen=True)
class State:
    partition: int
    leader: int | None
    isr: tuple[int, ...] = (1, 2, 3)
    replicas: tuple[int, ...] = (1, 2, 3)


def test_high_watermark_covering_the_acknowledged_offsets_is_ready():
    ok, why = partition_ready(State(0, 1, isr=(1,)), (0, 118, 118), 117)
    assert ok and why == "high watermark 118 >= 118 (acknowledged up to offset 117)"


def test_high_watermark_below_the_acknowledged_offsets_is_not_ready_without_a_full_isr():
    ok, why = partition_ready(State(2, 1, isr=(1, 2)), (0, 100, 100), 117)
    assert not ok
    assert why == "high watermark 100 < 118 (acknowledged up to offset 117), ISR [1, 2] of replicas [1, 2, 3]"


def test_full_isr_is_ready_even_below_the_acknowledged_offsets():
    # The acknowledged writes are gone for good (an unclean election, say): waiting would not bring them back.
    assert partition_ready(State(0, 1), (0, 100, 100), 117) == (True, "all replicas in ISR")
    assert partition_ready(State(0, 1), None, 117) == (True, "all replicas in ISR")


def test_no_leader_is_never_ready():
    assert partition_ready(State(0, None), (0, 500, 500), 117) == (False, "has no leader")
    assert partition_ready(None, (0, 500, 500), 117) == (False, "not in the metadata")


def test_nothing_acknowledged():
    assert partition_ready(State(0, 1, isr=(1,)), (0, 0, 0), None) == (True, "high watermark 0, no acknowledged write")
    ok, why = partition_ready(State(0, 1, isr=(1,)), None, None)
    assert not ok and why.startswith("high watermark unknown (no acknowledged write)")


def test_drain_ready_needs_every_partition():
    states = [State(0, 1), State(1, 2, isr=(2,)), State(2, 3, isr=(3,))]
    wm = {0: (0, 10, 10), 1: (0, 20, 20), 2: (0, 5, 5)}
    ok, why = drain_ready(states, wm, {0: 9, 1: 19, 2: 9})
    assert not ok and set(why) == {0, 1, 2} and why[2].startswith("high watermark 5 < 10")
    ok, why = drain_ready(states, wm, {0: 9, 1: 19, 2: 4})
    assert ok and why[0].startswith("high watermark 10 >= 10")
    # A partition the metadata does not list is not ready.
    ok, why = drain_ready(states[:2], wm, {}, partitions=[0, 1, 2])
    assert not ok and why[2] == "not in the metadata"
    assert drain_ready([], {}, {}) == (False, {})


def test_an_open_transaction_is_not_ready_even_with_every_replica_in_isr():
    # The drain reads read_committed: it cannot pass the last stable offset,
    # so a partition whose transaction is still open must wait for its abort.
    for isr in ((1, 2, 3), (1,)):
        ok, why = partition_ready(State(0, 1, isr=isr), (0, 120, 97), 117)
        assert not ok
        assert why == ("a transaction is open: last stable offset 97 < high watermark 120 "
                       "(its coordinator aborts it after transaction.timeout.ms)")


def test_an_unknown_last_stable_offset_does_not_block():
    ok, why = partition_ready(State(0, 1, isr=(1,)), (0, 118, None), 117)
    assert ok and why == "high watermark 118 >= 118 (acknowledged up to offset 117)"


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_wait_ends_as_soon_as_the_high_watermark_catches_up():
    clock = FakeClock()
    highs = iter([(0, h, h) for h in (100, 110, 118, 118)])
    wait = wait_for_drain(lambda: [State(0, 1, isr=(1,))], lambda parts: {0: next(highs)}, {0: 117}, 1, 60,
                          clock=clock, sleep=clock.sleep)
    assert wait == {0: {"waited_s": 2.0, "reached": True,
                        "why": "high watermark 118 >= 118 (acknowledged up to offset 117)"}}


def test_wait_ends_when_the_open_transaction_is_aborted():
    clock = FakeClock()
    offsets = iter([(0, 120, 97), (0, 120, 97), (0, 121, 121)])   # the abort marker moves both to 121
    wait = wait_for_drain(lambda: [State(0, 1)], lambda parts: {0: next(offsets)}, {0: 117}, 1, 60,
                          clock=clock, sleep=clock.sleep)
    assert wait == {0: {"waited_s": 2.0, "reached": True,
                        "why": "high watermark 121 >= 118 (acknowledged up to offset 117)"}}


def test_wait_times_out_naming_the_partition_that_was_not_ready():
    clock = FakeClock()
    states = [State(0, 1), State(1, 1), State(2, 1, isr=(1, 2))]
    wait = wait_for_drain(lambda: states, lambda parts: {p: (0, 100, 100) for p in parts}, {0: 50, 1: 50, 2: 117},
                          3, 5.5, clock=clock, sleep=clock.sleep)
    assert all(w["reached"] is False and w["waited_s"] == 5.5 for w in wait.values())
    blocking = ("timeout: partition 2 high watermark 100 < 118 (acknowledged up to offset 117), "
                "ISR [1, 2] of replicas [1, 2, 3]")
    assert wait[2]["why"] == blocking
    assert wait[0]["why"] == blocking + " (partition 0: high watermark 100 >= 51 (acknowledged up to offset 50))"


def test_wait_of_zero_checks_once_and_metadata_errors_are_reasons_not_crashes():
    clock = FakeClock()

    def broken():
        raise RuntimeError("no broker")
    wait = wait_for_drain(broken, lambda parts: {}, {}, 2, 0, clock=clock, sleep=clock.sleep)
    assert wait[0] == {"waited_s": 0.0, "reached": False,
                       "why": "timeout: partition 0 metadata unavailable (RuntimeError: no broker); "
                              "partition 1 metadata unavailable (RuntimeError: no broker)"}


def test_recorder_tracks_the_highest_acknowledged_offset_per_partition(tmp_path):
    from history.writer import HistoryWriter
    from history.recorder import Recorder
    rec = Recorder(HistoryWriter(tmp_path / "h.jsonl"))
    try:
        rec.append({"process": 0, "type": "invoke", "f": "send", "value": [[0, 1, None], [1, 1, None]]})
        rec.append({"process": 0, "type": "ok", "f": "send", "value": [[0, 1, 7], [1, 1, 3]]})
        rec.append({"process": 1, "type": "invoke", "f": "send", "value": [[0, 2, None], [1, 2, None]]})
        # A mixed info send: the acknowledged message keeps its offset.
        rec.append({"process": 1, "type": "info", "f": "send", "value": [[0, 2, 9], [1, 2, None]],
                    "outcomes": ["ok", "info"]})
        rec.append({"process": 2, "type": "fail", "f": "send", "value": [[2, 1, None]]})
        rec.append({"process": 3, "type": "ok", "f": "poll", "value": {"2": [[40, 1]]}})
        rec.append({"process": 4, "type": "ok", "f": "send", "value": [[0, 3, 5]]})
    finally:
        rec.writer.close()
    assert rec.max_acked == {0: 9, 1: 3}


@pytest.mark.parametrize("value", [-1, float("inf"), float("nan")])
def test_drain_wait_is_validated(value):
    from harness.run_config import RunConfig, validate
    from infra.errors import UsageError
    with pytest.raises(UsageError) as info:
        validate(RunConfig(drain_wait=value))
    assert str(info.value).startswith("drain_wait must be a finite number of seconds, 0 or more")
    assert "\n" not in str(info.value)


def test_drain_wait_from_toml(tmp_path):
    from harness.run_config import RunConfig, from_dict, validate
    from infra.errors import UsageError
    assert RunConfig().drain_wait == 60.0
    assert validate(from_dict({"drain_wait": 0})).drain_wait == 0.0
    with pytest.raises(UsageError, match="drain_wait must be a number"):
        from_dict({"drain_wait": "long"})


def test_a_drain_that_reaches_no_broker_is_info_with_its_fields():
    ops: list[dict] = []
    wait = {0: {"waited_s": 0.0, "reached": False, "why": "timeout: partition 0 has no leader"}}
    done = drain("127.0.0.1:1", "nowhere", [0], {"socket.connection.setup.timeout.ms": 1000}, ops.append, 1.5,
                 max_acked={0: 41}, wait=wait)
    assert done == {0: False}
    assert [o["type"] for o in ops] == ["invoke", "info"]
    assert "watermarks" not in ops[0] and "end" not in ops[0]
    last = ops[-1]
    assert last["drain"] is True and last["value"] is None
    assert last["error"].startswith("drain of partition 0 incomplete: no high watermark before the timeout")
    assert last["watermarks"] == {"log_start": None, "high": None, "stable": None, "max_acked": 41}
    assert last["end"] is None and last["wait"] == wait[0]


def test_plain_pairs_shapes_a_clean_batch_as_shape_poll_does():
    msgs = [Message(topic="t", partition=2, offset=o, value=str(o * 7).ljust(6).encode()) for o in (4, 5, 9)]
    assert plain_pairs(msgs) == [[4, 28], [5, 35], [9, 63]]
    assert shape_poll(msgs) == ({"2": plain_pairs(msgs)}, [])
    assert plain_pairs([]) == []


def test_plain_pairs_leaves_events_and_foreign_values_to_shape_poll():
    eof = Message(topic="t", partition=2, offset=10, error=KafkaError(KafkaError._PARTITION_EOF))
    ours = Message(topic="t", partition=2, offset=9, value=b"63")
    assert plain_pairs([ours, eof]) is None
    assert plain_pairs([ours, Message(topic="t", partition=2, offset=11, value=b"not-ours")]) is None
    assert plain_pairs([Message(topic="t", partition=2, offset=12, value=None)]) is None


def test_a_drain_process_that_is_killed_leaves_its_partition_info(monkeypatch):
    """A partition's drain process that ends without saying whether it read
    the partition to its end (killed here at once by a grace of minus 100 s)
    leaves the partition with an info completion carrying its fields."""
    monkeypatch.setattr(sys.modules["workloads.drain"], "DRAIN_PROCESS_GRACE_S", -100.0)   # (the package's
    # ``drain`` is the function)
    ops: list[dict] = []
    done = drain("127.0.0.1:1", "nowhere", [0], None, ops.append, 30, max_acked={0: 3})
    assert done == {0: False}
    assert [o["type"] for o in ops] == ["invoke", "info"]
    assert ops[-1]["error"].startswith("drain of partition 0 incomplete: its process ended with status -9")
    assert ops[-1]["watermarks"] == {"log_start": None, "high": None, "stable": None, "max_acked": 3}


def test_settings_that_are_not_json_drain_in_this_process():
    """A consumer setting JSON cannot carry (a callable) cannot reach a drain
    process: that partition is drained in a thread instead, as before."""
    ops: list[dict] = []
    done = drain("127.0.0.1:1", "nowhere", [0], {"socket.connection.setup.timeout.ms": 1000,
                                                  "error_cb": lambda err: None}, ops.append, 1.5)
    assert done == {0: False} and [o["type"] for o in ops] == ["invoke", "info"]


CUT_SHORT = r"""import sys
sys.stdout.write('{"process":1000000,"type":"invoke","f":"poll"}\t'
                 '{"process":1000000,"type":"invoke","f":"poll","drain":true,"value":null}\n'
                 '{"process":1000000,"type":"ok","f":"poll","watermarks":null,"end":null}\t{"process":10')
"""


def test_a_line_a_drain_process_did_not_finish_is_not_recorded(monkeypatch):
    """A process killed mid-line leaves half an op: it is not written (the
    history stays JSON lines), and the partition ends info after the invoke."""
    from history import child_process
    monkeypatch.setattr(child_process, "start", lambda module, settings, text: subprocess.Popen(
        [sys.executable, "-c", CUT_SHORT], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    ops: list[dict] = []
    assert drain("127.0.0.1:1", "nowhere", [0], None, ops.append, 5) == {0: False}
    assert [o["type"] for o in ops] == ["invoke", "info"]
    assert "before it said whether it read the partition to its end" in ops[-1]["error"]


def test_a_run_without_faults_goes_to_its_drain_without_settling():
    assert settle_seconds(5.0, False, {"n1": "ok", "n2": "ok"}) == 0.0
    assert settle_seconds(5.0, False, {}) == 0.0


def test_a_run_with_a_fault_or_a_node_the_heal_had_to_mend_settles_for_its_recovery():
    assert settle_seconds(5.0, True, {"n1": "ok"}) == 5.0
    assert settle_seconds(5.0, False, {"n1": "ok", "n2": "restarted"}) == 5.0
    assert settle_seconds(2.5, False, {"n1": "heal failed: timeout"}) == 2.5
