"""The history file: appended per op, readable after a crash, convertible to Parquet."""
import json
import threading

import pyarrow.parquet as pq
import pytest

from history.ops import HistoryFormatError, read_history
from history.writer import HistoryWriter


def test_writer_assigns_increasing_index_and_time_across_threads(tmp_path):
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        threads = [threading.Thread(target=lambda p=p: [w.append({"process": p, "type": "invoke", "f": "poll",
                                                                   "value": None}) for _ in range(200)])
                   for p in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ops = list(read_history(path))
    assert [o["index"] for o in ops] == list(range(800))
    assert all(a["time"] <= b["time"] for a, b in zip(ops, ops[1:]))


def test_truncated_last_line_is_skipped(tmp_path, caplog):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"index": 0, "type": "invoke", "f": "poll", "process": 0}) + "\n" + '{"index": 1, "ty')
    assert len(list(read_history(path))) == 1
    assert "truncated" in caplog.text


def test_corrupt_middle_line_names_the_line(tmp_path):
    path = tmp_path / "h.jsonl"
    good = json.dumps({"index": 0, "type": "invoke", "f": "poll", "process": 0})
    path.write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(HistoryFormatError, match=":2:"):
        list(read_history(path))


def test_round_trip_jsonl_to_parquet(tmp_path):
    from history.parquet import history_to_parquet
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        w.append({"process": 0, "type": "invoke", "f": "send", "value": [[0, 5, None], [0, 9, None]]})
        w.append({"process": 0, "type": "ok", "f": "send", "value": [[0, 5, 10], [0, 9, 11]], "node": "n1"})
        w.append({"process": 1, "type": "invoke", "f": "poll", "value": None})
        w.append({"process": 1, "type": "ok", "f": "poll", "value": {"0": [[10, 5], [11, 9]]}})
        w.append({"process": "nemesis", "type": "invoke", "f": "kill", "value": {"fault": "kill"}})
    out = tmp_path / "h.parquet"
    history_to_parquet(path, out)
    table = pq.read_table(out) if out.is_file() else pq.ParquetDataset(out).read()
    rows = {r["f"]: r for r in table.to_pylist()}  # one row per invoke/completion pair
    assert len(rows) == 3
    send, poll, kill = rows["send"], rows["poll"], rows["kill"]
    assert (send["invoke_index"], send["index"], send["type"], send["node"]) == (0, 1, "ok", "n1")
    assert [(m["partition"], m["offset"], m["value"]) for m in send["messages"]] == [(0, 10, 5), (0, 11, 9)]
    assert [(m["partition"], m["offset"], m["value"]) for m in poll["messages"]] == [(0, 10, 5), (0, 11, 9)]
    assert kill["invoke_index"] == 4 and kill["index"] is None  # still open when the history ended


def _ops(w: HistoryWriter) -> None:
    w.append({"process": "sampler", "type": "ok", "f": "sample",
              "value": {"controller": 1, "partitions": {"0": {"leader": 1, "isr": [1, 2], "epoch": 3}}}})
    for i in range(25):
        w.append({"process": i % 3, "type": "invoke", "f": "send", "value": [[0, i, None]]})
        w.append({"process": i % 3, "type": "ok", "f": "send", "value": [[0, i, i]], "node": "n1"})
        w.append({"process": 7, "type": "invoke", "f": "poll", "value": None})
        w.append({"process": 7, "type": "ok", "f": "poll", "value": {"0": [[i, i]]}})
    w.append({"process": "nemesis", "type": "invoke", "f": "kill", "value": {"fault": "kill"}})
    w.append({"process": 4, "type": "invoke", "f": "send", "value": [[0, 99, None]]})


def test_writer_keeps_a_current_parquet_equal_to_the_conversion(tmp_path):
    from history.parquet import history_to_parquet, parquet_is_current
    from history.writer import ColumnarCopy
    path = tmp_path / "history.jsonl"
    w = HistoryWriter(path)
    w._columnar.row_group = 7                       # several row groups, one partial
    _ops(w)
    w.close()
    live = tmp_path / "history.parquet"
    assert parquet_is_current(path, live)
    assert pq.ParquetFile(live).num_row_groups > 1
    history_to_parquet(path, tmp_path / "converted.parquet")
    assert pq.read_table(live).to_pylist() == pq.read_table(tmp_path / "converted.parquet").to_pylist()
    assert isinstance(w._columnar, ColumnarCopy)


def test_interrupted_writer_leaves_a_parquet_analysis_does_not_trust(tmp_path):
    import checkers
    from history.parquet import parquet_is_current
    run = tmp_path / "run"
    w = HistoryWriter(run / "history.jsonl")
    w._columnar.row_group = 5
    _ops(w)
    w._file.close()            # the process dies: the JSONL is flushed, the Parquet has no footer
    import time
    live = run / "history.parquet"
    deadline = time.monotonic() + 60        # the copy's thread writes its first row groups
    while not (live.exists() and live.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (run / "history.parquet").stat().st_size > 0
    assert not parquet_is_current(run / "history.jsonl", run / "history.parquet")
    r = checkers.analyze_run(run, {"engine": "reference"})
    assert parquet_is_current(run / "history.jsonl", run / "history.parquet")
    assert r.stats["acknowledged"] == 25 and r.stats["read"] == 25


def test_appending_to_an_existing_history_keeps_no_parquet(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        w.append({"process": 0, "type": "invoke", "f": "poll", "value": None})
    (tmp_path / "history.parquet").unlink()
    with HistoryWriter(path) as w:
        w.append({"process": 0, "type": "ok", "f": "poll", "value": None})
    assert not (tmp_path / "history.parquet").exists()
