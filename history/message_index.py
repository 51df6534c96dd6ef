"""The message index: a history's messages, one row each, by (run, Kafka partition).

Every per-partition check (spark_partition.py) wants one partition's messages
as arrays; in history.parquet they are nested in their ops and spread over
every row group. Cutting them out at analysis time, and shuffling the pieces to
the task of their partition, was half the Spark stage (10M ops, warm: 3.2 s of
CPU to cut, 2.0 s to compress for the shuffle, then the shuffle itself).
The index is written as the history is, by the same writer
(``load.HistoryWriter``): ``history.messages.parquet`` beside
``history.parquet``, each row group one (run, partition)'s messages in history
order (``INDEX_SCHEMA``: the ``run`` and ``partition`` columns then
``MESSAGE_SCHEMA``), so a check reads its partition's row groups and nothing
else.

The index names its history by a digest of the history's Parquet footer
(``footprint``: row counts, byte ranges and statistics of every column chunk),
so it is current exactly while that file is unchanged; otherwise (a history
written before the index, or by hand, or rewritten) the Spark engine builds
one first (``build_index``).
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrays import _bools, _np, is_value
from .row_groups import index_path, is_index, read_group, source  # noqa: F401 - the index's names

# per message (TXN_ABORTED, TXN_UNKNOWN: writes of fail and info txns; a committed txn's are ACK/OK_NO_OFFSET)
ACK, OK_NO_OFFSET, FAIL, INFO, READ, TXN_ABORTED, TXN_UNKNOWN = 0, 1, 2, 3, 4, 5, 6
# per (op, partition) row from Spark
OK_SEND_OP, FAIL_SEND_OP, INFO_SEND_OP, READ_OP, DRAIN_READ_OP = 0, 2, 3, 4, 5
# txn writes by the txn's type; txn reads (of a committed txn, of any other)
TXN_OK_OP, TXN_FAIL_OP, TXN_INFO_OP, TXN_OK_READ_OP, TXN_READ_OP = 6, 7, 8, 9, 10

MESSAGE_SCHEMA = pa.schema([     # one Kafka partition's messages: no run or partition column
    ("id", pa.int64()), ("pos", pa.int32()),
    ("process", pa.int64()), ("producer", pa.string()), ("kind", pa.int8()), ("rc", pa.bool_()),
    ("t_inv", pa.int64()), ("t_done", pa.int64()), ("offset", pa.int64()), ("value", pa.int64()),
])
INDEX_SCHEMA = pa.schema([("run", pa.int32()), ("partition", pa.int32()), *MESSAGE_SCHEMA])
HISTORY_KEY = b"kchaos-history-footprint"   # index footer key: the footprint of the history it indexes
NO_PARTITION = -2**31                    # the partition column of messages that name none
ROWS = 1 << 18         # messages of a row group at most (about 14 MB in memory)
HELD_ROWS = 1 << 21    # messages held for all partitions at most: past it the largest goes
# Dictionary-encoded: the columns of few values. The others (ids, times, offsets, values) are
# nearly unique, and trying a dictionary first made writing 2.6x and reading 2.9x slower
# (1.1M messages: 0.47 s against 0.18 s to write). Statistics only where they are read
# (spark_scan.index_slices: a row group's key).
FEW_VALUED = ("run", "partition", "process", "producer", "kind", "rc")
# what cut reads of a paired-op table
CUT_COLUMNS = ("run", "invoke_index", "invoke_time", "time", "process", "role", "type", "f", "drain", "producer",
               "isolation", "messages", "reads")


def cut(t: pa.Table) -> Iterator[tuple[int, int | None, pa.Table]]:
    """A table's messages of client sends, txns and ok polls (a txn's
    reads too), one row each (``MESSAGE_SCHEMA``; ``pos`` is the message's
    place in its op's list), as (run, partition, table) per (run, partition),
    in the table's order within each. The rows are ordered by key before any
    column is gathered, so each column is gathered once."""
    t = t.combine_chunks()
    client, f, typ = is_value(t["role"], "client"), t["f"], t["type"]
    send, txn, poll = (is_value(f, x) & client for x in ("send", "txn", "poll"))
    ok, fail = is_value(typ, "ok"), is_value(typ, "fail")
    drain = _bools(t["drain"])
    kind = np.full(t.num_rows, -1, np.int8)
    kind[send] = np.where(ok[send], OK_SEND_OP, np.where(fail[send], FAIL_SEND_OP, INFO_SEND_OP))
    kind[txn] = np.where(ok[txn], TXN_OK_OP, np.where(fail[txn], TXN_FAIL_OP, TXN_INFO_OP))
    kind[poll & ok] = np.where(drain[poll & ok], DRAIN_READ_OP, READ_OP)
    read_kind = np.where(txn, np.where(ok, TXN_OK_READ_OP, TXN_READ_OP), -1).astype(np.int8)
    parents, positions, kinds, structs = [], [], [], []
    for name, of in (("messages", kind), ("reads", read_kind)):
        rows = np.flatnonzero(of >= 0)
        if not len(rows):
            continue
        lists = t[name].chunk(0).take(pa.array(rows))
        msgs = lists.flatten()
        if not len(msgs):
            continue
        parent = rows[pc.list_parent_indices(lists).to_numpy()]
        offs = lists.offsets.to_numpy()
        parents.append(parent)
        positions.append(np.arange(len(msgs)) - np.repeat(offs[:-1] - offs[0], np.diff(offs)))
        kinds.append(of[parent])
        structs.append(msgs)
    if not parents:
        return
    parent, pos, kinds_ = np.concatenate(parents), np.concatenate(positions), np.concatenate(kinds)
    msgs = pa.concat_arrays(structs) if len(structs) > 1 else structs[0]
    run = _np(t["run"])[parent].astype(np.int64)
    part = _np(msgs.field("partition"), NO_PARTITION).astype(np.int64)
    code = (run - run.min()) * (part.max() - part.min() + 1) + (part - part.min())
    order = np.argsort(code.astype(np.int16) if code.max() < 2**15 else code, kind="stable")
    at, code = pa.array(parent[order]), code[order]
    rc = ~is_value(t["isolation"], "read_uncommitted")     # null: read_committed
    producer = t["producer"].take(at)
    flat = pa.Table.from_arrays([
        t["invoke_index"].take(at), pa.array(pos[order], pa.int32()), pc.cast(t["process"].take(at), pa.int64()),
        pc.cast(producer, pa.string()) if pa.types.is_dictionary(producer.type) else producer,
        pa.array(kinds_[order]), pa.array(rc[parent[order]]), t["invoke_time"].take(at), t["time"].take(at),
        msgs.field("offset").take(pa.array(order)), msgs.field("value").take(pa.array(order))],
        schema=MESSAGE_SCHEMA)
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    for s, e in zip(starts, np.r_[starts[1:], len(code)]):
        p = int(part[order[s]])
        yield int(run[order[s]]), None if p == NO_PARTITION else p, flat.slice(s, e - s)


class IndexWriter:
    """Cuts each table of paired ops as it is written and holds the messages
    per (run, partition); a row group is written when a key holds ``rows``,
    or, for the largest, when all of them hold ``HELD_ROWS`` (memory stays
    bounded however many partitions a history has)."""

    def __init__(self, path: Path, rows: int = ROWS):
        self.path = Path(path)
        self.rows = rows
        self._writer = pq.ParquetWriter(self.path, INDEX_SCHEMA, use_dictionary=list(FEW_VALUED),
                                        write_statistics=["run", "partition"])
        self._held: dict[tuple[int, int], list[pa.Table]] = {}
        self._count: dict[tuple[int, int], int] = {}

    def add(self, table: pa.Table) -> None:
        if "run" not in table.column_names:
            table = table.append_column("run", pa.array(np.zeros(table.num_rows, np.int32)))
        if not table.num_rows:
            return
        for run, partition, t in cut(table):
            key = (run, NO_PARTITION if partition is None else partition)
            self._held.setdefault(key, []).append(t)
            self._count[key] = self._count.get(key, 0) + t.num_rows
            if self._count[key] >= self.rows:
                self._write(key)
        while sum(self._count.values()) > HELD_ROWS:
            self._write(max(self._count, key=self._count.__getitem__))

    def close(self, history: Path) -> None:
        """Write what is held (in key order) and the footer naming the
        ``history`` it indexes (closed, so its footer is final)."""
        for key in sorted(self._held):
            self._write(key)
        self._writer.add_key_value_metadata({HISTORY_KEY: footprint(history)})
        self._writer.close()

    def discard(self) -> None:
        try:
            self._writer.close()
        finally:
            self.path.unlink(missing_ok=True)

    def _write(self, key: tuple[int, int]) -> None:
        t = pa.concat_tables(self._held.pop(key))
        del self._count[key]
        n = t.num_rows
        keys = [pa.array(np.full(n, k, np.int32)) for k in key]
        self._writer.write_table(pa.Table.from_arrays(keys + t.columns, schema=INDEX_SCHEMA), row_group_size=n)


def footprint(path: Path) -> bytes:
    """A digest of a Parquet file's size and footer (b"": no footer)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size < 12:
            return b""
        fh.seek(size - 8)
        length, magic = struct.unpack("<I4s", fh.read(8))
        if magic != b"PAR1" or length > size - 12:
            return b""
        fh.seek(size - 8 - length)
        return hashlib.sha256(str(size).encode() + fh.read(length)).hexdigest().encode()


def index_is_current(history: Path, index: Path) -> bool:
    """True when ``index`` is a complete index of ``history`` as it is now."""
    try:
        meta = pq.read_metadata(index)
        mine = footprint(history)
    except (OSError, pa.ArrowException):
        return False
    return (bool(mine) and (meta.metadata or {}).get(HISTORY_KEY) == mine
            and meta.schema.to_arrow_schema().remove_metadata().equals(INDEX_SCHEMA))


def build_index(history: Path, index: Path) -> None:
    """Index a history.parquet that has no current index of its own (written
    before the index was, or by hand), row group by row group."""
    writer = IndexWriter(index)
    try:
        files: dict[str, pq.ParquetFile] = {}
        for group in source(history).groups:
            writer.add(read_group(group, CUT_COLUMNS, files))
        writer.close(history)
    except BaseException:
        writer.discard()
        raise
