"""history.jsonl -> the paired-op table, column by column (pyarrow, no per-line Python).

For a history with no current columnar copy (an interrupted run, an old one, a
hand-written one). The result equals ``pair_ops(read_history(path))`` row for
row (tests/checkers/test_chk_convert.py). Three steps, three modules:

* ``history.jsonl_blocks`` reads the file in blocks of whole lines and each
  line's fields: pyarrow's JSON reader the scalar fields, RE2 extraction the
  process and the text of the ``value``;
* here, pairing: a stable sort by process; a completion pairs with the line
  just before it of the same process if that is an invoke (``Pairer`` of
  ``history.paired``, in columns);
* ``history.value_columns`` builds the messages of client sends and polls
  (nearly every op) in columns from their value texts; every other op
  (nemesis, sampler, assign, anything odd) goes through ``_build``, the per-op
  definition, which also names a malformed op exactly.

Anything this path does not recognise (a corrupt line, a value it cannot type,
a header it does not expect) raises ``Unsupported``: the caller then uses the
per-op path, which reads every history and names every fault.
"""
from __future__ import annotations

import json
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from history.jsonl_blocks import BLOCK_BYTES, ParsedLines, Unsupported, line_blocks, parse_lines, to_numpy
from history.ops import COMPLETIONS, INVOKE, OK, POLL, SEND
from history.paired import CLIENT, MESSAGE_TYPE, PARQUET_SCHEMA, _build
from history.value_columns import list_column, poll_columns, send_columns

__all__ = ["BLOCK_BYTES", "Unsupported", "carry_text", "history_table", "history_tables", "pair_parsed"]

log = logging.getLogger(__name__)

_INCOMPLETE = "incomplete: no completion in the history"


def history_table(path: Path, block_bytes: int | None = None) -> pa.Table:
    """The paired ops of a JSONL history (``PARQUET_SCHEMA``, in ``pair_ops``
    order). Raises Unsupported when the columnar path cannot read it, and
    HistoryFormatError for an op the per-op definition refuses."""
    tables = list(history_tables(path, block_bytes))
    return pa.concat_tables(tables) if tables else PARQUET_SCHEMA.empty_table()


def history_tables(path: Path, block_bytes: int | None = None) -> Iterator[pa.Table]:
    """``history_table`` in pieces, one per block of about ``block_bytes`` of
    the file, so a history larger than memory converts in bounded memory.
    Concatenated they are ``history_table``: an invoke whose completion is not
    in its block is carried into the next block (a process has at most one
    op outstanding, so the carry is at most one line per process).

    The next block is read and parsed (the JSON reader, the regex extraction:
    most of the work, and outside the GIL) in a thread of its own while this
    one pairs the current block: the carry joins it already parsed."""
    blocks = line_blocks(Path(path), block_bytes or BLOCK_BYTES)
    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-parse") as pool:
        def parse_next() -> Future | None:
            nxt = next(blocks, None)
            return None if nxt is None else pool.submit(lambda b: (parse_lines(b[0]), b[1]), nxt)
        ahead = parse_next()
        carry: ParsedLines | None = None
        while ahead is not None:
            parsed, final = ahead.result()
            ahead = parse_next()
            table, carry = pair_parsed(parsed, carry, final)
            if table.num_rows:
                yield table


def pair_parsed(parsed: ParsedLines, carry: ParsedLines | None, final: bool) -> tuple[pa.Table, ParsedLines | None]:
    """The paired ops of a parsed block of lines (``jsonl_blocks.parse_lines``)
    after the ``carry`` of the block before, and (unless ``final``) the lines
    of the invokes still outstanding at its end: the next block's carry."""
    return _pair(parsed if carry is None else carry.concat(parsed), final)


def carry_text(carry: ParsedLines | None) -> bytes:
    """A carry's lines as the file had them."""
    return "".join(carry.lines.to_pylist()).encode() if carry is not None else b""


