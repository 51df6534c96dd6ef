"""Writing the history: every op's invocation and completion, as it happens.

The format, and its reader, are ``history.ops``: the one spec of what a
history holds. This module only appends to it, from many threads at once.

Beside history.jsonl (the crash-safe, readable record) the writer keeps
history.parquet, the same ops paired as the checkers read them
(``history.paired``), and its message index (``history.message_index``),
written in row groups by a process of its own
(``history.live_copy``) so that analysis of a finished run never re-reads
the JSONL. That process reads the JSONL behind the writer (a block of new
lines about every second) and pairs each block column by column
(``history.convert``, the conversion analysis uses), so the workers pay
nothing for it but the line they write. The file gets its footer, naming the
JSONL size it covers, when the writer closes; a run killed before that leaves
a file without one (the copy's process exits when its stdin closes), and
analysis converts the JSONL instead (``history.parquet.parquet_is_current``).
"""
from __future__ import annotations

import itertools
import json
import logging
import subprocess
import threading
import time
from json.encoder import c_make_encoder, encode_basestring_ascii
from pathlib import Path

from . import child_process
from .ops import SEND, Op, header
from .parquet import remove_columnar

log = logging.getLogger(__name__)

ROW_GROUP = 10_000      # paired ops per row group of the live history.parquet
TAIL_INTERVAL_S = 1.0   # how often the columnar copy reads the JSONL's new lines (at once
                        # while it is behind)
COPY_BLOCK_BYTES = 1 << 26    # JSONL bytes paired at a time, at most (bounded memory)

# A one-message send op as a row: (process, type, partition, value, offset or
# None, producer, error or None); a completion's node is the producer's
# (``ctx.node``), recorded beside the rows.
SendRow = tuple[int, str, int, int, "int | None", str, "str | None"]


def send_op(row: SendRow, node: str | None) -> Op:
    """The op ``row`` stands for, its keys in the order the history writes them."""
    process, typ, partition, value, offset, producer, error = row
    op: Op = {"process": process, "type": typ, "f": SEND, "value": [[partition, value, offset]],
              "producer": producer}
    if error is not None:
        op["error"] = error
    if node is not None:
        op["node"] = node
    return op


