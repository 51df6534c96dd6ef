"""The message index (history.message_index): every message once, by (run,
partition), in history order, however the history was cut into tables; an
index is used only while its history is the one it was made from."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import checkers
from history import message_index as messages
from history.parquet import PairedOpsWriter, write_parquet
from history.message_index import IndexWriter, cut, index_is_current, index_path
from history.paired import PARQUET_SCHEMA, pair_ops
from checkers.spark_scan import index_slices, read_slices
from chk_builder import History
from test_chk_anomalies import clean, lost_write, read_then_truncated


def mixed() -> History:
    """Sends ok, failed and unknown to three partitions, polls and a drain."""
    h = History()
    for i in range(30):
        p = i % 3
        h.send(i % 4, [(p, 100 + i, i // 3)], type="ok" if i % 5 else ("fail" if i % 2 else "info"))
        if i % 7 == 0:
            h.poll(10 + p, {p: [(i // 3, 100 + i)], (p + 1) % 3: []})
    h.assign(20, [0, 1, 2])
    h.poll(20, {0: [(0, 100)], 1: [(0, 101)]}, drain=True)
    return h


def _paired(h: History, run: int | None = None) -> pa.Table:
    rows = [op.to_row() | ({"run": run} if run is not None else {}) for op in pair_ops(h.ops)]
    schema = PARQUET_SCHEMA.insert(0, pa.field("run", pa.int32())) if run is not None else PARQUET_SCHEMA
    return pa.Table.from_pylist(rows, schema=schema)


def _by_key(t: pa.Table) -> dict[tuple[int, int | None], list[dict]]:
    if "run" not in t.column_names:
        t = t.append_column("run", pa.array([0] * t.num_rows, pa.int32()))
    return {(r, p): piece.to_pylist() for r, p, piece in cut(t)}


def _index(path: Path) -> dict[tuple[int, int | None], list[dict]]:
    slices = index_slices([path])
    return {key: read_slices(where, {}).to_pylist() for key, where in slices.items()}


@pytest.mark.parametrize("table_rows,group_rows", [(1000, 1 << 18), (7, 4), (1, 1)])
def test_index_holds_each_partitions_messages_in_history_order(tmp_path: Path, table_rows: int,
                                                               group_rows: int) -> None:
    whole = _paired(mixed())
    expected = _by_key(whole)
    assert sorted(expected) == [(0, 0), (0, 1), (0, 2)] and sum(map(len, expected.values())) > 30
    w = IndexWriter(tmp_path / "x.messages.parquet", rows=group_rows)
    for a in range(0, whole.num_rows, table_rows):
        w.add(whole.slice(a, table_rows))
    pq.write_table(whole, tmp_path / "x.parquet")
    w.close(tmp_path / "x.parquet")
    assert _index(tmp_path / "x.messages.parquet") == expected
    if group_rows < 10:      # a partition's messages span row groups, read back in order
        assert pq.read_metadata(tmp_path / "x.messages.parquet").num_row_groups > 3


def test_written_with_the_history_and_current_only_once_closed(tmp_path: Path) -> None:
    path = tmp_path / "history.parquet"
    w = PairedOpsWriter(path)
    w.write(_paired(mixed()))
    assert not index_is_current(path, index_path(path))       # no footers yet: a run killed here
    w.close()
    assert index_is_current(path, index_path(path))
    assert _index(index_path(path)) == _by_key(_paired(mixed()))


def test_runs_are_keys_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "runs.parquet"
    write_parquet([(4, pair_ops(mixed().ops)), (9, pair_ops(lost_write().ops))], path)
    index = _index(index_path(path))
    assert sorted(index) == [(4, 0), (4, 1), (4, 2), (9, 0)]
    assert index[(4, 1)] == _by_key(_paired(mixed(), 4))[(4, 1)]


def test_an_index_of_another_history_is_not_current(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "history.parquet", tmp_path / "b" / "history.parquet"
    write_parquet([(None, pair_ops(clean().ops))], a)
    write_parquet([(None, pair_ops(lost_write().ops))], b)
    assert index_is_current(a, index_path(a)) and index_is_current(b, index_path(b))
    assert not index_is_current(a, index_path(b))
    assert not index_is_current(tmp_path / "none.parquet", index_path(a))


def _check(path: Path, spark: Any) -> Any:
    return checkers.check(path, {"engine": "spark"}, spark=spark)


@pytest.mark.spark
def test_a_stale_index_is_never_read(tmp_path: Path, spark: Any) -> None:
    """A clean history's index left beside a history that lost a write (the
    history rewritten, the index not): the engine builds a new index and finds
    the loss. Read from the stale one it would have said valid."""
    stale = tmp_path / "clean" / "history.parquet"
    write_parquet([(None, pair_ops(clean().ops))], stale)
    path = tmp_path / "lost" / "history.parquet"
    write_parquet([(None, pair_ops(lost_write().ops))], path)
    shutil.copy(index_path(stale), index_path(path))
    assert not index_is_current(path, index_path(path))
    r = _check(path, spark)
    assert r.valid is False and r.anomalies["lost-write"]["count"] == 1
    assert "index" in r.checker["stages"]
    assert index_is_current(path, index_path(path))          # rebuilt beside it, for the next analysis
    again = _check(path, spark)
    assert "index" not in again.checker["stages"] and again.anomalies == r.anomalies


@pytest.mark.spark
def test_a_history_without_an_index_gets_one(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "history.parquet"
    write_parquet([(None, pair_ops(read_then_truncated().ops))], path)
    expected = _check(path, spark)
    index_path(path).unlink()
    r = _check(path, spark)
    assert r.anomalies == expected.anomalies and r.valid is False
    assert index_is_current(path, index_path(path))


@pytest.mark.spark
def test_an_unwritable_folder_gets_its_index_elsewhere(tmp_path: Path, spark: Any, monkeypatch: Any) -> None:
    """(As root a read-only folder still takes writes, so the refusal is made here.)"""
    import checkers.spark as engine
    path = tmp_path / "history.parquet"
    write_parquet([(None, pair_ops(lost_write().ops))], path)
    index_path(path).unlink()
    built: list[Path] = []

    def build(history: Path, index: Path) -> None:
        if index.parent == path.parent:
            raise PermissionError(13, "Permission denied", str(index))
        built.append(index)
        messages.build_index(history, index)
    monkeypatch.setattr(engine, "build_index", build)
    r = _check(path, spark)
    assert r.valid is False and r.anomalies["lost-write"]["count"] == 1
    assert len(built) == 1 and built[0].parent != path.parent
    assert not index_path(path).exists() and not built[0].exists()    # the scratch folder is gone too


def test_a_read_task_per_slot() -> None:
    """spark_scan.slots: local[N]'s N; a cluster's default parallelism."""
    from types import SimpleNamespace as NS

    from checkers.spark_scan import slots
    for master, n in (("local[3]", 3), ("local[2, 4]", 2), ("local", 1), ("spark://h:7077", 6)):
        assert slots(NS(sparkContext=NS(master=master, defaultParallelism=6))) == n


@pytest.mark.spark
def test_an_index_that_fails_is_dropped_and_the_history_kept(tmp_path: Path, spark: Any, monkeypatch: Any,
                                                             caplog: Any) -> None:
    """The history is the record: an index that cannot be written costs
    nothing but itself. Spark, which needs one, then says unknown, and why;
    never valid."""
    def broken(t: pa.Table) -> Any:
        raise ValueError("cannot cut")
        yield
    monkeypatch.setattr(messages, "cut", broken)
    path = tmp_path / "history.parquet"
    write_parquet([(None, pair_ops(clean().ops))], path)
    assert "message index not kept (ValueError: cannot cut)" in caplog.text
    assert pq.read_metadata(path).num_rows == len(list(pair_ops(clean().ops))) and not index_path(path).exists()
    assert checkers.check(path, {"engine": "reference"}).valid is True
    r = _check(path, spark)
    assert r.valid == "unknown" and r.errors == ["spark: ValueError: cannot cut"]
