"""The live columnar copy (history.writer.ColumnarCopy) block by block, and
batched appends: whatever the block boundaries, the Parquet equals the
conversion analysis would make from the JSONL."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from history.writer import ColumnarCopy, HistoryWriter


def _pipelined_ops(w: HistoryWriter, odd_at: int | None = None) -> None:
    """Invokes and completions interleaved across processes, as a pipelined
    producer writes them (invokes a batch at a time, completions a poll at a
    time); ``odd_at``: a nemesis op the columnar pairing does not support there."""
    v = 0
    for batch in range(12):
        w.append_many([{"process": 100 + k, "type": "invoke", "f": "send", "value": [[k % 3, v + k, None]],
                        "producer": "p0"} for k in range(5)])
        if batch == odd_at:   # a nested "process" key: the columnar path gives up, op by op takes over
            w.append({"process": "nemesis", "type": "invoke", "f": "kill", "value": {"note": {"process": 1}}})
            w.append({"process": "nemesis", "type": "info", "f": "kill", "value": {"note": {"process": 1}}})
        w.append_many([{"process": 100 + k, "type": "ok" if k % 4 else "info", "f": "send",
                        "value": [[k % 3, v + k, batch * 5 + k if k % 4 else None]], "producer": "p0"}
                       for k in range(3)])
        for k in range(3, 5):
            w.append({"process": 100 + k, "type": "ok", "f": "send", "value": [[k % 3, v + k, batch * 5 + k]],
                      "producer": "p0"})
        v += 5
    w.append({"process": 7, "type": "invoke", "f": "poll", "value": None})     # never completed


def _copy_in_blocks(tmp_path, block_bytes: int, odd_at: int | None) -> tuple[list, list]:
    from history.parquet import history_to_parquet, parquet_is_current
    from history.message_index import index_is_current, index_path
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, columnar=False) as w:
        _pipelined_ops(w, odd_at)
    start = len(path.read_bytes().split(b"\n", 1)[0]) + 1       # after the header
    live = tmp_path / "history.parquet"
    copy = ColumnarCopy(live, path, start, row_group=7, interval_s=3600, block_bytes=block_bytes)
    copy.close(path.stat().st_size)                  # pairs every block now, a carry between each
    assert parquet_is_current(path, live)
    converted = tmp_path / "converted.parquet"
    history_to_parquet(path, converted)
    # the message index beside each: current, and the same messages in the same order
    assert index_is_current(live, index_path(live)) and index_is_current(converted, index_path(converted))
    assert pq.read_table(index_path(live)).to_pylist() == pq.read_table(index_path(converted)).to_pylist()
    return pq.read_table(live).to_pylist(), pq.read_table(converted).to_pylist()


def test_copy_over_many_small_blocks_equals_the_conversion(tmp_path):
    live, converted = _copy_in_blocks(tmp_path, block_bytes=700, odd_at=None)
    assert live == converted
    assert len(live) == 12 * 5 + 1
    assert sum(r["type"] == "info" for r in live) == 12 + 1     # the info sends and the poll left open


def test_copy_falls_back_to_op_by_op_mid_history_and_still_equals_the_conversion(tmp_path, caplog):
    import logging
    with caplog.at_level(logging.INFO, logger="history"):
        live, converted = _copy_in_blocks(tmp_path, block_bytes=900, odd_at=6)
    assert "op-by-op pairing from here on" in caplog.text
    assert live == converted
    assert any(r["f"] == "kill" for r in live)


def test_append_many_assigns_consecutive_indexes_in_one_write(tmp_path):
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path, columnar=False) as w:
        w.append({"process": 0, "type": "invoke", "f": "poll", "value": None})
        out = w.append_many([{"process": p, "type": "invoke", "f": "send", "value": [[0, p, None]]}
                             for p in (1, 2, 3)])
        assert w.append_many([]) == []
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [o["index"] for o in lines] == [0, 1, 2, 3]
    assert [o["index"] for o in out] == [1, 2, 3] and [o["process"] for o in out] == [1, 2, 3]
    assert all(a["time"] <= b["time"] for a, b in zip(lines, lines[1:]))
    assert lines[1:] == out


_DYING_RECORDER = r"""
import os, sys, time
from history.writer import HistoryWriter
w = HistoryWriter(sys.argv[1])
w._columnar.row_group = 5
for i in range(40):
    w.append_many([{"process": i, "type": "invoke", "f": "send", "value": [[0, i, None]], "producer": "p0"}])
    w.append({"process": i, "type": "ok", "f": "send", "value": [[0, i, i]], "producer": "p0"})