def _take(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """arr[idx], null where idx < 0."""
    return pc.take(arr, pa.array(np.where(idx < 0, 0, idx), mask=idx < 0))


def _opt_int(arr: np.ndarray, idx: np.ndarray) -> pa.Array:
    """arr[idx] as int64, null where idx < 0."""
    return pa.array(np.where(idx < 0, 0, arr[np.where(idx < 0, 0, idx)]), pa.int64(), mask=idx < 0)


def _table(cols: dict[str, Any], n: int) -> pa.Table:
    """``n`` rows of PARQUET_SCHEMA from ``cols``: a missing column null, a
    str one repeated, each cast to the schema's type."""
    arrays = []
    for f in PARQUET_SCHEMA:
        c = cols.get(f.name)
        if c is None:
            c = pa.nulls(n, f.type)
        elif isinstance(c, str):
            c = pa.repeat(pa.scalar(c, f.type), n)
        elif not isinstance(c, (pa.Array, pa.ChunkedArray)):
            c = pa.array(c, f.type)
        arrays.append(c.cast(f.type) if c.type != f.type else c)
    return pa.Table.from_arrays(arrays, schema=PARQUET_SCHEMA)


def _codes(col: pa.Array) -> np.ndarray:
    """Equal strings, equal ints (null: -1): string comparison without Python objects."""
    return to_numpy(pc.dictionary_encode(col).indices, -1)


def _pair(parsed: ParsedLines, final: bool) -> tuple[pa.Table, ParsedLines | None]:
    """The paired ops of parsed lines, and (unless ``final``) the lines of the
    invokes still outstanding at their end."""
    n = len(parsed)
    if not n:
        return PARQUET_SCHEMA.empty_table(), None
    lines, t, pint, pstr, vtext = parsed.lines, parsed.t, parsed.pint, parsed.pstr, parsed.vtext
    has_v = parsed.has_v
    ty = t["type"].combine_chunks()
    is_inv = to_numpy(pc.equal(ty, INVOKE))
    is_comp = to_numpy(pc.is_in(ty, pa.array(list(COMPLETIONS))))
    if not (is_inv | is_comp).all():
        raise Unsupported("unknown type")
    fcol = t["f"].combine_chunks()
    fcode = to_numpy(pc.index_in(fcol, pa.array([SEND, POLL])), -1)
    index, time = to_numpy(t["index"]), to_numpy(t["time"])

    client = to_numpy(pc.is_valid(pint)) & to_numpy(pc.not_equal(pint, ""), False)
    named = to_numpy(pc.is_valid(pstr)) & to_numpy(pc.not_equal(pstr, ""), False) & ~client
    if not (client | named).all():
        raise Unsupported("process neither int nor plain string")
    try:
        proc = to_numpy(pc.cast(pc.if_else(pa.array(client), pint, pa.scalar(None, pint.type)), pa.int64()), 0) \
            if client.any() else np.zeros(n, np.int64)
    except (pa.ArrowInvalid, OverflowError):
        raise Unsupported("process out of range") from None
    key = np.where(client, proc * 2, 0)
    if named.any():
        _, codes = np.unique(to_numpy(pstr.filter(pa.array(named))).astype(str), return_inverse=True)
        key[named] = codes * 2 + 1

    # pairing, as model.Pairer does it
    pos = np.arange(n)
    order = np.lexsort((pos, key))
    same = key[order][1:] == key[order][:-1]
    prev = np.full(n, -1)
    nxt = np.full(n, -1)
    prev[order[1:][same]] = order[:-1][same]
    nxt[order[:-1][same]] = order[1:][same]
    comps = np.flatnonzero(is_comp)
    inv_of = prev[comps]
    inv_of = np.where((inv_of >= 0) & is_inv[np.maximum(inv_of, 0)], inv_of, -1)
    invs = np.flatnonzero(is_inv)
    nx = nxt[invs]
    sup = invs[(nx >= 0) & is_inv[np.maximum(nx, 0)]]
    left = invs[nx < 0]
    carry = None
    if not final:       # outstanding at the block's end: paired (or left) in a later block
        carry = parsed.take(np.sort(left))
        left = left[:0]
    left = left[np.lexsort((left, index[left]))]
    if len(sup):
        log.warning("%d invokes superseded by another invoke of the same process with an op outstanding", len(sup))
    p_inv = np.concatenate([inv_of, sup, left])
    p_comp = np.concatenate([comps, np.full(len(sup) + len(left), -1)])
    emit = np.concatenate([comps, nxt[sup], n + np.arange(len(left))])
    first = np.where(p_inv >= 0, p_inv, p_comp)
    both = (p_inv >= 0) & (p_comp >= 0)
    fint = _codes(fcol)
    mismatch = both & (fint[np.maximum(p_inv, 0)] != fint[np.maximum(p_comp, 0)])
    if mismatch.any():
        log.warning("%d completions whose f does not match their invoke's", int(mismatch.sum()))

    v_null = to_numpy(pc.equal(vtext, "null"), False)
    v_list = to_numpy(pc.starts_with(vtext, "["), False)

    fc = fcode[first]
    fast = client[first] & (fc >= 0) & ~mismatch
    pc_ = np.maximum(p_comp, 0)
    pi_ = np.maximum(p_inv, 0)
    is_send = fast & (fc == 0)
    # a send's value: the completion's, else (null or none) the invoke's
    comp_has = (p_comp >= 0) & has_v[pc_] & ~v_null[pc_]
    src = np.where(comp_has, p_comp, p_inv)
    send_ok = comp_has | ((p_comp < 0) | has_v[pc_]) & (p_inv >= 0) & has_v[pi_] & ~v_null[pi_]
    is_send &= send_ok
    is_poll = fast & (fc == 1)
    poll_src = np.where(p_comp >= 0, p_comp, p_inv)
    is_poll &= has_v[poll_src]
    typ_ok = (p_comp >= 0) & to_numpy(pc.equal(pc.take(ty, pa.array(pc_)), OK))
    poll_read = is_poll & typ_ok
    is_poll &= ~(poll_read & v_list[poll_src])
    poll_read &= is_poll
    src = np.where(is_send, src, poll_src)
    fast = is_send | is_poll

    tables, emits = [], []
    groups = [(np.flatnonzero(is_send), send_columns), (np.flatnonzero(poll_read), poll_columns),
              (np.flatnonzero(is_poll & ~poll_read), None)]
    err = t["error"].combine_chunks()
    node = t["node"].combine_chunks()
    producer = t["producer"].combine_chunks()
    isolation = t["isolation"].combine_chunks()
    group = t["group"].combine_chunks()
    drain = to_numpy(t["drain"], False)
    for rows, build in groups:
        if not len(rows):
            continue
        ri, rc, rf = p_inv[rows], p_comp[rows], first[rows]
        texts = _take(vtext, src[rows])
        cols: dict[str, Any] = {
            "invoke_index": pa.array(index[rf]), "index": _opt_int(index, rc),
            "invoke_time": pa.array(time[rf]), "time": _opt_int(time, rc),
            "process": pa.array(proc[rf]), "role": CLIENT,
            "type": pc.fill_null(_take(ty, rc), "info"), "f": pc.take(fcol, pa.array(rf)),
            "drain": pa.array((drain[np.maximum(ri, 0)] & (ri >= 0)) | (drain[np.maximum(rc, 0)] & (rc >= 0))),
            "error": pc.if_else(pa.array(rc >= 0), _take(err, rc), _INCOMPLETE),
            "value": texts,
        }
        for name, col in (("node", node), ("producer", producer), ("isolation", isolation), ("group", group)):
            cv, iv = _take(col, rc), _take(col, ri)
            use_comp = to_numpy(pc.and_(pc.is_valid(cv), pc.not_equal(pc.fill_null(cv, ""), "")), False)
            cols[name] = pc.if_else(pa.array(use_comp), cv, iv)
        if build is None:
            cols["messages"] = list_column(np.zeros(len(rows) + 1, np.int64), pa.array([], MESSAGE_TYPE))
        else:
            cols["messages"], cols["partitions"], cols["partition_starts"] = build(texts)
        tables.append(_table(cols, len(rows)))
        emits.append(emit[rows])

    slow = np.flatnonzero(~fast)
    if len(slow):
        def op(i: int) -> dict | None:
            return None if i < 0 else json.loads(lines[int(i)].as_py())
        rows_py = [_build(op(p_inv[k]), op(p_comp[k])).to_row() for k in slow]
        tables.append(pa.Table.from_pylist(rows_py, schema=PARQUET_SCHEMA))
        emits.append(emit[slow])
    if not tables:
        return PARQUET_SCHEMA.empty_table(), carry
    table = pa.concat_tables(tables)
    return table.take(pa.array(np.argsort(np.concatenate(emits), kind="stable"))), carry
