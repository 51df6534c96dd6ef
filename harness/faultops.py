"""Which nemesis ops begin a fault and which end one.

Both the checkers (to say which faults were in effect around a witness) and
the reports (to draw fault intervals) read nemesis ops the same way, from the
op's name and the ``fault`` kind in its value; this is that one reading.

An op can *start* a fault (``start-partition``, ``kill``, ``pause``,
``bump-clock``, ``strobe-clock``, ``start-<kind>``), *stop* one
(``stop-partition``, ``start``/``restart``, ``resume``, ``reset-clock``,
``stop-<kind>``), *heal* everything (or only ``value["fault"]`` when given),
or be neither (waits and other bookkeeping ops).
"""
from __future__ import annotations

from typing import Any

START_OPS = {"start-partition": "partition", "kill": "kill", "pause": "pause",
             "bump-clock": "clock", "strobe-clock": "clock"}
STOP_OPS = {"stop-partition": "partition", "start": "kill", "restart": "kill",
            "resume": "pause", "reset-clock": "clock"}
HEAL_OPS = {"heal", "heal-all", "stop-all"}

START, STOP, HEAL = "start", "stop", "heal"


def _norm_kind(s: str) -> str:
    s = s.lower()
    for key, kind in (("partition", "partition"), ("clock", "clock"), ("kill", "kill"),
                      ("crash", "kill"), ("pause", "pause")):
        if key in s:
            return kind
    return s


def classify(f: Any, value: Any) -> tuple[str | None, str | None]:
    """(action, kind): action is "start", "stop", "heal" or None (not a fault
    boundary); kind is None for a heal of everything."""
    f = str(f) if f is not None else ""
    fault = value.get("fault") if isinstance(value, dict) else None
    fault = str(fault) if isinstance(fault, (str, int)) and str(fault) else None
    if f in HEAL_OPS:
        return HEAL, fault
    if f in STOP_OPS:
        return STOP, fault or STOP_OPS[f]
    if f in START_OPS:
        return START, fault or START_OPS[f]
    for prefix in ("stop-", "end-", "heal-", "reset-", "resume-"):
        if f.startswith(prefix):
            return STOP, fault or _norm_kind(f[len(prefix):])
    if f.startswith("start-"):
        return START, fault or _norm_kind(f[len("start-"):])
    if fault:
        return START, fault
    if "clock" in f:
        return START, "clock"
    return None, None
