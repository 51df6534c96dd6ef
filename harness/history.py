"""Writing the history: every op's invocation and completion, as it happens.

The format, and its reader, are ``checkers.history``: the one spec of what a
history holds. This module only appends to it, from many threads at once.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from checkers.history import Op, header


class HistoryWriter:
    """Thread-safe appender; assigns ``index`` and ``time`` under one lock so
    that index order is time order. Writes the format header first when it
    starts a new file, and flushes every line (a crash loses at most one)."""

    def __init__(self, path: Path, start_ns: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self._next = 0
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        if fresh:
            wall_zero = time.time_ns() - (time.monotonic_ns() - self.start_ns)
            self._file.write(json.dumps(header(wall_zero), separators=(",", ":")) + "\n")
            self._file.flush()

    def now(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def append(self, op: Op) -> Op:
        with self._lock:
            op = {"index": self._next, "time": self.now(), **op}
            op["index"] = self._next
            self._next += 1
            self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
            self._file.flush()
        return op

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