print(w._columnar.pid, flush=True)
live = w.path.with_suffix(".parquet")
deadline = time.monotonic() + 60            # the copy writes its first row groups
while not (live.exists() and live.stat().st_size > 100) and time.monotonic() < deadline:
    time.sleep(0.05)
os.kill(os.getpid(), 9)                     # dies without closing the writer
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return any(line.split()[:2] == ["State:", "Z"] for line in fh)   # exited, not reaped yet
    except FileNotFoundError:
        return True


def test_copy_process_exits_when_the_recorder_dies_and_leaves_a_file_analysis_rejects(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    from history.parquet import parquet_is_current
    from history.message_index import index_is_current, index_path
    path = tmp_path / "history.jsonl"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _DYING_RECORDER, str(path)], cwd=root, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 30
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the copy's process outlived the recorder"
    assert len(path.read_text().splitlines()) == 1 + 80          # the JSONL has every line
    live = tmp_path / "history.parquet"
    assert live.stat().st_size > 100                            # row groups were written ...
    assert not parquet_is_current(path, live)                   # ... but no footer: analysis converts
    assert not index_is_current(live, index_path(live))


def test_rows_from_a_pipelined_producer_are_copied_as_the_conversion_pairs_them(tmp_path):
    """append_sends' lines (one time per batch) through the copy's process:
    the Parquet it leaves equals the conversion of the JSONL."""
    from history.parquet import history_to_parquet, parquet_is_current
    from history.message_index import index_is_current, index_path
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        w._columnar.row_group = 7
        for batch in range(10):
            w.append_sends([(100 + k, "invoke", k % 3, batch * 5 + k, None, "p0", None) for k in range(5)])
            w.append_sends([(100 + k, "ok" if k % 4 else "info", k % 3, batch * 5 + k, batch * 5 + k if k else None,
                             "p0", None if k % 4 else "E: x") for k in range(5)], "all")
        w.append_sends([(200, "invoke", 1, 999, None, "p1", None)])       # never completed
    live = tmp_path / "history.parquet"
    assert parquet_is_current(path, live)
    assert pq.ParquetFile(live).num_row_groups > 1
    history_to_parquet(path, tmp_path / "converted.parquet")
    rows = pq.read_table(live).to_pylist()
    assert rows == pq.read_table(tmp_path / "converted.parquet").to_pylist()
    assert index_is_current(live, index_path(live))
    assert (pq.read_table(index_path(live)).to_pylist()
            == pq.read_table(index_path(tmp_path / "converted.parquet")).to_pylist())
    assert len(rows) == 51 and sum(r["type"] == "ok" for r in rows) == 30


def _nice(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[16])


def test_the_copy_runs_at_the_recording_process_s_priority_and_says_how_far_behind_it_ended(tmp_path, caplog):
    """Not niced (niced, a 10-minute run at full speed ended 2.1 GB behind:
    history.live_copy); at the workload's end it logs what it still has to pair."""
    import logging
    import os
    w = HistoryWriter(tmp_path / "history.jsonl")
    for i in range(200):
        w.append({"process": i, "type": "invoke", "f": "send", "value": [[0, i, None]]})
    assert _nice(w._columnar.pid) == _nice(os.getpid())
    w.workload_over()
    with caplog.at_level(logging.INFO, logger="history"):
        w.close()
    assert any("of history.jsonl still to pair at the workload's end" in r.getMessage() for r in caplog.records)
