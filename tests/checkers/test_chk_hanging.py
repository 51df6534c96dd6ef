"""hanging-transaction (checkers/hanging.py): transactional data with no marker of its
producer after it, read after its coordinator should have aborted it. A hand-written
history with a planted Kafka record, checked by both engines; the record's parts and
the drain's view on their own."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import checkers
from checkers.hanging import DrainView, abort_deadline_ms, drain_view, open_spans
from checkers.common import Settings
from checkers.kafka_record import Replica, RunRecords, load_records
from chk_builder import MS, History
from history.paired import pair_ops
from test_chk_txn import txn

S = 1_000_000_000
STUCK = ("drain of partition 0 incomplete: read to offset 2 of 4 before the timeout: "
         "the last stable offset is 2, a transaction still open")
# producer 1000's transaction [value 1] committed (marker at 1); producer 2000's [value 2, value 3]
# appended at 2 and 3, no marker of 2000 after them
MARKERS = [(1, 1000, 0, "COMMIT")]
BATCHES = [(0, 0, 1000, 0), (2, 3, 2000, 5)]
CONFIG = {"client_settings": {"producer": {"transaction.timeout.ms": 10_000}}}   # deadline 10 + 10 + 5 s


def replica(node: str, markers: list = MARKERS, batches: list | None = BATCHES, end: int = 4) -> Replica:
    values = {1: 0, 2: 2, 3: 3}
    return Replica(node, 0, 0, end, [(0, 0)], values, producers={1: 1000, 2: 2000, 3: 2000},
                   markers=markers, txn_batches=batches)


def history(stuck: bool = True) -> History:
    h = History()
    txn(h, 1, [("send", 0, 1, 0)])
    txn(h, 2, [("send", 0, 2, None), ("send", 0, 3, None)], type="info")   # its end never answered
    h.assign(9, [0])
    h.poll(9, {0: [(0, 1)]}, drain=True)
    if stuck:
        h.add(9, "invoke", "poll", None, drain=True)
        h.add(9, "info", "poll", None, drain=True, error=STUCK)
    return h


def drain_start(h: History) -> int:
    return next(op["time"] for op in h.ops if op.get("drain"))


def records(h: History, after_s: float, *replicas: Replica) -> RunRecords:
    return RunRecords(replicas={0: list(replicas or (replica("n1"), replica("n2")))},
                      read_time=drain_start(h) + int(after_s * S))


def check(h: History, rr: RunRecords, tmp_path: Path, engine: str = "reference", spark: Any = None) -> Any:
    return checkers.check(h.write(tmp_path / "history.jsonl"), {"engine": engine, **CONFIG}, spark=spark,
                          records=rr)


def v_planted(r: Any) -> None:
    a = r.anomalies["hanging-transaction"]
    assert r.valid is False and a["count"] == 1 and not a["allowed"]
    (w,) = a["witnesses"]
    assert (w["partition"], w["offsets"], w["values"]) == (0, [2, 3], [2, 3])
    assert (w["producer_id"], w["producer_epoch"], w["first_offset"], w["replicas"]) == (2000, 5, 2, ["n1", "n2"])
    assert w["drain"] == "stopped at last stable offset 2" and w["read_after_s"] == 100.0
    assert [(op["type"], op["f"]) for op in w["ops"]] == [("info", "txn")]        # the txn that wrote it
    assert w["ops"][0]["value"][0] == ["send", 0, 2, None]


def test_planted_hanging_transaction_reference(tmp_path: Path) -> None:
    h = history()
    v_planted(check(h, records(h, 100), tmp_path))


@pytest.mark.spark
def test_planted_hanging_transaction_spark_and_engines_agree(spark: Any, tmp_path: Path) -> None:
    h = history()
    rr = records(h, 100)
    got = check(h, rr, tmp_path, "spark", spark)
    v_planted(got)
    ref = check(h, rr, tmp_path / "..").to_json()
    out = got.to_json()
    ref.pop("checker"), out.pop("checker")
    assert ref == out


def test_read_too_soon_is_unknown_not_valid(tmp_path: Path) -> None:
    h = history()
    r = check(h, records(h, 20), tmp_path)
    assert r.anomalies["hanging-transaction"]["count"] == 0 and r.valid == "unknown"
    assert any("hangs: partition 0: producer 2000's data from offset 2 has no marker, but the replicas were "
               "read 20.0 s after the workload ended, within 25 s" in u for u in r.unknown), r.unknown


def test_a_marker_of_its_producer_on_any_replica_ends_it(tmp_path: Path) -> None:
    h = history(stuck=False)
    ended = replica("n2", markers=MARKERS + [(4, 2000, 6, "ABORT")], end=5)
    r = check(h, records(h, 100, replica("n1"), ended), tmp_path)
    assert r.anomalies["hanging-transaction"]["count"] == 0
    assert not any("hangs" in u for u in r.unknown)


def test_unread_listing_falls_back_on_the_drain(tmp_path: Path) -> None:
    h = history()
    old = replica("n1", batches=None)                      # stored before transaction batches were
    r = check(h, records(h, 100, old), tmp_path)
    assert r.anomalies["hanging-transaction"]["count"] == 0 and r.valid == "unknown"
    assert any("no replica listing can say whether a transaction hangs (n1: stored without transaction "
               "batches); the final drain stopped at last stable offset 2" in u for u in r.unknown), r.unknown
    h = history(stuck=False)                               # the drain read it to its end: nothing was open
    r = check(h, records(h, 100, old), tmp_path)
    assert not any("hangs" in u for u in r.unknown)


def test_open_spans_group_a_producers_open_batches_and_skip_closed_ones() -> None:
    spans, blind = open_spans(RunRecords(replicas={0: [replica("n1")], 1: [replica("n3", batches=None)]}))
    (s,) = spans
    assert (s.partition, s.producer_id, s.producer_epoch, s.first_offset, s.offsets, s.values, s.log_end) == \
           (0, 2000, 5, 2, (2, 3), (2, 3), 4)
    assert blind == {1: "n3: stored without transaction batches"}


def test_drain_view_reads_start_end_complete_and_stuck() -> None:
    h = history()
    from history.paired import pair_ops
    view = drain_view(op.to_row() for op in pair_ops(h.ops))
    assert view.stuck == {0: 2} and view.complete == set()
    assert view.start == drain_start(h) and view.end == h.ops[-1]["time"]
    assert drain_view([]) == DrainView()


def test_abort_deadline_from_settings() -> None:
    assert abort_deadline_ms(Settings.from_config(CONFIG))[0] == 25_000
    ms, said = abort_deadline_ms(Settings.from_config({
        "client_settings": {"producer": {"message.timeout.ms": 90_000}},
        "broker_settings": {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000}}))
    assert ms == 97_000 and "not stored, taken as 90000" in said


def test_the_drain_text_the_check_reads_is_the_drains() -> None:
    """workloads/drain.py writes the text hanging.py reads: the same words."""
    src = (Path(__file__).parents[2] / "workloads" / "drain.py").read_text()
    assert "the last stable offset is {stable}, a transaction still open" in src
    assert 'f"drain of partition {p} incomplete: ' in src


def test_stored_header_gives_the_read_time(tmp_path: Path) -> None:
    rows = [{"kchaos-replicas": 1, "topic": "t", "max_records": 10, "read_wall_ms": 5_000},
            {"node": "n1", "broker": 1, "partition": 0, "log_start_offset": 0, "log_end_offset": 4,
             "epochs": [[0, 0]], "records": [[0, 1, 0, 1000], [2, 2, 0, 2000]], "markers": [[1, 1000, 0, "COMMIT"]],
             "txn_batches": [[0, 0, 1000, 0], [2, 2, 2000, 0]], "note": None, "error": None}]
    (tmp_path / "replicas.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rr = load_records(tmp_path, 1_000 * MS)
    assert rr.read_time == 4_000 * MS and rr.replicas[0][0].txn_batches == [(0, 0, 1000, 0), (2, 2, 2000, 0)]
    assert [s.first_offset for s in open_spans(rr)[0]] == [2]
