"""What the console shows while a run (or a suite) goes on.

A run reports through a ``RunListener`` (``harness.runner.Runner`` calls it):
the phase it enters (image, cluster, workload, final, checks), the op
counts and active faults every half second during the workload, one line
per fault started, stopped or healed, and free notes. ``ConsoleProgress``
draws that on stderr: on a terminal one rich live display (phase, elapsed and
remaining time, ok/fail/info counts, active faults) with fault lines printed
above it; elsewhere (CI, pipes) plain lines: each phase, each fault, and a
counts line at most every ``interval_s`` seconds, no spinner.

Verbosity (``-v``/``-q`` on run, suite, reproduce): 0 is the default, -1
(``-q``) prints only the verdict, 1 (``-v``) adds the harness's INFO log lines
to the console, 2 (``-vv``) also the client libraries' (librdkafka, py4j,
pyspark), which otherwise go to the run's kchaos.log only.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Callable

import click
from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from infra.errors import UsageError

PHASES = ("image", "cluster", "workload", "final", "checks")
err_console = Console(stderr=True)


class RunListener:
    """The events of a run; every method is a no-op here. Also callable with a
    free line, the older interface (``progress(line, periodic=False)``) that
    suites' fake runners still use."""

    def phase(self, name: str, detail: str = "", time_limit: float | None = None) -> None:
        """``name`` is one of PHASES; ``time_limit`` is the workload's seconds."""

    def counts(self, ok: int, fail: int, info: int, faults: list[str]) -> None:
        """Completed send/poll ops by outcome, and the fault kinds in effect."""

    def fault(self, line: str) -> None:
        """A fault started, stopped or healed (one line)."""

    def note(self, line: str) -> None:
        """Anything else worth a line (the drain wait gave up, interrupted)."""

    def begin(self, title: str) -> None:
        """A new run starts (suites, reproductions): counts and clocks start over."""

    def __call__(self, line: str, periodic: bool = False) -> None:
        self.note(line)


class LineListener(RunListener):
    """A plain ``fn(line, periodic=False)`` as a listener: the line interface
    Runner had before listeners (and what a caller passing a function gets)."""

    def __init__(self, fn: Callable[..., None]):
        self.fn = fn
        self._t0 = time.monotonic()
        self._limit = 0.0

    def phase(self, name: str, detail: str = "", time_limit: float | None = None) -> None:
        if name == "workload":
            self._t0, self._limit = time.monotonic(), time_limit or 0.0
        self.fn(detail or name)

    def counts(self, ok: int, fail: int, info: int, faults: list[str]) -> None:
        self.fn(f"{time.monotonic() - self._t0:5.1f}/{self._limit:g}s  ok {ok}  fail {fail}  info {info}  "
                f"faults: {', '.join(faults) or 'none'}", periodic=True)

    def fault(self, line: str) -> None:
        self.fn(line)

    def note(self, line: str) -> None:
        self.fn(line)


def as_listener(progress: Callable[..., None] | RunListener | None) -> RunListener:
    if isinstance(progress, RunListener):
        return progress
    return LineListener(progress) if progress is not None else RunListener()


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60}:{s % 60:02d}"