def _line_encoder():
    """A compact JSON encoder made once (json.dumps with arguments builds one
    per call): the C encoder itself when there is one (its output equals
    ``json.dumps(op, separators=(",", ":"))``; no circular-reference check, ops
    are trees), else the Python one."""
    if c_make_encoder is None:
        return json.JSONEncoder(separators=(",", ":")).encode

    def default(o: object) -> object:
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")

    c = c_make_encoder(None, default, encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda op: "".join(c(op, 0))


_encode = _line_encoder()


def op_text(op: Op) -> str:
    """An op's JSON text as the history writes it (``HistoryWriter.append_text``
    takes it, made in another process, without ``index`` and ``time``)."""
    return _encode(op)

_string = encode_basestring_ascii     # a JSON string, as _encode writes it

# The keys, in order, of the ops ``_send_line`` writes itself: a one-message
# send (a pipelined producer's, workloads/pipelined.py: nearly every line of a
# fast run) with any of its optional fields, in the order it builds them.
_OPTIONAL = ("producer", "error", "node")
_SEND_KEYS = frozenset(("process", "type", "f", "value") + tuple(k for k, on in zip(_OPTIONAL, bits) if on)
                       for bits in itertools.product((False, True), repeat=len(_OPTIONAL)))
_SEND_PARTS: dict[tuple, tuple[str, str, str]] = {}    # (type, f, producer, node) -> the line's fixed parts
_ABSENT = object()      # in a _SEND_PARTS key: no such field (a field that is None is not a string)
_ROW_KEYS = (("process", "type", "f", "value", "producer"),     # append_sends' ops, without and with a node
             ("process", "type", "f", "value", "producer", "node"))


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


def _parts(keys: tuple, key: tuple) -> tuple | None:
    """``_send_parts(keys, *key)``, cached (None: not a shape the fast path writes)."""
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
    return parts


def _send_rest(op: Op) -> str | None:
    """``_send_line`` after its index and time (``"process":...}``): all of it
    that does not depend on them, made before the writer takes its lock."""
    keys = tuple(op)
    if keys not in _SEND_KEYS:
        return None
    parts = _parts(keys, (op["type"], op["f"], op.get("producer", _ABSENT), op.get("node", _ABSENT)))
    if parts is None:
        return None
    process, value = op["process"], op["value"]
    if type(value) is not list or len(value) != 1 or type(process) is not int:
        return None
    m = value[0]
    if type(m) is not list or len(m) != 3:
        return None
    partition, v, offset = m
    error = op.get("error", _ABSENT)
    if error is None:
        return None
    tail = _tail(parts, process, partition, v, offset, None if error is _ABSENT else error)
    return None if tail is None else f'"process":{tail}'


def _tail(parts: tuple[str, str, str], process: object, partition: object, value: object, offset: object,
          error: object) -> str | None:
    """A send line from its process on (error None: no error field), or None
    when a field is of another type (not bool, nor an int subclass)."""
    if type(process) is not int or type(partition) is not int or type(value) is not int:
        return None
    if offset is None:
        offset = "null"
    elif type(offset) is not int:
        return None
    after_process, after_value, end = parts
    if error is None:
        return f'{process}{after_process}{partition},{value},{offset}{after_value}{end}'
    if type(error) is not str:
        return None
    return f'{process}{after_process}{partition},{value},{offset}{after_value},"error":{_string(error)}{end}'


def _row_lines(rows: list[tuple], node: str | None, index: int, t: int) -> list[str] | None:
    """``_send_line(index + k, t, send_op(row, node))`` for the k-th row
    (``HistoryWriter.append_sends``), or None when a row has a field of
    another type."""
    lines: list[str] = []
    keys = _ROW_KEYS[0 if node is None else 1]
    node_key = _ABSENT if node is None else node
    head = f',"time":{t},"process":'
    for process, typ, partition, value, offset, producer, error in rows:
        parts = _parts(keys, (typ, "send", producer, node_key))
        if parts is None:
            return None
        tail = _tail(parts, process, partition, value, offset, error)
        if tail is None:
            return None
        lines.append(f'{{"index":{index}{head}{tail}')
        index += 1
    return lines


class ColumnarCopy:
    """Keeps a Parquet copy of a JSONL history as it is written, from byte
    ``start`` (after the header), in row groups of ``row_group`` paired ops:
    the pairing runs in a process of its own (``history.live_copy``,
    which reads the JSONL behind the writer every ``interval_s`` and pairs it
    ``block_bytes`` at a time), so the recording process's threads pay nothing
    for it but the line they write (in a thread it took their GIL). Never fails
    the run: if the process cannot start or fails, the file is not kept (said
    once in the log) and analysis converts the JSONL. If this process dies, the
    copy's stdin closes and it exits at once, leaving a file without a footer."""

    def __init__(self, path: Path, jsonl: Path, start: int, row_group: int = ROW_GROUP,
                 interval_s: float = TAIL_INTERVAL_S, block_bytes: int = COPY_BLOCK_BYTES):
        self.path = Path(path).absolute()
        self.busy_s = 0.0                       # the copy's time pairing and writing (bench figures)
        self._row_group = row_group
        conf = {"path": str(self.path), "jsonl": str(Path(jsonl).absolute()), "start": start,
                "row_group": row_group, "interval_s": interval_s, "block_bytes": block_bytes}
        try:
            self._proc: subprocess.Popen | None = child_process.start("history.live_copy", conf, text=True)
        except OSError as exc:
            log.warning("history.parquet not kept (analysis will convert history.jsonl): %s", exc)
            self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def row_group(self) -> int:
        return self._row_group

    @row_group.setter
    def row_group(self, n: int) -> None:
        """Row groups of ``n`` paired ops from the next one the copy writes."""
        self._row_group = n
        self._tell({"row_group": n})

    def _tell(self, msg: dict) -> bool:
        try:
            self._proc.stdin.write(json.dumps(msg) + "\n")
            self._proc.stdin.flush()
            return True
        except (AttributeError, OSError, ValueError):   # no process, or it is gone
            return False

    def workload_over(self) -> None:
        """The workload is over: the copy logs how far behind it is."""
        self._tell({"workload_over": True})

    def close(self, jsonl_bytes: int) -> None:
        """Pair up to ``jsonl_bytes``, flush the last row group and write the
        footer: waits for the copy's process to finish its backlog."""
        proc = self._proc
        if proc is None:
            return
        self._tell({"end": jsonl_bytes})
        self._proc = None
        t = time.monotonic()
        out, _ = proc.communicate()
        waited = time.monotonic() - t
        ok = False
        for line in out.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            child_process.relay_log(msg, log)
            if "busy_s" in msg:
                self.busy_s, ok = msg["busy_s"], msg["ok"]
        log.info("history: the columnar copy finished %.1f s after the history closed (%.1f s of pairing "
                 "in all)", waited, self.busy_s)
        if proc.returncode != 0 or not ok:
            if proc.returncode != 0:
                log.warning("history.parquet not kept (analysis will convert history.jsonl): "
                            "its process exited with %s", proc.returncode)
            if not ok:
                remove_columnar(self.path)


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

    def workload_over(self) -> None:
        """The workload is over (the columnar copy logs how far behind it is)."""
        if self._columnar is not None:
            self._columnar.workload_over()

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

    def append_text(self, text: str) -> int:
        """Write an op already encoded (``_encode``'s text of a non-empty op
        without ``index`` and ``time``: a drain process's, which encoded it
        there), with its index and time; returns the index."""
        with self._lock:
            i = self._next
            data = f'{{"index":{i},"time":{time.monotonic_ns() - self.start_ns},{text[1:]}\n'.encode()
            self._next = i + 1
            written = self._file.write(data)
            if written != len(data):
                self._write_rest(data, written or 0)
        return i

    def append_sends(self, rows: list[tuple], node: str | None = None) -> int:
        """``append_many`` of one-message send ops given as rows, ``(process,
        type, partition, value, offset or None, producer, error or None)``
        (``SendRow``; ``node``, when not None, on each),
        without making their dicts: each line is ``_send_line``'s for the op
        ``send_op(row, node)``, all with one time (they
        are written together). Returns the first line's index. A row of other
        field types: the ops go to ``append_many``."""
        with self._lock:
            first = self._next
            lines = _row_lines(rows, node, first, time.monotonic_ns() - self.start_ns)
            if lines:
                self._next = first + len(lines)
                lines.append("")
                data = "\n".join(lines).encode()
                written = self._file.write(data)
                if written != len(data):
                    self._write_rest(data, written or 0)
        if lines is None:
            ops = self.append_many([send_op(row, node) for row in rows])
            return ops[0]["index"]
        return first

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
