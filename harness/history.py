"""Writing the history: every op's invocation and completion, as it happens.

The format, and its reader, are ``checkers.history``: the one spec of what a
history holds. This module only appends to it, from many threads at once.

Beside history.jsonl (the crash-safe, readable record) the writer keeps
history.parquet, the same ops paired as the checkers read them
(``checkers.model``), written in row groups by a thread of its own so that
analysis of a finished run never re-reads the JSONL. That thread reads the
JSONL behind the writer (a block of new lines about every second) and pairs
each block column by column (``checkers.convert``, the conversion analysis
uses), so the workers pay nothing for it but the line they write. The file gets
its footer, naming the JSONL size it covers, when the writer closes; a run
killed before that leaves a file without one, and analysis converts the JSONL
instead (``checkers.load.parquet_is_current``).
"""
from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from json.encoder import encode_basestring_ascii
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from checkers.history import Op, header
from checkers.load import JSONL_BYTES
from checkers.model import PARQUET_SCHEMA, Pairer

log = logging.getLogger(__name__)

ROW_GROUP = 10_000      # paired ops per row group of the live history.parquet
TAIL_INTERVAL_S = 1.0   # how often, at most, the columnar copy reads the JSONL's new lines
COPY_SHARE = 0.1        # the copy's share of the time while the writer is open: after a block that
                        # took t s it rests t * (1 - share) / share s (9 t), so a fast workload is
                        # not slowed by it; at close it pairs whatever it has not reached
COPY_BLOCK_BYTES = 1 << 26    # JSONL bytes paired at a time, at most (bounded memory)



