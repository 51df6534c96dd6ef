"""Spark jobs' rows come back whole or not at all (checkers/spark_scan.py, TaskRows)."""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

import pyarrow as pa
import pytest

from checkers.spark_frames import _control
from checkers.spark_scan import BLOB_DDL, IncompleteResult, tasks, unblob
from history.parquet import history_to_parquet
from history.row_groups import read_group, source
from chk_builder import History


def _made() -> Callable[[list[int]], Iterator[pa.RecordBatch]]:
    """A task's work, defined in a test's scope so that Spark's workers get it by value."""
    def made(items: list[int]) -> Iterator[pa.RecordBatch]:
        if items:
            yield pa.RecordBatch.from_arrays([pa.array(["x"] * len(items)), pa.array(items, pa.int32()),
                                              pa.array([b"a"] * len(items))], names=["what", "at", "blob"])
    return made


def test_every_task_s_rows_come_back_without_their_ends(spark: Any) -> None:
    rows = tasks(spark, [[1, 2], [3], []], _made(), BLOB_DDL).collect()
    assert sorted(r["at"] for r in rows) == [1, 2, 3] and {r["what"] for r in rows} == {"x"}


def test_a_result_that_lost_rows_on_its_way_back_raises(spark: Any) -> None:
    job = tasks(spark, [[1, 2], [3]], _made(), BLOB_DDL)
    job.df = job.df.limit(2)        # as a driver that died serving it: the stream ends early
    with pytest.raises(IncompleteResult, match="lost on its way back"):
        job.collect()


def test_the_control_rows_of_drain_polls_carry_no_values(tmp_path: Any) -> None:
    """A drain poll's value (every message it read) is dropped from its control
    row with its bytes: they once made the control pass's result too big to serve."""
    h = History()
    h.add(1000000, "invoke", "poll", None, drain=True)
    h.add(1000000, "ok", "poll", {"0": [[o, o] for o in range(50_000)]}, drain=True)
    jsonl = h.write(tmp_path / "history.jsonl")
    history_to_parquet(jsonl, tmp_path / "history.parquet")
    path = tmp_path / "history.parquet"
    src = source(path)
    files: dict = {}
    blobs = [b for at, g in enumerate(src.groups)
             for batch in _control(iter([(at, functools.partial(read_group, g, files=files))]))
             for w, b in zip(batch.column(0).to_pylist(), batch.column(2).to_pylist()) if w == "control"]
    control = pa.concat_tables([unblob(b) for b in blobs])
    assert control["value"].null_count == control.num_rows and sum(len(b) for b in blobs) < 20_000
