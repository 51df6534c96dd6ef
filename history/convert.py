"""history.jsonl -> the paired-op table, column by column (pyarrow, no per-line Python).

For a history with no current columnar copy (an interrupted run, an old one, a
hand-written one). The result equals ``pair_ops(read_history(path))`` row for
row (tests/checkers/test_chk_convert.py):

* pyarrow's JSON reader reads the scalar fields of every line; RE2 extraction
  finds each line's process and the text of its ``value``;
* pairing is a stable sort by process: a completion pairs with the line just
  before it of the same process if that is an invoke (``model.Pairer``, in
  columns);
* client sends and polls (nearly every op) are built in columns from their
  value texts, read again by the JSON reader; every other op (nemesis,
  sampler, assign, anything odd) goes through ``model._build``, the per-op
  definition, which also names a malformed op exactly.

Anything this path does not recognise (a corrupt line, a value it cannot type,
a header it does not expect) raises ``Unsupported``: the caller then uses the
per-op path, which reads every history and names every fault.
"""
from __future__ import annotations

import json
import logging
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from history.ops import COMPLETIONS, FORMAT_VERSION, HEADER_KEY, INVOKE, OK, POLL, SEND
from history.paired import CLIENT, MESSAGE_TYPE, PARQUET_SCHEMA, _build

log = logging.getLogger(__name__)


class Unsupported(Exception):
    """The columnar path does not handle this history: use the per-op path."""


_SCALARS = pa.schema([("index", pa.int64()), ("time", pa.int64()), ("type", pa.string()), ("f", pa.string()),
                      ("drain", pa.bool_()), ("error", pa.string()), ("node", pa.string()),
                      ("producer", pa.string()), ("isolation", pa.string()), ("group", pa.string())])
_PROC = r'"process":\s*(?:(?P<i>-?\d+)\s*[,}]|"(?P<s>[^"\\]*)")'
# a send or poll value: null, a flat object (poll), or a list (send) up to the
# next key or the line's end; the JSON reader then checks its shape
_VALUE = r'"value":\s*(?P<v>null|\{[^{}]*\}|\[[^"{}]*\])'
_INCOMPLETE = "incomplete: no completion in the history"
_BLOCK = 1 << 24
# bytes of history.jsonl converted at a time: bounded memory for large histories,
# and blocks enough for the next one's parse to overlap this one's pairing
BLOCK_BYTES = 1 << 25


def _read_json(buf: pa.Buffer | bytes, schema: pa.Schema, unexpected: str) -> pa.Table:
    try:
        return pj.read_json(pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=_BLOCK),
                            parse_options=pj.ParseOptions(explicit_schema=schema,
                                                          unexpected_field_behavior=unexpected))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise Unsupported(f"json reader: {str(e)[:200]}") from None


def _lines(body: bytes) -> pa.LargeStringArray:
    """One string per line (each keeps its newline), without copying."""
    nl = np.flatnonzero(np.frombuffer(body, np.uint8) == 10)
    ends = nl + 1
    if not body.endswith(b"\n"):
        ends = np.append(ends, len(body))
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    arr = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(body))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        raise Unsupported("not UTF-8") from None
    return arr


def _blocks(path: Path, block_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """The file in blocks of whole lines, without its header and without a
    truncated last line; True with the last block."""
    marker = f'"{HEADER_KEY}"'.encode()
    with open(path, "rb") as fh:
        raw = fh.read(block_bytes)
        if raw[:1].isspace():
            raise Unsupported("leading blank line")
        first_end = raw.find(b"\n") + 1 or len(raw)
        if marker in raw[:first_end]:
            head = json.loads(raw[:first_end])
            version = head.get(HEADER_KEY) if isinstance(head, dict) else None
            if not isinstance(version, int) or isinstance(version, bool) or version > FORMAT_VERSION:
                raise Unsupported("header version")
            raw = raw[first_end:]
        while True:
            more = fh.read(block_bytes)
            if not more:
                break
            cut = raw.rfind(b"\n") + 1
            if cut:
                if marker in raw[:cut]:
                    raise Unsupported("header not on the first line")
                yield raw[:cut], False
            raw = raw[cut:] + more
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        if raw[cut:].strip():
            try:
                json.loads(raw[cut:])
            except ValueError:
                log.warning("%s: ignoring truncated last line (the run was interrupted mid-write)", path)
                raw = raw[:cut]
    if marker in raw:
        raise Unsupported("header not on the first line")
    yield raw, True


def _np(col: pa.ChunkedArray | pa.Array, fill: Any = None) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):      # (ChunkedArray.to_numpy imports pandas)
        col = col.combine_chunks()
    if fill is not None:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(zero_copy_only=False))