def _line_encoder():
    """A compact JSON encoder made once (json.dumps with arguments builds one
    per call): the C encoder itself when there is one (its output equals
    ``json.dumps(op, separators=(",", ":"))``; no circular-reference check, ops
    are trees), else the Python one."""
    from json.encoder import c_make_encoder, encode_basestring_ascii
    if c_make_encoder is None:
        return json.JSONEncoder(separators=(",", ":")).encode

    def default(o: object) -> object:
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    c = c_make_encoder(None, default, encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda op: "".join(c(op, 0))


_encode = _line_encoder()
_string = encode_basestring_ascii     # a JSON string, as _encode writes it

# The keys, in order, of the ops ``_send_line`` writes itself: a one-message
# send (a pipelined producer's, workloads/pipelined.py: nearly every line of a
# fast run) with any of its optional fields, in the order it builds them.
_OPTIONAL = ("producer", "error", "node")
_SEND_KEYS = frozenset(("process", "type", "f", "value") + tuple(k for k, on in zip(_OPTIONAL, bits) if on)
                       for bits in itertools.product((False, True), repeat=len(_OPTIONAL)))
_SEND_PARTS: dict[tuple, tuple[str, str, str]] = {}    # (type, f, producer, node) -> the line's fixed parts
_ABSENT = object()      # in a _SEND_PARTS key: no such field (a field that is None is not a string)


def _send_parts(keys: tuple, typ: object, f: object, producer: object, node: object) -> tuple[str, str, str] | None:
    """The fixed text of a send line: after the process, after the value's
    message, and after the error (or None: a field is not a string)."""
    if not all(type(s) is str for s in (typ, f) + tuple(s for k, s in (("producer", producer), ("node", node))
                                                        if k in keys)):
        return None
    return (f',"type":{_string(typ)},"f":{_string(f)},"value":[[',
            "]]" + (f',"producer":{_string(producer)}' if "producer" in keys else ""),
            (f',"node":{_string(node)}' if "node" in keys else "") + "}")


def _send_line(index: int, t: int, op: Op) -> str | None:
    """``_encode({"index": index, "time": t, **op})`` for a one-message send op
    (keys as in ``_SEND_KEYS``, an int process, a ``[[int, int, int|null]]``
    value, string fields) in about half the time; None for any other op.
    tests/harness/test_history_lines.py holds it to the encoder."""
    rest = _send_rest(op)
    return None if rest is None else f'{{"index":{index},"time":{t},{rest}'


def _send_rest(op: Op) -> str | None:
    """``_send_line`` after its index and time (``"process":...}``): all of it
    that does not depend on them, made before the writer takes its lock."""
    keys = tuple(op)
    if keys not in _SEND_KEYS:
        return None
    key = (op["type"], op["f"], op.get("producer", _ABSENT), op.get("node", _ABSENT))
    try:
        parts = _SEND_PARTS.get(key)
    except TypeError:                   # unhashable: not strings
        return None
    if parts is None:
        parts = _send_parts(keys, *key)
        if parts is None:
            return None
        if len(_SEND_PARTS) >= 4096:     # bounded: producer names are many in a long run
            _SEND_PARTS.clear()
        _SEND_PARTS[key] = parts
    process, value = op["process"], op["value"]
    if type(value) is not list or len(value) != 1 or type(process) is not int:
        return None
    m = value[0]
    if type(m) is not list or len(m) != 3:
        return None
    partition, v, offset = m
    if type(partition) is not int or type(v) is not int:    # (not bool, nor an int subclass)
        return None
    if offset is None:
        offset = "null"
    elif type(offset) is not int:
        return None
    after_process, after_value, end = parts
    if "error" in op:
        error = op["error"]
        if type(error) is not str:
            return None
        return f'"process":{process}{after_process}{partition},{v},{offset}{after_value},"error":{_string(error)}{end}'
    return f'"process":{process}{after_process}{partition},{v},{offset}{after_value}{end}'


class ColumnarCopy:
    """Follows a JSONL history as it is written, from byte ``start`` (after
    the header), and appends its paired ops to a Parquet file in row groups of
    ``row_group``. Blocks are paired by ``checkers.convert`` (an invoke whose
    completion has not been written yet is carried to the next block); from
    the first block that path does not support, op by op (``model.Pairer``).
    Never fails the run: on any error it stops, removes its file and says so
    once."""

    def __init__(self, path: Path, jsonl: Path, start: int, row_group: int = ROW_GROUP,
                 interval_s: float = TAIL_INTERVAL_S, share: float = COPY_SHARE,
                 block_bytes: int = COPY_BLOCK_BYTES):
        self.path = Path(path)
        self.jsonl = Path(jsonl)
        self.row_group = row_group
        self.interval_s = interval_s
        self.share = share
        self.block_bytes = block_bytes
        self.busy_s = 0.0                       # time spent pairing and writing (bench figures)
        self._pos = start
        self._carry = b""
        self._pairer: Pairer | None = None     # set when the columnar path gave up
        self._pending: list[pa.Table] = []
        self._end: int | None = None           # the JSONL's final size, once the writer closed
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="history-parquet", daemon=True)
        self._thread.start()

    def close(self, jsonl_bytes: int) -> None:
        """Pair up to ``jsonl_bytes``, flush the last row group and write the footer."""
        self._end = jsonl_bytes
        self._wake.set()
        self._thread.join()

    # -- the copy's thread ----------------------------------------------------------
    def _run(self) -> None:
        writer = None
        try:
            writer = pq.ParquetWriter(self.path, PARQUET_SCHEMA)
            rest = self.interval_s
            with open(self.jsonl, "rb") as fh:
                while True:
                    self._wake.wait(rest)
                    end = self._end
                    fh.seek(self._pos)
                    limit = self.block_bytes if end is None else min(self.block_bytes, end - self._pos)
                    body = fh.read(max(0, limit))
                    body = body[:body.rfind(b"\n") + 1]     # whole lines only: the writer may be mid-line
                    if not body and end is not None:         # a line longer than a block: the rest at once
                        body = fh.read(max(0, end - self._pos))
                    self._pos += len(body)
                    final = end is not None and self._pos >= end
                    t = time.monotonic()
                    if body or final:
                        self._add(writer, self._pair(body, final=final), final=final)
                    took = time.monotonic() - t
                    self.busy_s += took
                    if final:
                        break
                    rest = max(self.interval_s, took * (1 - self.share) / self.share)
            writer.add_key_value_metadata({JSONL_BYTES: str(self._end).encode()})
            writer.close()
        except Exception as exc:  # noqa: BLE001 - the JSONL is the record; analysis converts it
            log.warning("history.parquet not kept (analysis will convert history.jsonl): %s", exc)
            if writer is not None:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass
            self.path.unlink(missing_ok=True)

    def _pair(self, body: bytes, final: bool) -> pa.Table:
        from checkers.convert import Unsupported, pair_block
        if self._pairer is None:
            try:
                table, self._carry = pair_block(self._carry + body, final)
                return table
            except Unsupported as exc:
                log.info("history.parquet: op-by-op pairing from here on (%s)", exc)
                self._pairer, body, self._carry = Pairer(), self._carry + body, b""
        rows = [p.to_row() for line in body.splitlines() if line.strip()
                for p in self._pairer.add(json.loads(line))]
        if final:
            rows.extend(p.to_row() for p in self._pairer.finish())
        return pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA)

    def _add(self, writer: pq.ParquetWriter, table: pa.Table, final: bool) -> None:
        """Write whole row groups; keep the rest for later (all of it when ``final``)."""
        if table.num_rows:
            self._pending.append(table)
        rows = sum(t.num_rows for t in self._pending)
        if rows < self.row_group and not (final and rows):
            return
        merged = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        whole = rows if final else rows - rows % self.row_group
        writer.write_table(merged.slice(0, whole), row_group_size=self.row_group)
        self._pending = [merged.slice(whole)] if whole < rows else []


