"""What a run records, with what its console and final phase need to know
about it: the ``Recorder`` wraps the history writer (history/writer.py) and
keeps, as ops go by, counts by outcome, each process's outstanding
invocation (so an interrupted run can still complete every one), and per
partition the highest offset a send completion acknowledged (the final
drain waits for it: workloads/drain.py).

Ground floor: imports only history modules.
"""
from __future__ import annotations

import threading
from collections import Counter, deque
from itertools import repeat
from operator import itemgetter
from typing import Any

from history.ops import INFO, INVOKE, OK, SEND, TXN
from history.op_values import acknowledged_offsets
from history.writer import HistoryWriter

# Fields of a pipelined producer's send row (history.writer.SendRow).
_ROW_PROCESS, _ROW_TYPE, _ROW_PARTITION, _ROW_OFFSET = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(4)


class Recorder:
    """The history writer plus what the console and the final phase need:
    counts by outcome, each process's outstanding invocation, and per
    partition the highest offset a send completion acknowledged."""

    def __init__(self, writer: HistoryWriter):
        self.writer = writer
        self.counts: Counter[tuple[str, str]] = Counter()
        # The invoke op; a send recorded as a row (append_sends): the row.
        self.outstanding: dict[Any, dict | tuple] = {}
        self.max_acked: dict[int, int] = {}
        self._lock = threading.Lock()

    def append(self, op: dict) -> dict:
        op = self.writer.append(op)
        with self._lock:
            self._note(op)
        return op

    def append_text(self, op: dict, text: str) -> None:
        """Record an op another process encoded (``HistoryWriter.append_text``);
        ``op`` has its ``process``, ``type`` and ``f`` (and may have more), for
        the counts and the outstanding invocations."""
        self.writer.append_text(text)
        with self._lock:
            self._note(op)

    def append_many(self, ops: list[dict]) -> list[dict]:
        """``append`` for several ops with one write (a pipelined producer's
        invokes, or the completions one poll served: workloads/pipelined.py)."""
        ops = self.writer.append_many(ops)
        outstanding = self.outstanding
        with self._lock:
            for op in ops:
                if op["type"] == INVOKE:     # _note's first case, inlined: half of a pipelined run's ops
                    outstanding[op["process"]] = op
                else:
                    self._note(op)
        return ops

    def append_sends(self, rows: list[tuple], node: str | None = None) -> None:
        """``append_many`` of one-message sends given as rows (a pipelined
        producer's: ``history.writer.SendRow``) without making their
        dicts (``HistoryWriter.append_sends``); noted as ``_note`` notes ops.
        A batch of invokes (or of completions of one type) is noted by C
        loops (map, zip): this is per message of the fastest workload."""
        self.writer.append_sends(rows, node)
        outstanding, max_acked = self.outstanding, self.max_acked
        types = list(map(_ROW_TYPE, rows))
        with self._lock:
            if types.count(INVOKE) == len(types):
                outstanding.update(zip(map(_ROW_PROCESS, rows), rows))
                return
            for typ in set(types):
                if typ != INVOKE:
                    self.counts[(SEND, typ)] += types.count(typ)
            if INVOKE in types:
                for row in rows:
                    if row[1] == INVOKE:
                        outstanding[row[0]] = row
                    else:
                        outstanding.pop(row[0], None)
            else:
                deque(map(outstanding.pop, map(_ROW_PROCESS, rows), repeat(None)), maxlen=0)
            get = max_acked.get
            for p, offset in zip(map(_ROW_PARTITION, rows), map(_ROW_OFFSET, rows)):
                if type(offset) is int and isinstance(p, int) and offset > get(p, -1):
                    max_acked[p] = offset

    def _note(self, op: dict) -> None:
        """Counts, outstanding invocations, acknowledged offsets (under the lock)."""
        typ = op["type"]
        if typ == INVOKE:
            self.outstanding[op["process"]] = op
        else:
            f = op["f"]
            self.outstanding.pop(op["process"], None)
            self.counts[(f, typ)] += 1
            if f == SEND and isinstance(op.get("value"), list):
                self._note_acked(op["value"])
            elif f == TXN and typ == OK and isinstance(op.get("value"), list):
                # A committed txn's sends: ["send", p, v, offset] micro-ops.
                self._note_acked([m[1:] for m in op["value"] if isinstance(m, list) and m[:1] == [SEND]])

    def _note_acked(self, messages: list) -> None:
        # ok and info send completions: a message with an offset was acknowledged there.
        for p, offset in acknowledged_offsets(messages):
            if isinstance(p, int) and offset > self.max_acked.get(p, -1):
                self.max_acked[p] = offset

    def complete_outstanding(self, error: str) -> None:
        """An interrupted run still leaves every invocation with a completion."""
        with self._lock:
            pending = list(self.outstanding.values())
        for op in pending:
            if isinstance(op, tuple):       # a send row: (process, type, partition, value, ...)
                op = {"process": op[0], "f": SEND, "value": [[op[2], op[3], None]]}
            self.append({"process": op["process"], "type": INFO, "f": op["f"], "value": op.get("value"),
                         "error": error})
