"""History ops (dicts, as ``history.ops`` reads them) as paired-op tables, leniently.

The op-by-op path of the report's history (``reports.history_source``) and
the digest of ops in memory (``reports.digest.digest``, the tests' way in):
the history contract's pairing (``history.paired.Pairer``) into tables of
``PARQUET_SCHEMA``, so both go through the same columnar aggregation as a
history.parquet. An op the contract cannot read is left out and counted,
where the checkers would refuse the whole history: a report shows what it can.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa

from history.ops import HistoryFormatError
from history.paired import PARQUET_SCHEMA, Pairer, PairedOp

BATCH_ROWS = 50_000         # paired ops per table


def _table(ops: list[PairedOp]) -> pa.Table:
    return pa.Table.from_pylist([op.to_row() for op in ops], schema=PARQUET_SCHEMA)


def paired_tables(ops: Iterable[dict[str, Any]], notes: list[str]) -> Iterator[pa.Table]:
    """History ops paired (``history.paired.Pairer``) into tables of BATCH_ROWS;
    an op the contract cannot read is left out and counted in a note."""
    pairer, batch, skipped = Pairer(), [], 0
    for op in ops:
        try:
            batch += pairer.add(op)
        except (HistoryFormatError, TypeError, ValueError):
            skipped += 1
        if len(batch) >= BATCH_ROWS:
            yield _table(batch)
            batch = []
    leftover = sorted(pairer.pending.values(), key=lambda o: o.get("index") if isinstance(o.get("index"), int) else 0)
    pairer.pending.clear()
    for inv in leftover:          # one at a time: one unreadable invoke leaves the others in
        alone = Pairer()
        alone.add(inv)
        try:
            batch += alone.finish()
        except (HistoryFormatError, TypeError, ValueError):
            skipped += 1
    if batch:
        yield _table(batch)
    if skipped:
        notes.append(f"{skipped:,} history lines could not be read as the history format defines them "
                     "(docs/design.md, \"The history\"); the plots and tables leave them out.")