class ConsoleProgress(RunListener):
    """The run's console display (see the module docstring). Use as a context
    manager; ``prefix`` goes before every plain line ("kchaos", or a suite's
    "kchaos suite [2/6]")."""

    def __init__(self, verbosity: int = 0, console: Console | None = None, interval_s: float = 10.0,
                 prefix: str = "kchaos", clock: Callable[[], float] = time.monotonic):
        self.console = console or err_console
        self.verbosity = verbosity
        self.tty = self.console.is_terminal
        self.interval_s = interval_s
        self.prefix = prefix
        self.clock = clock
        self.started = clock()              # the display's (a suite's) start: the clock on each line
        self.run_started = self.started     # this run's start: "elapsed"
        self.name, self.detail = "starting", ""
        self.title = ""                     # a suite's "[2/6] nightly-kill"
        self.phase_t0 = self.started
        self.workload_t0: float | None = None
        self.time_limit: float | None = None
        self.ok = self.fail = self.info = 0
        self.faults: list[str] = []
        self._last_counts = -float("inf")
        self._live: Live | None = None
        self._spinner = Spinner("dots")

    # -- context --------------------------------------------------------------
    def __enter__(self) -> "ConsoleProgress":
        if self.tty and self.verbosity >= 0:
            self._live = Live(self, console=self.console, transient=True, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    # -- events -----------------------------------------------------------------
    def begin(self, title: str) -> None:
        self.title = title
        self.run_started = self.phase_t0 = self.clock()
        self.name, self.detail = "starting", ""
        self.workload_t0 = self.time_limit = None
        self.ok = self.fail = self.info = 0
        self.faults = []

    def phase(self, name: str, detail: str = "", time_limit: float | None = None) -> None:
        self.name, self.detail, self.phase_t0 = name, detail, self.clock()
        if name == "workload":
            self.workload_t0, self.time_limit = self.phase_t0, time_limit
        self._line(f"{name}: {detail}" if detail else name)

    def counts(self, ok: int, fail: int, info: int, faults: list[str]) -> None:
        self.ok, self.fail, self.info, self.faults = ok, fail, info, list(faults)
        now = self.clock()
        if not self.tty and now - self._last_counts >= self.interval_s:
            self._last_counts = now
            self._line(self.status_line())

    def fault(self, line: str) -> None:
        self._line(line)

    def note(self, line: str) -> None:
        self._line(line)

    # -- drawing -------------------------------------------------------------------
    def remaining(self) -> float | None:
        """Seconds of workload left (time limit minus time in the workload)."""
        if self.name != "workload" or self.workload_t0 is None or self.time_limit is None:
            return None
        return max(0.0, self.time_limit - (self.clock() - self.workload_t0))

    def status_line(self) -> str:
        now = self.clock()
        parts = [f"{self.name}", f"elapsed {_clock(now - self.run_started)}"]
        left = self.remaining()
        if left is not None:   # past the time limit the planned fault steps still run (harness/fault_pacing.py)
            parts.append(f"remaining {_clock(left)}" if left > 0 else "time limit passed: planned fault steps finish")
        if self.workload_t0 is not None:
            parts.append(f"ok {self.ok}  fail {self.fail}  info {self.info}")
            parts.append(f"faults: {', '.join(self.faults) or 'none'}")
        return "  ".join(parts)

    def __rich__(self) -> Group:
        head = Text.assemble((f"{self.title}  " if self.title else "", "bold"),
                             (f"{self.name:<8}", "bold cyan"), " ", (self.detail, ""))
        self._spinner.text = head
        return Group(self._spinner, Text("  " + self.status_line().split("  ", 1)[-1], style="dim"))

    def _line(self, text: str) -> None:
        if self.verbosity < 0:
            return
        if self._live is not None:
            self._live.console.print(Text(f"{_clock(self.clock() - self.started)} ", style="dim") + Text(text),
                                     highlight=False, soft_wrap=True)
        else:
            self.console.print(f"{self.prefix} {_clock(self.clock() - self.started)}: {text}",
                               highlight=False, markup=False, soft_wrap=True)


# -- -v / -q --------------------------------------------------------------------------

CLIENT_LOGGERS = ("kchaos.librdkafka", "py4j", "pyspark")


class ConsoleFilter(logging.Filter):
    """Client library lines, at every level, go to the run's kchaos.log only
    (unless -vv): failed connections to a killed or cut-off broker are what a
    fault is for, not errors of the run (a default run printed thousands)."""

    def __init__(self, verbosity: int = 0):
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(CLIENT_LOGGERS):
            return self.verbosity >= 2
        return True


class CurrentStderr:
    """A log handler's stream that is whatever ``sys.stderr`` is now: while the
    live display runs, rich redirects sys.stderr so log lines print above the
    display instead of through it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def set_console_verbosity(verbosity: int) -> None:
    """The console log handlers' level and filter for a verbosity (the run's
    kchaos.log handler is attached per run, at INFO, and unaffected)."""
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            continue
        handler.setLevel(level)
        for f in handler.filters:
            if isinstance(f, ConsoleFilter):
                f.verbosity = verbosity
    root = logging.getLogger()
    if root.level > level or root.level == logging.NOTSET:
        root.setLevel(min(level, logging.INFO))


def verbosity_options(f):
    """``-v`` (repeatable) and ``-q``: the command gets ``verbosity`` (-1, 0, 1, 2)."""
    f = click.option("-q", "--quiet", is_flag=True, default=False,
                     help="Print only the verdict.")(f)
    f = click.option("-v", "--verbose", count=True,
                     help="More output: -v adds the harness's INFO log lines, -vv the client libraries' too.")(f)
    return f


def verbosity_of(verbose: int, quiet: bool) -> int:
    if verbose and quiet:
        raise UsageError("-v and -q exclude each other")
    v = -1 if quiet else min(verbose, 2)
    set_console_verbosity(v)
    return v


def fault_line(event) -> str:
    """One console line for a nemesis completion (a ``history.ops.NemesisOp``):
    ``fault started: partition (isolate-leader) on n1, n2``."""
    value = event.value if isinstance(event.value, dict) else {}
    word = {"start": "started", "stop": "healed", "heal": "healed"}.get(event.action or "", "not applied")
    kind = event.fault or event.f
    how = value.get("topology") or value.get("target")
    nodes = value.get("nodes")
    where = ", ".join(map(str, nodes)) if isinstance(nodes, list) else ""
    line = f"fault {word}: {kind}" + (f" ({how})" if isinstance(how, str) else "") + (f" on {where}" if where else "")
    problem = value.get("error") or event.error
    if isinstance(value.get("errors"), dict) and value["errors"]:
        problem = "; ".join(f"{n}: {e}" for n, e in value["errors"].items())
    if problem:
        line += f" [{' '.join(str(problem).split())[:160]}]"
    return line
