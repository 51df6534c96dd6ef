"""history.jsonl in blocks of whole lines, and the reading of each line's
fields: the first half of the columnar conversion (``history.convert``).

Kept apart from the pairing because it is per line and needs nothing from
other lines: ``history.convert`` runs it on the next block in a thread of its
own (pyarrow's JSON reader and RE2 work outside the GIL) while it pairs the
current one. Anything it does not recognise (a corrupt line, a header it does
not expect, a field of an unexpected type) raises ``Unsupported``: the caller
then uses the per-op path, which reads every history and names every fault.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from history.ops import FORMAT_VERSION, HEADER_KEY

log = logging.getLogger("history.convert")


class Unsupported(Exception):
    """The columnar path does not handle this history: use the per-op path."""


# the scalar fields of an op, read by pyarrow's JSON reader (every other key ignored)
SCALAR_FIELDS = pa.schema([("index", pa.int64()), ("time", pa.int64()), ("type", pa.string()),
                           ("f", pa.string()), ("drain", pa.bool_()), ("error", pa.string()),
                           ("node", pa.string()), ("producer", pa.string()), ("isolation", pa.string()),
                           ("group", pa.string())])
# the process: an int (group i) or a plain string (group s)
_PROCESS_RE = r'"process":\s*(?:(?P<i>-?\d+)\s*[,}]|"(?P<s>[^"\\]*)")'
# a send or poll value: null, a flat object (poll), or a list (send) up to the
# next key or the line's end; the JSON reader then checks its shape
_VALUE_RE = r'"value":\s*(?P<v>null|\{[^{}]*\}|\[[^"{}]*\])'
# bytes the JSON reader parses at a time (its own blocks, within ours)
_JSON_READER_BLOCK = 1 << 24
# bytes of history.jsonl converted at a time: bounded memory for large histories,
# and blocks enough for the next one's parse to overlap this one's pairing
BLOCK_BYTES = 1 << 25


def read_json(buf: pa.Buffer | bytes, schema: pa.Schema, unexpected: str) -> pa.Table:
    """pyarrow's JSON reader with an explicit ``schema``; ``unexpected`` is
    its ``unexpected_field_behavior`` ("ignore" or "error"). What it refuses
    raises Unsupported."""
    try:
        return pj.read_json(pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=_JSON_READER_BLOCK),
                            parse_options=pj.ParseOptions(explicit_schema=schema,
                                                          unexpected_field_behavior=unexpected))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise Unsupported(f"json reader: {str(e)[:200]}") from None


def text_offsets(texts: pa.Array) -> np.ndarray:
    """Where each text of a large_string (or large_binary) array starts in its
    data buffer, and where the last ends: len(texts) + 1 int64s, no copy."""
    return np.frombuffer(texts.buffers()[1], np.int64)[texts.offset:texts.offset + len(texts) + 1]


def to_numpy(col: pa.ChunkedArray | pa.Array, fill: Any = None) -> np.ndarray:
    """A column as a numpy array, nulls replaced by ``fill`` when given (else
    kept as the numpy conversion has them)."""
    if isinstance(col, pa.ChunkedArray):      # (ChunkedArray.to_numpy imports pandas)
        col = col.combine_chunks()
    if fill is not None:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(zero_copy_only=False))


def _split_lines(body: bytes) -> pa.LargeStringArray:
    """One string per line (each keeps its newline), without copying."""
    nl = np.flatnonzero(np.frombuffer(body, np.uint8) == 10)
    ends = nl + 1
    if not body.endswith(b"\n"):
        ends = np.append(ends, len(body))
    offsets = np.concatenate([[0], ends]).astype(np.int64)
    arr = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(body))
    if not body.isascii():       # ASCII is UTF-8 (the writer writes ASCII): the full check only otherwise
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            raise Unsupported("not UTF-8") from None
    return arr


def line_blocks(path: Path, block_bytes: int) -> Iterator[tuple[bytes, bool]]:
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


@dataclass
class ParsedLines:
    """A block's lines, their scalar fields, process and value texts: what
    pairing needs, all one entry per line (so carried lines join the next block)."""
    lines: pa.LargeStringArray
    t: pa.Table                 # SCALAR_FIELDS
    pint: pa.Array              # the process, when an int (as text)
    pstr: pa.Array              # the process, when a string
    vtext: pa.Array             # the value's text, whitespace removed; null when not extracted
    has_v: np.ndarray           # a value text was extracted (exactly one "value" key)

    def __len__(self) -> int:
        return len(self.lines)

    def take(self, idx: np.ndarray) -> "ParsedLines":
        i = pa.array(idx, pa.int64())
        return ParsedLines(self.lines.take(i), self.t.take(i), self.pint.take(i), self.pstr.take(i),
                           self.vtext.take(i), self.has_v[idx])

    def concat(self, other: "ParsedLines") -> "ParsedLines":
        if not len(self):
            return other
        return ParsedLines(pa.concat_arrays([self.lines, other.lines]),
                           pa.concat_tables([self.t, other.t]).combine_chunks(),
                           pa.concat_arrays([self.pint, other.pint]), pa.concat_arrays([self.pstr, other.pstr]),
                           pa.concat_arrays([self.vtext, other.vtext]),
                           np.concatenate([self.has_v, other.has_v]))


_VALUE_KEY = '"value":'
_OPEN, _CLOSE, _QUOTE, _LIST_OPEN, _LIST_CLOSE = ord("{"), ord("}"), ord('"'), ord("["), ord("]")


def value_texts(lines: pa.LargeStringArray) -> pa.LargeStringArray:
    """Per line, what ``_VALUE_RE`` extracts (null where it extracts nothing),
    found from byte positions rather than by the regex: on the final drain's
    lines, thousands of messages long, RE2 ran at about 80 MB/s and was a
    fifth of the columnar copy's time. The value starts right after the first
    ``"value":``; an object ends at the first ``}`` (with no ``{`` before it),
    a list at the last ``]`` before the next ``"``, ``{`` or ``}``, as the
    regex's greedy class has it. Lines of any other shape (whitespace after
    the colon, a value the regex would refuse) are given to the regex itself."""
    n = len(lines)
    if not n:
        return pc.struct_field(pc.extract_regex(lines, _VALUE_RE), "v")
    offs = text_offsets(lines)
    data = np.frombuffer(lines.buffers()[2], np.uint8)
    pos = to_numpy(pc.find_substring(lines.view(pa.large_binary()), _VALUE_KEY))
    line_end = offs[1:]
    start = offs[:-1] + pos + len(_VALUE_KEY)
    at = np.flatnonzero((pos >= 0) & (start < line_end))
    first = data[start[at]]
    end = np.full(n, -1, np.int64)
    lo, hi = int(offs[0]), int(offs[-1])
    window = data[lo:hi]
    for opener, find_end in ((_OPEN, _object_ends), (_LIST_OPEN, _list_ends)):
        rows = at[first == opener]
        if len(rows):
            e = find_end(window, start[rows] - lo, line_end[rows] - lo)
            end[rows] = np.where(e >= 0, e + lo, -1)
    nul = at[first == ord("n")]
    nul = nul[start[nul] + 4 <= line_end[nul]]
    if len(nul):
        four = data[start[nul][:, None] + np.arange(4)]
        nul = nul[np.all(four == np.frombuffer(b"null", np.uint8), axis=1)]
        end[nul] = start[nul] + 4
    # lines the positions do not settle: a "value" key the regex may still match, or not
    odd = np.flatnonzero((end < 0) & (pos >= 0))
    found = end >= 0
    starts = np.where(found, start, offs[:-1])
    ends = np.where(found, end, offs[:-1])
    # one array of 2n elements over the lines' bytes, a gap then a value per line; the values taken
    bounds = np.empty(2 * n + 1, np.int64)
    bounds[0] = lo
    bounds[1::2], bounds[2::2] = starts, ends
    valid = np.ones(2 * n, bool)
    valid[1::2] = found
    spans = pa.LargeStringArray.from_buffers(2 * n, pa.py_buffer(bounds), lines.buffers()[2],
                                             pa.py_buffer(np.packbits(valid, bitorder="little")))
    texts = spans.take(pa.array(np.arange(1, 2 * n, 2)))
    if not len(odd):
        return texts
    slow = pc.struct_field(pc.extract_regex(lines.take(pa.array(odd)), _VALUE_RE), "v")
    pick = np.arange(n)
    pick[odd] = n + np.arange(len(odd))
    return pa.concat_arrays([texts, slow.cast(texts.type)]).take(pa.array(pick))


def _has_whitespace(texts: pa.LargeStringArray) -> bool:
    """Whether any text holds a space, tab or carriage return (one memchr-speed
    search of their bytes each; a ``match_substring`` pass each took 40 ms a block)."""
    buf = texts.buffers()[2]
    if buf is None:
        return False
    offs = text_offsets(texts)
    raw = buf.slice(int(offs[0]), int(offs[-1] - offs[0])).to_pybytes()     # one copy, of the texts' bytes only
    return any(c in raw for c in (b" ", b"\t", b"\r"))


def _object_ends(data: np.ndarray, start: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """One past the ``}`` closing each flat object opened at ``start``, or -1
    when a ``{`` comes first or the line ends."""
    closes = np.flatnonzero(data == _CLOSE)
    opens = np.flatnonzero(data == _OPEN)
    k = np.searchsorted(closes, start)
    end = np.where(k < len(closes), closes[np.minimum(k, len(closes) - 1)] + 1 if len(closes) else 0, -1)
    j = np.searchsorted(opens, start, side="right")
    nested = (j < len(opens)) & (opens[np.minimum(j, len(opens) - 1)] < end) if len(opens) else False
    return np.where((end > 0) & (end <= line_end) & ~nested, end, -1)


def _list_ends(data: np.ndarray, start: np.ndarray, line_end: np.ndarray) -> np.ndarray:
    """One past the last ``]`` before the first ``"``, ``{`` or ``}`` after each
    ``[`` at ``start`` (the regex's ``\\[[^"{}]*\\]``), or -1 when there is none."""
    stops = np.flatnonzero((data == _QUOTE) | (data == _OPEN) | (data == _CLOSE))
    closes = np.flatnonzero(data == _LIST_CLOSE)
    k = np.searchsorted(stops, start)
    stop = np.where(k < len(stops), stops[np.minimum(k, len(stops) - 1)] if len(stops) else 0, -1)
    j = np.searchsorted(closes, stop) - 1
    last = closes[np.maximum(j, 0)] if len(closes) else np.zeros(len(start), np.int64)
    ok = (stop >= 0) & (stop <= line_end) & (j >= 0) & (last > start)
    return np.where(ok, last + 1, -1)


def parse_lines(body: bytes) -> ParsedLines:
    """The per-line reading of a block: no pairing, so it runs ahead of it."""
    lines = _split_lines(body)
    blank = np.diff(text_offsets(lines)) <= 1   # "\n" alone
    if blank.any():
        lines = lines.filter(pa.array(~blank))
    n = len(lines)
    t = (read_json(pa.py_buffer(body), SCALAR_FIELDS, "ignore").combine_chunks() if n
         else SCALAR_FIELDS.empty_table())
    if t.num_rows != n:
        raise Unsupported("line count")
    if not n:
        empty = pa.array([], pa.string())
        return ParsedLines(lines, t, empty, empty, empty, np.zeros(0, bool))
    for name in ("index", "time", "type", "f"):
        if t[name].null_count:
            raise Unsupported(f"missing {name}")
    if body.count(b'"process"') != n:
        raise Unsupported("a line with no or a nested process key")
    procs = pc.extract_regex(lines, _PROCESS_RE)
    # value texts, whitespace removed (they hold only numbers, brackets and digit keys)
    vtext = value_texts(lines)
    if _has_whitespace(vtext):
        vtext = pc.replace_substring_regex(vtext, r"\s+", "")
    has_v = to_numpy(pc.is_valid(vtext))
    # a line with "value" also nested elsewhere goes op by op: the matched lines
    # hold exactly one each when the file's count minus the others' says so
    others = int(pc.sum(pc.count_substring(lines.filter(pa.array(~has_v)), '"value"')).as_py() or 0)
    if body.count(b'"value"') - others != int(has_v.sum()):
        has_v &= to_numpy(pc.count_substring(lines, '"value"')) == 1
    return ParsedLines(lines, t, pc.struct_field(procs, "i"), pc.struct_field(procs, "s"), vtext, has_v)
