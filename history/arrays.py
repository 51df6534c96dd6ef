"""Arrow columns as numpy arrays, for the vectorised passes over a history's
columns (the message index here, the Spark engine's per-partition checks)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one array: its chunk, with no copy, when it has one (as a
    read of row groups gives); combine_chunks copies even a lone chunk (147 MB
    per int64 column of an 18M-message partition, held beside the table's own)."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _np(col: pa.ChunkedArray | pa.Array, fill: int = 0) -> np.ndarray:
    col = _array(col)
    return (pc.fill_null(col, fill) if col.null_count else col).to_numpy(zero_copy_only=False)


def _bools(col: pa.ChunkedArray | pa.Array, fill: bool = False) -> np.ndarray:
    return np.asarray(_np(col, fill), bool)


def is_value(col: pa.ChunkedArray | pa.Array, *values: str) -> np.ndarray:
    """``col`` in ``values`` as bools (null: False). A dictionary column
    (spark_scan reads the few-valued strings so) is compared by its indices:
    pc.equal decodes it first, twenty times slower."""
    a = _array(col)
    if not pa.types.is_dictionary(a.type):
        return _bools(pc.is_in(a, pa.array(values, pa.string())))
    hits = [i for i, x in enumerate(a.dictionary.to_pylist()) if x in values]
    if len(hits) == 1:
        return _np(a.indices, -1) == hits[0]
    return np.isin(_np(a.indices, -1), hits) if hits else np.zeros(len(a), bool)