class HistoryWriter:
    """Thread-safe appender; assigns ``index`` and ``time`` under one lock so
    that index order is time order. Writes the format header first when it
    starts a new file, and writes every line with one unbuffered ``write``
    as it is appended: the line is in the kernel before ``append`` returns, so
    a crash of the process loses nothing it recorded (a crash of the machine
    loses what the kernel had not written back, as before).
    ``columnar`` (default: on for a new file) keeps ``<name>.parquet`` beside
    it (``ColumnarCopy``); appending to an existing history keeps none."""

    def __init__(self, path: Path, start_ns: int | None = None, columnar: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._file = open(self.path, "ab", buffering=0)     # each write() is one system call
        self._lock = threading.Lock()
        self._next = 0
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns
        if fresh:
            wall_zero = time.time_ns() - (time.monotonic_ns() - self.start_ns)
            self._file.write((_encode(header(wall_zero)) + "\n").encode())
        self._columnar = (ColumnarCopy(self.path.with_suffix(".parquet"), self.path, self.path.stat().st_size)
                          if columnar and fresh else None)

    def now(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def append(self, op: Op) -> Op:
        """Write ``op`` with its index and time; returns it with them (the
        dict given, or a copy)."""
        return self.append_many([op])[0]

    def append_many(self, ops: list[Op]) -> list[Op]:
        """``append`` for several ops, in order, with one ``write``: the lines
        are in the kernel together when it returns."""
        out = []
        rests = [_send_rest(op) for op in ops]      # outside the lock: the other threads' appends go on
        with self._lock:
            lines = []
            i, start = self._next, self.start_ns
            for op, rest in zip(ops, rests):
                t = time.monotonic_ns() - start
                if rest is None:
                    op = {"index": i, "time": t, **op}
                    op["index"] = i
                    line = _encode(op)
                else:                   # the line is made: stamp the op itself, no copy
                    line = f'{{"index":{i},"time":{t},{rest}'
                    op["index"], op["time"] = i, t
                i += 1
                lines.append(line)
                out.append(op)
            if not lines:
                return out
            self._next = i
            lines.append("")
            data = "\n".join(lines).encode()
            written = self._file.write(data)
            if written != len(data):        # a short write (disk full, a signal): finish it
                self._write_rest(data, written or 0)
        return out

    def _write_rest(self, data: bytes, done: int) -> None:
        view = memoryview(data)
        while done < len(data):
            done += self._file.write(view[done:]) or 0

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
