"""The console progress display off a terminal (CI, pipes): plain lines for
phases and faults, a counts line at most every interval, nothing with -q."""
from __future__ import annotations

import io

from rich.console import Console

from history.fault_intervals import NemesisOp
from harness.progress import ConsoleProgress, LineListener, as_listener, fault_line


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def drive(verbosity: int) -> list[str]:
    out = io.StringIO()
    clock = Clock()
    console = Console(file=out, force_terminal=False, width=200)
    with ConsoleProgress(verbosity, console=console, interval_s=10, clock=clock) as p:
        assert not p.tty
        p.phase("image", "node image")
        p.phase("cluster", "bringing up 3 brokers")
        clock.t += 30
        p.phase("workload", "20 s", time_limit=20)
        for i in range(41):            # 20 s of counts every 0.5 s
            p.counts(ok=10 * i, fail=i, info=1, faults=["kill"] if i >= 4 else [])
            if i == 4:
                p.fault("fault started: kill on n2")
            assert p.remaining() == max(0.0, 20 - 0.5 * i)
            clock.t += 0.5
        p.phase("final", "healing")
        assert p.remaining() is None
    return out.getvalue().splitlines()


def test_plain_lines_phases_faults_and_throttled_counts():
    lines = drive(0)
    assert lines[0] == "kchaos 0:00: image: node image"
    assert [line.split(": ", 1)[1].split(":")[0] for line in lines if "elapsed" not in line] == \
        ["image", "cluster", "workload", "fault started", "final"]
    counts = [line for line in lines if "elapsed" in line]
    assert len(counts) == 3                      # at 0, 10 and 20 s of workload, not every 0.5 s
    assert counts[0].endswith("workload  elapsed 0:30  remaining 0:20  ok 0  fail 0  info 1  faults: none")
    assert "remaining 0:10  ok 200  fail 20  info 1  faults: kill" in counts[1]
    assert all("\x1b" not in line and "⠋" not in line for line in lines)   # no spinner, no escapes


def test_quiet_prints_nothing():
    assert drive(-1) == []


def test_line_listener_keeps_the_older_line_interface():
    got: list[tuple[str, bool]] = []
    listener = as_listener(lambda line, periodic=False: got.append((line, periodic)))
    assert isinstance(listener, LineListener) and as_listener(listener) is listener
    listener.phase("cluster", "bringing up 3 brokers")
    listener.phase("workload", "", time_limit=5)
    listener.counts(1, 2, 3, [])
    listener.fault("fault healed: pause")
    listener("a suite's fake runner line")
    assert got[0] == ("bringing up 3 brokers", False) and got[1] == ("workload", False)
    assert got[2][1] is True and got[2][0].endswith("/5s  ok 1  fail 2  info 3  faults: none")
    assert got[3:] == [("fault healed: pause", False), ("a suite's fake runner line", False)]


def test_fault_line():
    start = NemesisOp(index=1, invoke_time=0, time=1, f="start-partition",
                      value={"action": "start", "fault": "partition", "topology": "isolate-leader",
                             "nodes": ["n1", "n2"]})
    assert fault_line(start) == "fault started: partition (isolate-leader) on n1, n2"
    heal = NemesisOp(index=2, invoke_time=0, time=1, f="resume",
                     value={"action": "stop", "fault": "pause", "nodes": ["n3"], "errors": {"n3": "gone"}})
    assert fault_line(heal) == "fault healed: pause on n3 [n3: gone]"
