"""The runner's one door to the nemesis: each op recorded, invoked, and tracked.

A nemesis op is an invocation in the history (process ``nemesis``), the
nemesis's own ``invoke`` (``nemesis.protocol``), and its completion, recorded
as ``info`` (a fault's effect is never known for certain: Jepsen's rule).
The completion feeds the ``FaultTracker`` (which faults the progress line says
are in effect, and whether any fault ran at all: the final phase settles only
then) and, when it began or ended something, a console line. One op at a
time: the final heal waits for a fault op still running.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from harness.progress import RunListener, fault_line
from history.fault_intervals import FaultTracker, NemesisOp
from history.ops import ACTION_START, INFO, INVOKE, NEMESIS
from history.recorder import Recorder

log = logging.getLogger("harness.runner")


class FaultDriver:
    def __init__(self, nemesis: Any, recorder: Recorder, events: RunListener, faults: FaultTracker):
        self.nemesis = nemesis
        self.recorder = recorder
        self.events = events
        self.faults = faults
        self._lock = threading.Lock()

    def invoke(self, op: dict) -> dict:
        """Record, invoke and complete one nemesis op; returns its recorded completion."""
        with self._lock:
            return self._invoke(op)

    def _invoke(self, op: dict) -> dict:
        self.recorder.append({"process": NEMESIS, "type": INVOKE, "f": op["f"], "value": op.get("value")})
        try:
            done = self.nemesis.invoke(dict(op))
        except Exception as exc:
            log.warning("nemesis op %s failed: %s", op["f"], exc)
            # A nemesis raises only when it could do nothing: no fault began or ended.
            done = {"type": INFO, "f": op["f"],
                    "value": {**(op.get("value") or {}), "action": None, "error": str(exc)}}
        done = {k: v for k, v in done.items() if k not in ("index", "time", "process")}
        recorded = self.recorder.append({"process": NEMESIS, **done, "type": INFO, "f": op["f"]})
        event = NemesisOp(index=recorded["index"], invoke_time=recorded["time"], time=recorded["time"],
                          f=op["f"], value=recorded.get("value"))
        active = set(self.faults.active_kinds())
        self.faults.add(event)
        # A stop or heal of a fault that was not in effect (the final phase heals
        # every kind) is no news to the console; the history has it anyway.
        healed_something = event.fault in active if event.fault else bool(active)
        if (event.action == ACTION_START or event.action is not None and healed_something
                or isinstance(event.value, dict) and event.value.get("error")):
            self.events.fault(fault_line(event))
        return recorded
