"""kchaos replay's reading of a history (harness/replay.py): pure, on hand-written ops."""
from __future__ import annotations

from harness.replay import replayed_ops, replayed_steps, unplaced_ops

S = 1_000_000_000
T0 = 40 * S   # the workload's first client op


def op(i, t_s, process, typ, f, value=None, **extra):
    return {"index": i, "time": T0 + int(t_s * S), "process": process, "type": typ, "f": f, "value": value, **extra}


HISTORY = [
    op(0, 0.0, 0, "invoke", "assign", [0, 1], worker=0),
    op(1, 0.01, 0, "ok", "assign", [0, 1]),
    op(2, 0.5, "nemesis", "invoke", "kill", {"fault": "kill", "target": "leader", "partition_index": 3}),
    op(3, 1.0, 0, "invoke", "send", [[0, 0, None]], worker=0),
    op(4, 1.2, 0, "info", "send", [[0, 0, None]]),
    op(5, 1.5, 2, "invoke", "assign", [0, 1], worker=0),      # the worker's next process re-assigns
    op(6, 1.6, 2, "ok", "assign", [0, 1]),
    op(7, 2.0, 2, "invoke", "txn", [["send", 1, 2]], worker=0, abort=True),
    op(8, 2.5, 2, "ok", "txn", [["send", 1, 2]]),
    op(9, 3.0, 1, "invoke", "poll", None),                      # an old history: no worker field
    op(10, 3.1, 1, "ok", "poll", {}),
    op(11, 3.5, 5, "invoke", "poll", None),                     # a later process without it: unplaced
    op(12, 3.6, 5, "ok", "poll", {}),
    op(13, 5.0, "nemesis", "invoke", "start", {"fault": "kill", "target": "all"}),   # a final heal
    op(14, 9.5, 1, "invoke", "poll", None, drain=True),
]


def test_a_workers_ops_come_back_in_order_at_their_gaps_without_later_setups():
    ops = replayed_ops(HISTORY, 0, concurrency=2)
    assert [(o.f, round(o.delay_s, 3)) for o in ops] == [("assign", 0.0), ("send", 1.0), ("txn", 1.0)]
    assert ops[2].abort is True and ops[2].invoke_fields() == {"abort": True}
    assert [(o.f, round(o.delay_s, 3)) for o in replayed_ops(HISTORY, 1, concurrency=2)] == [("poll", 3.0)]


def test_ops_no_worker_can_be_found_for_are_counted_and_drains_are_not_replayed():
    assert unplaced_ops(HISTORY, concurrency=2) == 1


def test_fault_steps_are_the_workloads_nemesis_invokes_at_their_times():
    steps = replayed_steps(HISTORY, workload_s=6.0)
    assert steps == [{"at": 0.5, "f": "kill", "value": {"fault": "kill", "target": "leader", "partition_index": 3}}]


def test_a_pipelined_producers_sends_are_placed_by_their_values():
    # The pump records no worker; worker w's values are w, w + concurrency, ... (op_streams.queue_ops).
    history = [
        op(0, 0.0, 0, "invoke", "assign", [0, 1], worker=0),
        op(1, 0.0, 1, "invoke", "assign", [0, 1], worker=1),
        op(2, 0.4, 7, "invoke", "send", [[0, 0, None]], producer="p0"),
        op(3, 0.5, 8, "invoke", "send", [[1, 3, None]], producer="p1"),
        op(4, 0.6, 9, "invoke", "send", [[1, 2, None]], producer="p0"),
        op(5, 0.9, 0, "invoke", "poll", None, worker=0),
    ]
    w0 = replayed_ops(history, 0, concurrency=2)
    assert [(o.f, o.value, round(o.delay_s, 3)) for o in w0] == [
        ("assign", [0, 1], 0.0), ("send", [[0, 0, None]], 0.4), ("send", [[1, 2, None]], 0.2), ("poll", None, 0.3)]
    assert [(o.f, o.value) for o in replayed_ops(history, 1, concurrency=2)] == [
        ("assign", [0, 1]), ("send", [[1, 3, None]])]
    assert unplaced_ops(history, concurrency=2) == 0
