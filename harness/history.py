"""The history: every operation's invocation and completion, as JSON lines.

One JSON object per line, appended and flushed as it happens so that a crash
loses at most the line being written. Fields (DESIGN.md section 3):

=========  ==================================================================
index      position in the history (0, 1, 2, ...), assigned by the writer
time       nanoseconds since the run started (harness monotonic clock)
process    int for a logical client; "nemesis" for faults; "sampler" for
           metadata samples. A crashed client's successor gets a new int.
type       "invoke", then exactly one completion: "ok" | "fail" | "info"
f          "send" | "poll" | "assign" | "subscribe" | "sample" | nemesis op
value      see below
error      client error text on fail/info (optional)
node       the node the client talked to (optional)
=========  ==================================================================

Values, with one topic per run and the key of a message equal to its partition:

* ``send`` invoke: ``[[partition, value, null], ...]``; ok: the same list with
  the acknowledged offset in place of null. fail/info: as invoked.
  ``value`` is an int, unique per partition (a counter), so it identifies a send.
* ``poll`` invoke: null; ok: ``{"<partition>": [[offset, value], ...], ...}``.
* ``assign``/``subscribe``: the list of partitions (assign) or the topic.
* ``sample`` (process "sampler", type "ok" only, no invoke):
  ``{"controller": broker_id|null, "partitions": {"<p>": {"leader": id|null,
  "isr": [ids], "epoch": int|null}}}``. Broker id k runs on node "nk".
* nemesis ops (process "nemesis"): invoke then "info"; value is a dict with at
  least ``nodes`` (names affected) and whatever else names the fault.

Polls with ``"drain": true`` in the op are the final-phase reads of each
partition from its start to its end offset.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

Op = dict[str, Any]

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
COMPLETIONS = (OK, FAIL, INFO)
NEMESIS, SAMPLER = "nemesis", "sampler"


class HistoryFormatError(Exception):
    """A history line that cannot be read (not the truncated last line)."""

    exit_code = 3


class HistoryWriter:
    """Thread-safe appender; assigns ``index`` and ``time`` under one lock so
    that index order is time order."""

    def __init__(self, path: Path, start_ns: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self._next = 0
        self.start_ns = time.monotonic_ns() if start_ns is None else start_ns

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


def read_history(path: Path) -> Iterator[Op]:
    """Yield ops from a JSONL history.

    A truncated last line (a crash mid-write) is skipped with a warning; a
    corrupt line anywhere else raises HistoryFormatError naming the line.
    """
    path = Path(path)
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        pending: tuple[int, str] | None = None
        for lineno, line in enumerate(fh, start=1):
            if pending is not None:
                raise HistoryFormatError(f"{path}:{pending[0]}: corrupt history line: {pending[1][:80]!r}")
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except json.JSONDecodeError:
                pending = (lineno, line)
                continue
            if not isinstance(op, dict) or "type" not in op or "f" not in op:
                raise HistoryFormatError(f"{path}:{lineno}: not a history op: {line[:80]!r}")
            yield op
        if pending is not None:
            if pending[1].endswith("\n"):
                raise HistoryFormatError(f"{path}:{pending[0]}: corrupt history line: {pending[1][:80]!r}")
            log.warning("%s:%d: ignoring truncated last line (the run was interrupted mid-write)",
                        path, pending[0])
