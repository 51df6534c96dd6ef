"""The columnar copy's process: history.jsonl -> history.parquet as the run goes.

``history.writer.ColumnarCopy`` starts ``python -m history.live_copy``
with the paths and settings as one JSON argument, and talks to it on its
stdin, one line at a time:

* ``{"row_group": N}``: row groups of N paired ops from now on;
* ``{"workload_over": true}``: the workload is over; the copy logs how far
  behind the writer it is (what it still has to pair beside the final drain);
* ``{"end": N}``: the writer closed and the JSONL is N bytes: pair the rest,
  write the footers (the history's naming N, ``history.parquet.JSONL_BYTES``;
  the message index's beside it, ``history.message_index``), report and exit 0.

It runs at the recording process's priority. Niced, it took only the CPU the
brokers and clients left, and a 10-minute run at full speed (40M sends) ended
with 2.1 GB of the JSONL still to pair: 67 s after the drain. At the same
priority it kept up (5 MB behind at the end) and the run wrote as many
messages (docs/benchmarks.md, "The final drain in processes").

End of stdin without an ``end`` means the recording process died: this one
exits at once, leaving a file without a footer, which
``history.parquet.parquet_is_current`` rejects (analysis converts the JSONL).
Its report, on stdout, is JSON lines: ``{"log": level, "msg": ...}`` for the
parent to log, then ``{"busy_s": ...}``.

Within it, three threads overlap: the next block is read and parsed
(``jsonl_blocks.parse_lines``: pyarrow's JSON reader and RE2, outside the
GIL) while this one pairs, and the one before is written (Parquet encoding,
also outside the GIL). Behind the final drain the copy had the machine to
itself and used one core of two: 28 s after a 10-minute run's drain.

Pairing in a process of its own keeps its CPU (pyarrow, numpy, and Python
between them) off the recording process's GIL: in a thread there, it slowed
the producer threads while it ran.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from history.child_process import LogLines, ignore_interrupt, say, watch_parent
from history.convert import Unsupported, carry_text, pair_parsed
from history.jsonl_blocks import ParsedLines, parse_lines
from history.parquet import JSONL_BYTES, PairedOpsWriter, remove_columnar
from history.paired import PARQUET_SCHEMA, Pairer


log = logging.getLogger("history.live_copy")


class Copy:
    """Follows a JSONL history as it is written, from byte ``start`` (after
    the header), and appends its paired ops to a Parquet file in row groups of
    ``row_group``. Blocks are paired by ``history.convert`` (an invoke whose
    completion has not been written yet is carried to the next block); from
    the first block that path does not support, op by op (``model.Pairer``).
    On any error it stops and removes its file (analysis converts the JSONL)."""

    def __init__(self, path: str, jsonl: str, start: int, row_group: int, interval_s: float, block_bytes: int):
        self.path = Path(path)
        self.jsonl = Path(jsonl)
        self.row_group = row_group
        self.interval_s = interval_s
        self.block_bytes = block_bytes
        self.busy_s = 0.0
        self._pos = start
        self._carry: ParsedLines | None = None   # invokes outstanding at the last block's end
        self._behind = False
        self._pairer: Pairer | None = None     # set when the columnar path gave up
        self._pending: list[pa.Table] = []
        self._end: int | None = None           # the JSONL's final size, once the writer closed
        self._wake = threading.Event()

    def hear(self, msg: dict) -> bool:
        """One of the parent's lines (``child_process.watch_parent``); True
        after ``end``. End of stdin before it: the parent died, and the
        process exits without a footer."""
        if "row_group" in msg:
            self.row_group = int(msg["row_group"])
        if msg.get("workload_over"):
            try:
                behind = self.jsonl.stat().st_size - self._pos
            except OSError:
                behind = 0
            log.info("history.parquet: %.0f MB of history.jsonl still to pair at the workload's end",
                     behind / 1e6)
        if "end" in msg:
            self._end = int(msg["end"])
            self._wake.set()
            return True
        return False

    def run(self) -> bool:
        writer = None
        try:
            writer = PairedOpsWriter(self.path)
            with open(self.jsonl, "rb") as fh, \
                    ThreadPoolExecutor(1, thread_name_prefix="kchaos-copy-parse") as parse, \
                    ThreadPoolExecutor(1, thread_name_prefix="kchaos-copy-write") as write:
                body, final = self._read(fh)
                ahead = parse.submit(parse_lines, body) if body else None
                writing: Future | None = None
                while True:
                    current, current_body, current_final = ahead, body, final
                    if not current_final:      # the next block parses while this one pairs
                        body, final = self._read(fh)
                        ahead = parse.submit(parse_lines, body) if body else None
                    if current is None and not current_final:
                        continue
                    t = time.monotonic()
                    table = self._pair(current, current_body, final=current_final)
                    if writing is not None:
                        writing.result()
                    writing = write.submit(self._add, writer, table, current_final)
                    self.busy_s += time.monotonic() - t
                    if current_final:
                        writing.result()
                        break
            writer.close({JSONL_BYTES: str(self._end).encode()})
            return True
        except Exception as exc:  # noqa: BLE001 - the JSONL is the record; analysis converts it
            log.warning("history.parquet not kept (analysis will convert history.jsonl): %s", exc)
            if writer is not None:
                writer.discard()
            remove_columnar(self.path)
            return False

    def _read(self, fh: BinaryIO) -> tuple[bytes, bool]:
        """The next block of whole lines, and whether it is the last (the
        writer closed and this reaches its final size). Rests ``interval_s``
        first unless the block before was more than half full (the copy is
        behind: the next block at once)."""
        if not self._behind:
            self._wake.wait(self.interval_s)
        end = self._end
        fh.seek(self._pos)
        limit = self.block_bytes if end is None else min(self.block_bytes, end - self._pos)
        body = fh.read(max(0, limit))
        body = body[:body.rfind(b"\n") + 1]     # whole lines only: the writer may be mid-line
        if not body and end is not None:         # a line longer than a block: the rest at once
            body = fh.read(max(0, end - self._pos))
        self._pos += len(body)
        self._behind = len(body) > limit // 2
        return body, end is not None and self._pos >= end

    def _pair(self, parsed: Future | None, body: bytes, final: bool) -> pa.Table:
        """The paired ops of a block (``parsed``: its ``parse_lines``, made in
        a thread; None for an empty block), after the carry of the one before."""
        if self._pairer is None:
            try:
                lines = parsed.result() if parsed is not None else parse_lines(b"")
                table, self._carry = pair_parsed(lines, self._carry, final)
                return table
            except Unsupported as exc:
                log.info("history.parquet: op-by-op pairing from here on (%s)", exc)
                self._pairer, body, self._carry = Pairer(), carry_text(self._carry) + body, None
        rows = [p.to_row() for line in body.splitlines() if line.strip()
                for p in self._pairer.add(json.loads(line))]
        if final:
            rows.extend(p.to_row() for p in self._pairer.finish())
        return pa.Table.from_pylist(rows, schema=PARQUET_SCHEMA)

    def _add(self, writer: PairedOpsWriter, table: pa.Table, final: bool) -> None:
        """Write whole row groups; keep the rest for later (all of it when
        ``final``). Runs in the writing thread, one table at a time."""
        if table.num_rows:
            self._pending.append(table)
        rows = sum(t.num_rows for t in self._pending)
        if rows < self.row_group and not (final and rows):
            return
        merged = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        whole = rows if final else rows - rows % self.row_group
        writer.write(merged.slice(0, whole), row_group_size=self.row_group)
        self._pending = [merged.slice(whole)] if whole < rows else []


def main(argv: list[str]) -> int:
    ignore_interrupt()
    log.addHandler(LogLines())
    log.setLevel(logging.INFO)
    log.propagate = False
    conf = json.loads(argv[0])
    copy = Copy(conf["path"], conf["jsonl"], conf["start"], conf["row_group"], conf["interval_s"],
                conf["block_bytes"])
    watch_parent(copy.hear)
    ok = copy.run()
    say({"busy_s": copy.busy_s, "ok": ok})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
