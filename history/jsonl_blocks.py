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


def parse_lines(body: bytes) -> ParsedLines:
    """The per-line reading of a block: no pairing, so it runs ahead of it."""
    lines = _split_lines(body)
    blank = np.diff(np.frombuffer(lines.buffers()[1], np.int64)[:len(lines) + 1]) <= 1   # "\n" alone
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
    vtext = pc.struct_field(pc.extract_regex(lines, _VALUE_RE), "v")
    if any(pc.any(pc.match_substring(vtext, c)).as_py() for c in (" ", "\t", "\r")):
        vtext = pc.replace_substring_regex(vtext, r"\s+", "")
    has_v = to_numpy(pc.is_valid(vtext))
    # a line with "value" also nested elsewhere goes op by op: the matched lines
    # hold exactly one each when the file's count minus the others' says so
    others = int(pc.sum(pc.count_substring(lines.filter(pa.array(~has_v)), '"value"')).as_py() or 0)
    if body.count(b'"value"') - others != int(has_v.sum()):
        has_v &= to_numpy(pc.count_substring(lines, '"value"')) == 1
    return ParsedLines(lines, t, pc.struct_field(procs, "i"), pc.struct_field(procs, "s"), vtext, has_v)
