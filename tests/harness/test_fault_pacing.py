"""Executed = planned (harness/fault_pacing.py): gaps from completions, the tail kept."""
from __future__ import annotations

from harness.fault_pacing import FaultPace


def test_on_time_steps_keep_the_planned_times_and_length():
    pace = FaultPace(t0=100.0, time_limit_s=60.0)
    assert pace.start_time(10.0) == 110.0
    pace.completed(10.0, 110.0)
    assert pace.start_time(25.0) == 125.0
    pace.completed(25.0, 125.0)
    pace.finished()
    assert pace.workload_end == 160.0 and pace.slip_s() == 0.0 and not pace.walking


def test_a_slow_step_delays_the_next_by_its_planned_gap_and_the_end_by_the_slip():
    pace = FaultPace(t0=0.0, time_limit_s=60.0)
    pace.completed(10.0, 22.0)               # planned at 10 s, took 12 s
    assert pace.start_time(15.0) == 27.0     # 5 s after the slow step's completion, not at 15 s
    pace.completed(15.0, 27.5)
    assert pace.start_time(58.0) == 70.5     # a step planned near the end still runs
    pace.completed(58.0, 71.0)
    assert pace.workload_end == 73.0         # the plan's 2 s tail after the last step
    assert pace.slip_s() == 13.0


def test_the_workload_never_ends_before_its_time_limit():
    pace = FaultPace(t0=5.0, time_limit_s=30.0)
    assert pace.workload_end == 35.0 and pace.walking
    pace.completed(3.0, 1.0)                 # a completion reported early changes nothing
    assert pace.workload_end == 35.0
