"""The row groups of a history.parquet (or a folder of them), each named by
file and index with its invoke_index bounds, and the reading of one: the unit
both the message index's builder and the Spark engine's read tasks work in."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .paired import PARQUET_SCHEMA

def index_path(history: Path) -> Path:
    """history.parquet -> history.messages.parquet"""
    history = Path(history)
    return history.with_name(history.name.removesuffix(".parquet") + ".messages.parquet")


def is_index(path: Path) -> bool:
    return Path(path).name.endswith(".messages.parquet")


# read as dictionaries: a few distinct values each; decoding them was most of a row group's read
DICTIONARY_COLUMNS = ("role", "type", "f", "producer", "isolation", "error", "node", "group", "fault")
_TYPES = {f.name: f.type for f in PARQUET_SCHEMA} | {"run": pa.int32()}


@dataclass(frozen=True)
class Group:
    file: str
    index: int
    rows: int
    bytes: int
    lo: int | None     # invoke_index bounds from the footer (None: no statistics)
    hi: int | None


@dataclass(frozen=True)
class Source:
    groups: tuple[Group, ...]

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)


def history_files(path: str | Path) -> list[Path]:
    """A history.parquet, or the histories in a folder (not their indexes)."""
    p = Path(path)
    return sorted(f for f in p.rglob("*.parquet") if not is_index(f)) if p.is_dir() else [p]


def source(path: str | Path) -> Source:
    """The row groups of a history.parquet (a file, or a folder of them)."""
    groups = []
    for f in history_files(path):
        meta = pq.read_metadata(f)
        names = [meta.schema.column(i).path for i in range(meta.num_columns)]
        col = names.index("invoke_index") if "invoke_index" in names else None
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            stats = rg.column(col).statistics if col is not None else None
            has = stats is not None and stats.has_min_max
            groups.append(Group(str(f.resolve()), i, rg.num_rows, rg.total_byte_size,
                                int(stats.min) if has else None, int(stats.max) if has else None))
    return Source(tuple(groups))


def read_group(group: Group, columns: tuple[str, ...], files: dict[str, pq.ParquetFile]) -> pa.Table:
    """One row group's ``columns``; a column the file lacks (older histories;
    ``run`` in a single history) comes as nulls, ``run`` as 0."""
    f = files.get(group.file)
    if f is None:
        f = files[group.file] = pq.ParquetFile(group.file, read_dictionary=DICTIONARY_COLUMNS)
    present = set(f.schema_arrow.names)
    t = f.read_row_group(group.index, columns=[c for c in columns if c in present])
    for c in columns:
        if c not in present:
            col = pa.array(np.zeros(t.num_rows, np.int32)) if c == "run" else pa.nulls(t.num_rows, _TYPES[c])
            t = t.append_column(c, col)
    return t.select(list(columns))