def _take(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """arr[idx], null where idx < 0."""
    return pc.take(arr, pa.array(np.where(idx < 0, 0, idx), mask=idx < 0))


def _opt_int(arr: np.ndarray, idx: np.ndarray) -> pa.Array:
    return pa.array(np.where(idx < 0, 0, arr[np.where(idx < 0, 0, idx)]), pa.int64(), mask=idx < 0)


def _joined(texts: pa.Array) -> pa.Buffer:
    """'{"v":<text>}' per line, as one buffer for the JSON reader."""
    big = pa.large_string()
    wrapped = pc.binary_join_element_wise(pa.scalar('{"v":', big), pc.cast(texts, big), pa.scalar("}\n", big),
                                          pa.scalar("", big))
    if isinstance(wrapped, pa.ChunkedArray):
        wrapped = wrapped.combine_chunks()
    if wrapped.type != pa.large_string():
        wrapped = pc.cast(wrapped, pa.large_string())
    offsets = np.frombuffer(wrapped.buffers()[1], np.int64)[wrapped.offset:wrapped.offset + len(wrapped) + 1]
    return wrapped.buffers()[2][int(offsets[0]):int(offsets[-1])]


def _list(offsets: np.ndarray, values: pa.Array, mask: np.ndarray | None = None) -> pa.Array:
    off = pa.array(offsets.astype(np.int32), pa.int32())
    arr = pa.ListArray.from_arrays(off, values)
    if mask is not None and mask.any():
        arr = pa.ListArray.from_arrays(off, values, mask=pa.array(mask))
    return arr


def _messages(part: np.ndarray, off: pa.Array, val: np.ndarray, row_offsets: np.ndarray) -> pa.Array:
    inner = pa.StructArray.from_arrays([pa.array(part, pa.int32()), off, pa.array(val, pa.int64())],
                                       fields=list(MESSAGE_TYPE))
    return _list(row_offsets, inner)


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _send_columns(texts: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """messages, partitions, partition_starts of send values ``[[p, v, o], ...]``."""
    v = _read_json(_joined(texts), pa.schema([("v", pa.list_(pa.list_(pa.int64())))]), "error")["v"]
    v = v.combine_chunks()
    if v.null_count:
        raise Unsupported("null send value")
    inner = v.flatten()
    if inner.null_count:
        raise Unsupported("null send message")
    lens = _np(pc.list_value_length(inner))
    if len(lens) and lens.min() < 2:
        raise Unsupported("short send message")
    p = pc.list_element(inner, 0)
    val = pc.list_element(inner, 1)
    if p.null_count or val.null_count:
        raise Unsupported("null partition or value")
    o_vals = np.zeros(len(lens), np.int64)
    o_null = np.ones(len(lens), bool)
    long = lens > 2
    if long.any():
        third = pc.list_element(inner.filter(pa.array(long)), 2)
        o_vals[long] = _np(third, 0)
        o_null[long] = _np(pc.is_null(third))
    o = pa.array(o_vals, pa.int64(), mask=o_null)
    part = _np(p)
    if len(part) and (part.min() < -2**31 or part.max() >= 2**31):
        raise Unsupported("partition out of range")
    row_off = np.asarray(v.offsets.to_numpy(), np.int64) - int(v.offsets[0].as_py())
    n_rows = len(v)
    row_of = np.repeat(np.arange(n_rows), np.diff(row_off))
    # partitions in order of first appearance; starts when each partition is one run
    new_run = np.ones(len(part), bool)
    if len(part):
        new_run[1:] = (part[1:] != part[:-1]) | (row_of[1:] != row_of[:-1])
    runs = np.bincount(row_of[new_run], minlength=n_rows) if len(part) else np.zeros(n_rows, np.int64)
    pairs = np.unique(np.stack([row_of, part]), axis=1) if len(part) else np.zeros((2, 0), np.int64)
    distinct = np.bincount(pairs[0], minlength=n_rows) if len(part) else np.zeros(n_rows, np.int64)
    run_idx = np.flatnonzero(new_run)
    parts_vals = part[run_idx]
    starts_vals = run_idx - row_off[row_of[run_idx]] if len(run_idx) else run_idx
    odd = np.flatnonzero(runs != distinct)
    messages = _messages(part, o, _np(val), row_off)
    if not len(odd):
        off = _offsets(runs)
        return (messages, _list(off, pa.array(parts_vals, pa.int32())),
                _list(off, pa.array(starts_vals, pa.int32())))
    # rare: a partition in two runs (no starts); fill those rows one by one
    parts_py, starts_py = [], []
    run_off = _offsets(runs)
    odd_set = set(odd.tolist())
    for r in range(n_rows):
        if r in odd_set:
            ps = part[row_off[r]:row_off[r + 1]].tolist()
            parts_py.append(list(dict.fromkeys(ps)))
            starts_py.append(None)
        else:
            parts_py.append(parts_vals[run_off[r]:run_off[r + 1]].tolist())
            starts_py.append(starts_vals[run_off[r]:run_off[r + 1]].tolist())
    return messages, pa.array(parts_py, pa.list_(pa.int32())), pa.array(starts_py, pa.list_(pa.int32()))


def _poll_columns(texts: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """messages, partitions, partition_starts of ok poll values ``{"<p>": [[o, v], ...]}``
    (or null), keeping each value's key order."""
    n_rows = len(texts)
    keys = sorted(set(re.findall(rb'"([^"]*)":', _joined(texts).to_pybytes())) - {b"v"})
    ints = []
    for k in keys:
        s = k.decode()
        if not re.fullmatch(r"-?\d+", s) or str(int(s)) != s or not -2**31 <= int(s) < 2**31:
            raise Unsupported(f"poll key {s!r}")
        ints.append(int(s))
    if len(set(ints)) != len(ints):
        raise Unsupported("duplicate poll key")
    fields = [(k.decode(), pa.list_(pa.list_(pa.int64()))) for k in keys]
    v = _read_json(_joined(texts), pa.schema([("v", pa.struct(fields))]), "error")["v"].combine_chunks() \
        if n_rows else pa.array([], pa.struct(fields))
    rows, poss, kidx, chunks = [], [], [], []
    for j, k in enumerate(keys):
        pos = _np(pc.find_substring(texts, f'"{k.decode()}":'))
        r = np.flatnonzero(pos >= 0)
        if not len(r):
            continue
        rows.append(r)
        poss.append(pos[r])
        kidx.append(np.full(len(r), ints[j], np.int64))
        chunks.append(pc.take(v.field(j), pa.array(r)))
    if not rows:
        empty = _offsets(np.zeros(n_rows, np.int64))
        return (_messages(np.zeros(0, np.int32), pa.array([], pa.int64()), np.zeros(0, np.int64), empty),
                _list(empty, pa.array([], pa.int32())), _list(empty, pa.array([], pa.int32())))
    row_e, pos_e, key_e = np.concatenate(rows), np.concatenate(poss), np.concatenate(kidx)
    order = np.lexsort((pos_e, row_e))
    entries = pc.take(pa.concat_arrays(chunks), pa.array(order))
    row_e, key_e = row_e[order], key_e[order]
    elen = _np(pc.list_value_length(entries), 0)
    pairs = entries.flatten()
    if pairs.null_count:
        raise Unsupported("null poll read")
    plen = _np(pc.list_value_length(pairs))
    if len(plen) and (plen.min() != 2 or plen.max() != 2):
        raise Unsupported("poll read is not [offset, value]")
    o = pc.list_element(pairs, 0)
    val = pc.list_element(pairs, 1)
    if o.null_count or val.null_count:
        raise Unsupported("null offset or value")
    part = np.repeat(key_e, elen)
    msg_rows = np.repeat(row_e, elen)
    row_off = _offsets(np.bincount(msg_rows, minlength=n_rows))
    ent_off = _offsets(np.bincount(row_e, minlength=n_rows))
    cum = np.concatenate([[0], np.cumsum(elen)])[:-1]
    starts = cum - row_off[row_e]
    return (_messages(part, o, _np(val), row_off), _list(ent_off, pa.array(key_e, pa.int32())),
            _list(ent_off, pa.array(starts, pa.int32())))


def _table(cols: dict[str, Any], n: int) -> pa.Table:
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
    blocks = _blocks(Path(path), block_bytes or BLOCK_BYTES)
    with ThreadPoolExecutor(1, thread_name_prefix="kchaos-parse") as pool:
        def parse_next() -> Future | None:
            nxt = next(blocks, None)
            return None if nxt is None else pool.submit(lambda b: (_parse(b[0]), b[1]), nxt)
        ahead = parse_next()
        carry: _Parsed | None = None
        while ahead is not None:
            parsed, final = ahead.result()
            ahead = parse_next()
            table, carry = _pair(parsed if carry is None else carry.concat(parsed), final)
            if table.num_rows:
                yield table


def pair_block(body: bytes, final: bool) -> tuple[pa.Table, bytes]:
    """The paired ops of a block of lines, and (unless ``final``) the lines of
    the invokes still outstanding at its end, to prepend to the next block."""
    table, carry = _pair(_parse(body), final)
    return table, "".join(carry.lines.to_pylist()).encode() if carry is not None else b""


@dataclass
class _Parsed:
    """A block's lines, their scalar fields, process and value texts: what
    pairing needs, all one entry per line (so carried lines join the next block)."""
    lines: pa.LargeStringArray
    t: pa.Table                 # _SCALARS
    pint: pa.Array              # the process, when an int (as text)
    pstr: pa.Array              # the process, when a string
    vtext: pa.Array             # the value's text, whitespace removed; null when not extracted
    has_v: np.ndarray           # a value text was extracted (exactly one "value" key)

    def __len__(self) -> int:
        return len(self.lines)

    def take(self, idx: np.ndarray) -> "_Parsed":
        i = pa.array(idx, pa.int64())
        return _Parsed(self.lines.take(i), self.t.take(i), self.pint.take(i), self.pstr.take(i),
                       self.vtext.take(i), self.has_v[idx])

    def concat(self, other: "_Parsed") -> "_Parsed":
        if not len(self):
            return other
        return _Parsed(pa.concat_arrays([self.lines, other.lines]),
                       pa.concat_tables([self.t, other.t]).combine_chunks(),
                       pa.concat_arrays([self.pint, other.pint]), pa.concat_arrays([self.pstr, other.pstr]),
                       pa.concat_arrays([self.vtext, other.vtext]), np.concatenate([self.has_v, other.has_v]))


def _parse(body: bytes) -> _Parsed:
    """The per-line reading of a block: no pairing, so it runs ahead of it."""
    lines = _lines(body)
    blank = np.diff(np.frombuffer(lines.buffers()[1], np.int64)[:len(lines) + 1]) <= 1   # "\n" alone
    if blank.any():
        lines = lines.filter(pa.array(~blank))
    n = len(lines)
    t = _read_json(pa.py_buffer(body), _SCALARS, "ignore").combine_chunks() if n else _SCALARS.empty_table()
    if t.num_rows != n:
        raise Unsupported("line count")
    if not n:
        empty = pa.array([], pa.string())
        return _Parsed(lines, t, empty, empty, empty, np.zeros(0, bool))
    for name in ("index", "time", "type", "f"):
        if t[name].null_count:
            raise Unsupported(f"missing {name}")
    if body.count(b'"process"') != n:
        raise Unsupported("a line with no or a nested process key")
    procs = pc.extract_regex(lines, _PROC)
    # value texts, whitespace removed (they hold only numbers, brackets and digit keys)
    vtext = pc.struct_field(pc.extract_regex(lines, _VALUE), "v")
    if any(pc.any(pc.match_substring(vtext, c)).as_py() for c in (" ", "\t", "\r")):
        vtext = pc.replace_substring_regex(vtext, r"\s+", "")
    has_v = _np(pc.is_valid(vtext))
    # a line with "value" also nested elsewhere goes op by op: the matched lines
    # hold exactly one each when the file's count minus the others' says so
    others = int(pc.sum(pc.count_substring(lines.filter(pa.array(~has_v)), '"value"')).as_py() or 0)
    if body.count(b'"value"') - others != int(has_v.sum()):
        has_v &= _np(pc.count_substring(lines, '"value"')) == 1
    return _Parsed(lines, t, pc.struct_field(procs, "i"), pc.struct_field(procs, "s"), vtext, has_v)


def _codes(col: pa.Array) -> np.ndarray:
    """Equal strings, equal ints (null: -1): string comparison without Python objects."""
    return _np(pc.dictionary_encode(col).indices, -1)


def _pair(parsed: _Parsed, final: bool) -> tuple[pa.Table, _Parsed | None]:
    """The paired ops of parsed lines, and (unless ``final``) the lines of the
    invokes still outstanding at their end."""
    n = len(parsed)
    if not n:
        return PARQUET_SCHEMA.empty_table(), None
    lines, t, pint, pstr, vtext = parsed.lines, parsed.t, parsed.pint, parsed.pstr, parsed.vtext
    has_v = parsed.has_v
    ty = t["type"].combine_chunks()
    is_inv = _np(pc.equal(ty, INVOKE))
    is_comp = _np(pc.is_in(ty, pa.array(list(COMPLETIONS))))
    if not (is_inv | is_comp).all():
        raise Unsupported("unknown type")
    fcol = t["f"].combine_chunks()
    fcode = _np(pc.index_in(fcol, pa.array([SEND, POLL])), -1)
    index, time = _np(t["index"]), _np(t["time"])

    client = _np(pc.is_valid(pint)) & _np(pc.not_equal(pint, ""), False)
    named = _np(pc.is_valid(pstr)) & _np(pc.not_equal(pstr, ""), False) & ~client
    if not (client | named).all():
        raise Unsupported("process neither int nor plain string")
    try:
        proc = _np(pc.cast(pc.if_else(pa.array(client), pint, pa.scalar(None, pint.type)), pa.int64()), 0) \
            if client.any() else np.zeros(n, np.int64)
    except (pa.ArrowInvalid, OverflowError):
        raise Unsupported("process out of range") from None
    key = np.where(client, proc * 2, 0)
    if named.any():
        _, codes = np.unique(_np(pstr.filter(pa.array(named))).astype(str), return_inverse=True)
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

    v_null = _np(pc.equal(vtext, "null"), False)
    v_list = _np(pc.starts_with(vtext, "["), False)

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
    typ_ok = (p_comp >= 0) & _np(pc.equal(pc.take(ty, pa.array(pc_)), OK))
    poll_read = is_poll & typ_ok
    is_poll &= ~(poll_read & v_list[poll_src])
    poll_read &= is_poll
    src = np.where(is_send, src, poll_src)
    fast = is_send | is_poll

    tables, emits = [], []
    groups = [(np.flatnonzero(is_send), _send_columns), (np.flatnonzero(poll_read), _poll_columns),
              (np.flatnonzero(is_poll & ~poll_read), None)]
    err = t["error"].combine_chunks()
    node = t["node"].combine_chunks()
    producer = t["producer"].combine_chunks()
    isolation = t["isolation"].combine_chunks()
    group = t["group"].combine_chunks()
    drain = _np(t["drain"], False)
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
            use_comp = _np(pc.and_(pc.is_valid(cv), pc.not_equal(pc.fill_null(cv, ""), "")), False)
            cols[name] = pc.if_else(pa.array(use_comp), cv, iv)
        if build is None:
            cols["messages"] = _list(np.zeros(len(rows) + 1, np.int64), pa.array([], MESSAGE_TYPE))
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
