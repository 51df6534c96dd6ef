"""Writing the history: every op's invocation and completion, as it happens.

The format, and its reader, are ``checkers.history``: the one spec of what a
history holds. This module only appends to it, from many threads at once.

Beside history.jsonl (the crash-safe, readable record) the writer keeps
history.parquet, the same ops paired as the checkers read them
(``checkers.model``), written in row groups by a thread of its own so that
analysis of a finished run never re-reads the JSONL. The file gets its footer,
naming the JSONL size it covers, when the writer closes; a run killed before
that leaves a file without one, and analysis converts the JSONL instead
(``checkers.load.parquet_is_current``).
"""
from __future__ import annotations

import json
import logging
import queue
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from checkers.history import Op, header
from checkers.load import JSONL_BYTES
from checkers.model import PARQUET_SCHEMA, Pairer

log = logging.getLogger(__name__)

ROW_GROUP = 10_000      # paired ops per row group of the live history.parquet


class ColumnarCopy:
    """Pairs JSONL lines as they are written and appends them to a Parquet
    file, off the writers' path (one queue put per op). Never fails the run:
    on any error it stops, removes its file and says so once."""

    def __init__(self, path: Path, row_group: int = ROW_GROUP):
        self.path = Path(path)
        self.row_group = row_group
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="history-parquet", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        if not self._failed:
            self._q.put(line)

    def close(self, jsonl_bytes: int) -> None:
        """Flush the last row group and write the footer (with ``jsonl_bytes``)."""
        self._q.put(("close", jsonl_bytes))
        self._thread.join()

    def _run(self) -> None:
        pairer, rows, writer = Pairer(), [], None
        try:
            writer = pq.ParquetWriter(self.path, PARQUET_SCHEMA)
            while True:
                item = self._q.get()
                if isinstance(item, tuple):
                    break
                rows.extend(p.to_row() for p in pairer.add(json.loads(item)))
                if len(rows) >= self.row_group:
                    writer.write_table(pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA))
                    rows = []
            rows.extend(p.to_row() for p in pairer.finish())
            if rows:
                writer.write_table(pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA))
            writer.add_key_value_metadata({JSONL_BYTES: str(item[1]).encode()})
            writer.close()
        except Exception as exc:  # noqa: BLE001 - the JSONL is the record; analysis converts it
            self._failed = True
            log.warning("history.parquet not kept (analysis will convert history.jsonl): %s", exc)
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass
            self.path.unlink(missing_ok=True)


class HistoryWriter:
    """Thread-safe appender; assigns ``index`` and ``time`` under one lock so
    that index order is time order. Writes the format header first when it
    starts a new file, and flushes every line (a crash loses at most one).
    ``columnar`` (default: on for a new file) keeps ``<name>.parquet`` beside
    it (``ColumnarCopy``); appending to an existing history keeps none."""

    def __init__(self, path: Path, start_ns: int | None = None, columnar: bool = True):
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
        self._columnar = ColumnarCopy(self.path.with_suffix(".parquet")) if columnar and fresh else None

    def now(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def append(self, op: Op) -> Op:
        with self._lock:
            op = {"index": self._next, "time": self.now(), **op}
            op["index"] = self._next
            self._next += 1
            line = json.dumps(op, separators=(",", ":"))
            self._file.write(line + "\n")
            self._file.flush()
            if self._columnar is not None:
                self._columnar.put(line)
        return op

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
                if self._columnar is not None:
                    self._columnar.close(self.path.stat().st_size)

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
