"""Executed = planned: when each planned fault step runs, and when the workload ends.

The fault plan (harness/schedule.py) gives each step a time since the
workload's start. A step can take seconds (a kill waits for the process to
die, a restart for the broker to answer), longer on a loaded machine. Timed
from the workload's start, a late step would squeeze the next one's gap, and
the time limit would cut off the steps that drifted past it: one seed would
run different fault sequences on a quiet and on a busy machine, and a
reproduction could not compare like with like.

So each step waits its *planned gap* (its planned time minus the previous
step's) counted from the previous step's *completion*, and the workload runs
on after the last step for the plan's own tail (time limit minus the last
step's planned time: its recovery window among it). ``time_limit`` stays the
planned length; the real length is what :attr:`FaultPace.workload_end` says
when the walk is over (docs/design.md, "One run, end to end").

Pure arithmetic on monotonic times; the runner's nemesis thread drives it.
"""
from __future__ import annotations

import threading


class FaultPace:
    """The pacing of one run's fault walk, shared by the nemesis thread (which
    reports each step's completion) and the workload loop (which asks when to end)."""

    def __init__(self, t0: float, time_limit_s: float):
        self.t0 = t0
        self.time_limit_s = time_limit_s
        self._lock = threading.Lock()
        self._planned = 0.0        # planned time of the step last completed (0: the workload's start)
        self._completed = t0       # when it completed
        self._walking = True       # steps remain, or one is running

    def start_time(self, planned_at_s: float) -> float:
        """The monotonic time to invoke the step planned at ``planned_at_s``:
        its planned gap after the previous step's completion."""
        with self._lock:
            return self._completed + max(0.0, planned_at_s - self._planned)

    def completed(self, planned_at_s: float, at: float) -> None:
        """The step planned at ``planned_at_s`` completed at monotonic time ``at``."""
        with self._lock:
            self._planned, self._completed = planned_at_s, max(at, self._completed)

    def finished(self) -> None:
        """No step remains (the plan is walked, or the walk was stopped)."""
        with self._lock:
            self._walking = False

    @property
    def walking(self) -> bool:
        with self._lock:
            return self._walking

    @property
    def workload_end(self) -> float:
        """The monotonic time the workload ends at: the plan's tail after the
        last completed step; never before ``t0 + time_limit``."""
        with self._lock:
            tail = max(0.0, self.time_limit_s - self._planned)
            return max(self.t0 + self.time_limit_s, self._completed + tail)

    def slip_s(self) -> float:
        """How far the walk runs behind the plan, in seconds."""
        return self.workload_end - (self.t0 + self.time_limit_s)
