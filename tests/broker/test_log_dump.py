"""Kafka's own record: DumpLogSegments output parsed (real captures from Kafka 4.3.1,
tests/broker/fixtures/), and read from a real cluster after a leader kill."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.dump_text import (RecordReadError, combine_segments, metadata_end_offset, parse_data_dump,
                              parse_epoch_checkpoint, parse_metadata_dump, parse_share_state_dump, type_name)
from broker.log_dump import MetadataDump

FIXTURES = Path(__file__).parent / "fixtures"
TOPIC_ID = "7nZyAeh8RaGsm9ZhNG5NkA"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_type_names():
    assert type_name("PARTITION_CHANGE_RECORD") == "PartitionChangeRecord"
    assert type_name("TOPIC_RECORD") == "TopicRecord"


def test_metadata_dump_keeps_topic_partition_and_broker_records_in_log_order():
    recs = parse_metadata_dump(fixture("metadata_dump.txt"))
    assert [(r["offset"], r["type"]) for r in recs] == [
        (10, "RegisterBrokerRecord"), (12, "RegisterBrokerRecord"), (13, "RegisterBrokerRecord"), (31, "TopicRecord"), (34, "PartitionRecord"), (35, "PartitionRecord"),
        (60, "PartitionChangeRecord"), (61, "PartitionChangeRecord"), (62, "BrokerRegistrationChangeRecord"),
        (337, "BrokerRegistrationChangeRecord"), (338, "BrokerRegistrationChangeRecord"),
        (340, "PartitionChangeRecord"), (341, "PartitionChangeRecord"), (635, "PartitionChangeRecord")]
    by_offset = {r["offset"]: r for r in recs}
    assert by_offset[31]["data"] == {"name": "probe", "topicId": TOPIC_ID}
    p0 = by_offset[34]
    assert p0["wall_ms"] == 1795444310453
    assert (p0["data"]["partitionId"], p0["data"]["leader"], p0["data"]["leaderEpoch"]) == (0, 1, 0)
    assert p0["data"]["replicas"] == [1, 2, 3] and p0["data"]["isr"] == [1, 2, 3]
    # The killed leader (1) replaced by 2; partition 1 only lost 1 from its ISR (no "leader": unchanged).
    assert by_offset[60]["data"] == {"partitionId": 0, "topicId": TOPIC_ID, "isr": [2, 3], "leader": 2}
    assert by_offset[60]["wall_ms"] == 1795444321117
    assert "leader" not in by_offset[61]["data"] and by_offset[61]["data"]["isr"] == [2, 3]
    assert by_offset[62]["data"]["fenced"] == 1
    assert by_offset[340]["data"]["isr"] == [1, 2, 3]
    assert by_offset[635]["data"]["leader"] == 1  # preferred leader back
    assert by_offset[10]["data"]["brokerId"] == 1


def test_metadata_dump_only_the_asked_types_and_end_offset():
    recs = parse_metadata_dump(fixture("metadata_dump.txt"), kept={"TopicRecord"})
    assert [r["offset"] for r in recs] == [31]
    assert metadata_end_offset(fixture("metadata_dump.txt")) == 636
    assert metadata_end_offset("Dumping /x/00000000000000000000.log\nLog starting offset: 0\n") is None


def test_data_dump_splits_files_and_tags_records_with_their_batch_epoch_and_producer():
    segs = parse_data_dump(fixture("data_dump.txt"))
    p0 = segs["/var/lib/kafka/data/probe-0/00000000000000000000.log"]
    p1 = segs["/var/lib/kafka/data/probe-1/00000000000000000000.log"]
    assert list(segs) == ["/var/lib/kafka/data/probe-0/00000000000000000000.log",
                          "/var/lib/kafka/data/probe-1/00000000000000000000.log"]
    assert p0["base"] == 0
    assert p0["batches"] == [[0, 49, 0], [50, 79, 1], [80, 82, 1]]
    assert p0["records"][:3] == [[0, 0, 0, 0], [1, 1, 0, 0], [2, 2, 0, 0]]
    assert [49, 49, 0, 0] in p0["records"] and [50, 50, 1, 1001] in p0["records"]
    assert p0["records"][-3:] == [[80, 80, 1, 1002], [81, 81, 1, 1002], [82, 82, 1, 1002]]  # "80      " padded
    assert p1["batches"] == [[0, 29, 0]] and p1["records"][0] == [0, 100, 0, 1000] and p1["records"][-1] == [29, 129, 0, 1000]
    assert p0["markers"] == [] and p1["markers"] == []  # no transactions
    start, end, records, markers, note = combine_segments([p0], max_records=1000)
    assert (start, end, markers, note) == (0, 83, [], None) and records == p0["records"]


def test_combine_segments_limits_and_empty_logs():
    segs = parse_data_dump(fixture("data_dump.txt"))
    p0 = segs["/var/lib/kafka/data/probe-0/00000000000000000000.log"]
    start, end, records, markers, note = combine_segments([p0], max_records=5)
    assert (start, end, records, markers) == (0, 83, None, []) and "over max_records 5" in note
    empty = parse_data_dump("Dumping /d/t-0/00000000000000000120.log\nLog starting offset: 120\n")
    assert combine_segments(list(empty.values()), 10) == (120, 120, [], [], None)


TXN_LOG = "/var/lib/kafka/data/kchaos-0/00000000000000000000.log"


def test_txn_data_dump_keeps_each_records_producer_and_the_end_transaction_markers():
    """A real capture: three transactional producers (ids 1, 1000, 2000, epoch 0: librdkafka's
    producer ends transactions without bumping the epoch) interleaved in one partition."""
    (seg,) = parse_data_dump(fixture("txn_data_dump.txt")).values()
    assert seg["records"] == [
        [0, 8, 0, 1], [2, 4, 0, 2000], [4, 10, 0, 2000], [5, 12, 0, 1000], [7, 20, 0, 1], [10, 19, 0, 2000],
        [11, 26, 0, 1], [14, 25, 0, 2000], [15, 30, 0, 1000], [16, 35, 0, 1], [17, 38, 0, 1],
        [20, 36, 0, 1000], [21, 34, 0, 2000]]
    assert seg["markers"] == [
        [1, 1, 0, "COMMIT"], [3, 2000, 0, "COMMIT"], [6, 1000, 0, "COMMIT"], [8, 2000, 0, "COMMIT"],
        [9, 1, 0, "COMMIT"], [12, 2000, 0, "COMMIT"], [13, 1, 0, "ABORT"], [18, 2000, 0, "ABORT"],
        [19, 1000, 0, "COMMIT"], [22, 1, 0, "ABORT"], [23, 2000, 0, "COMMIT"], [24, 1000, 0, "ABORT"]]
    assert [16, 17, 0] in seg["batches"] and len(seg["batches"]) == 24   # one batch of two records
    start, end, records, markers, note = combine_segments([seg], max_records=12)
    assert (start, end, records, note) == (0, 25, None, "13 records, over max_records 12: not kept")
    assert markers == seg["markers"]        # one per transaction: kept while the records are not
    *_, markers, note = combine_segments([seg], max_records=11)
    assert markers is None and note == ("13 records, over max_records 11: not kept; "
                                        "12 transaction markers, over max_records 11: not kept")


def test_txn_data_dump_stored_and_loaded_settles_each_value_by_its_producers_next_marker(tmp_path):
    from broker.log_dump import ReplicaDump
    from checkers.kafka_record import load_records, txn_outcome
    from harness.record_collector import replica_line
    (seg,) = parse_data_dump(fixture("txn_data_dump.txt")).values()
    start, end, records, markers, note = combine_segments([seg], max_records=100)
    lines = [{"kchaos-replicas": 1, "topic": "kchaos", "max_records": 100}] + [
        replica_line(node, 0, ReplicaDump(node, "kchaos", 0, start, end, [[0, 0]], records, markers, note), None)
        for node in ("n1", "n2")]
    (tmp_path / "replicas.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rr = load_records(tmp_path, None)
    states = {v: txn_outcome(rr, 0, v).state for v in (8, 4, 10, 12, 20, 19, 26, 25, 30, 35, 38, 36, 34, 99)}
    assert states == {8: "commit", 4: "commit", 10: "commit", 12: "commit", 20: "commit", 19: "commit",
                      26: "abort", 25: "abort", 30: "commit", 35: "abort", 38: "abort", 36: "abort",
                      34: "commit", 99: "absent"}
    assert txn_outcome(rr, 0, 30).evidence == \
        "n1, n2: value 30 at offset 15 (producer 1000), COMMIT marker at offset 19 (producer epoch 0)"


# The line shapes DumpLogSegments prints with --share-group-state-decoder (its
# CoordinatorRecordMessageParser); the cluster test of the share coordinator reads a real one.
SHARE_STATE_DUMP = """Dumping /var/lib/kafka/data/__share_group_state-7/00000000000000000000.log
Log starting offset: 0
baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 \
partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 \
CreateTime: 1795444310453 size: 150 magic: 2 compresscodec: none crc: 1 isvalid: true
| offset: 0 CreateTime: 1795444310453 keySize: 40 valueSize: 60 sequence: -1 headerKeys: [] \
key: {"type":"0","data":{"groupId":"sg","topicId":"7nZyAeh8RaGsm9ZhNG5NkA","partition":1}} \
payload: {"version":"0","data":{"snapshotEpoch":0,"stateEpoch":0,"leaderEpoch":0,"startOffset":-1,"stateBatches":[]}}
baseOffset: 1 lastOffset: 2 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 \
partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 150 \
CreateTime: 1795444311000 size: 150 magic: 2 compresscodec: none crc: 1 isvalid: true
| offset: 1 CreateTime: 1795444311000 keySize: 40 valueSize: 60 sequence: -1 headerKeys: [] \
key: {"type":"1","data":{"groupId":"sg","topicId":"7nZyAeh8RaGsm9ZhNG5NkA","partition":1}} \
payload: {"version":"0","data":{"snapshotEpoch":0,"leaderEpoch":0,"startOffset":0,\
"stateBatches":[{"firstOffset":0,"lastOffset":3,"deliveryState":2,"deliveryCount":1}]}}
| offset: 2 CreateTime: 1795444311000 keySize: 40 valueSize: -1 sequence: -1 headerKeys: [] \
key: {"type":"0","data":{"groupId":"old","topicId":"7nZyAeh8RaGsm9ZhNG5NkA","partition":0}} payload: <DELETE>
"""


def test_share_state_dump_keeps_each_records_key_value_and_batch_time():
    (path, recs), = parse_share_state_dump(SHARE_STATE_DUMP).items()
    assert path.endswith("__share_group_state-7/00000000000000000000.log")
    assert [(r["offset"], r["wall_ms"], r["key"]["type"]) for r in recs] == [
        (0, 1795444310453, "0"), (1, 1795444311000, "1"), (2, 1795444311000, "0")]
    assert recs[1]["key"]["data"] == {"groupId": "sg", "topicId": "7nZyAeh8RaGsm9ZhNG5NkA", "partition": 1}
    assert recs[1]["value"]["data"]["stateBatches"] == [
        {"firstOffset": 0, "lastOffset": 3, "deliveryState": 2, "deliveryCount": 1}]
    assert recs[2]["value"] is None          # a tombstone


def test_leader_epoch_checkpoint():
    assert parse_epoch_checkpoint(fixture("leader-epoch-checkpoint")) == [[0, 0], [1, 50]]
    assert parse_epoch_checkpoint("0\n0\n") == []
    with pytest.raises(RecordReadError):
        parse_epoch_checkpoint("0\n3\n0 0\n")


def test_nodes_disagreeing_on_the_common_prefix_are_reported():
    from harness.record_collector import metadata_lines
    recs = parse_metadata_dump(fixture("metadata_dump.txt"))
    full = MetadataDump("n2", recs, 0, 636)
    prefix = [r for r in recs if r["offset"] < 62]
    short = MetadataDump("n1", prefix, 0, 62)
    errors: dict[str, str] = {}
    lines = metadata_lines({"n1": short, "n2": full}, errors, "probe")
    assert lines[0]["source"] == "n2" and lines[0]["topic_id"] == TOPIC_ID and errors == {}
    assert [l["offset"] for l in lines[1:]] == [31, 34, 35, 60, 61, 340, 341, 635]
    bad = MetadataDump("n3", prefix[:-1] + [{**prefix[-1], "type": "PartitionRecord"}], 0, 62)
    metadata_lines({"n3": bad, "n2": full}, errors, "probe")
    assert "n3" in errors and "offset 62" in errors["n3"]


# -- on a real cluster ------------------------------------------------------------------
def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@pytest.mark.cluster
def test_collect_records_after_a_leader_kill(heal_cluster, topic_name, tmp_path):
    from harness.record_collector import collect_records
    from tests.kafka_io import produce
    kafka = heal_cluster.kafka
    kafka.create_topic(topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    acked = produce(kafka.bootstrap(), topic_name, list(range(300)), partition=0)
    # every broker a follower in sync first: a broker the previous test left catching up on
    # metadata is a registered replica with no partition folders yet (seen once in CI)
    wait_for(lambda: all(len(kafka.isr(topic_name).get(p) or []) == 3 for p in (0, 1)), 60,
             "every replica of both partitions in sync")
    old = kafka.leaders(topic_name)[0]
    assert kafka.broker(old).kill()
    new = wait_for(lambda: (l := kafka.leaders(topic_name)[0]) not in (None, old) and l, 60, "a new leader")
    wait_for(lambda: old not in kafka.isr(topic_name)[0], 60, "the ISR to drop the killed leader")
    acked += produce(kafka.bootstrap(), topic_name, list(range(300, 400)), partition=0)
    assert len(acked) == 400
    isr = kafka.isr(topic_name)[0]

    summary = collect_records(kafka, tmp_path, topic_name, 2)  # the old leader is still dead
    assert summary["errors"] == {}

    meta = [json.loads(l) for l in (tmp_path / "metadata.jsonl").read_text().splitlines()]
    header, body = meta[0], meta[1:]
    assert header["kchaos-metadata"] == 1 and header["topic"] == topic_name and header["errors"] == {}
    assert header["snapshot"] is False and header["log_start_offset"] == 0
    assert all(r["data"].get("topicId") == header["topic_id"] for r in body)
    created = [r for r in body if r["type"] == "PartitionRecord" and r["data"]["partitionId"] == 0]
    assert len(created) == 1 and created[0]["data"]["leader"] == old
    changes = [r for r in body if r["type"] == "PartitionChangeRecord" and r["data"]["partitionId"] == 0]
    assert any(r["data"].get("leader") == new for r in changes)
    assert [r["offset"] for r in body] == sorted(r["offset"] for r in body)

    rep = [json.loads(l) for l in (tmp_path / "replicas.jsonl").read_text().splitlines()]
    read_at = rep[0].pop("read_wall_ms")     # when Kafka's record was read (checkers/hanging.py)
    assert isinstance(read_at, int) and read_at > 0
    assert rep[0] == {"kchaos-replicas": 1, "topic": topic_name, "max_records": 200_000}
    lines = {(r["node"], r["partition"]): r for r in rep[1:]}
    assert set(lines) == {(f"n{b}", p) for b in (1, 2, 3) for p in (0, 1)}
    assert all(r["error"] is None for r in lines.values())
    for broker in isr:
        line = lines[(f"n{broker}", 0)]
        assert line["broker"] == broker and line["log_start_offset"] == 0 and line["log_end_offset"] >= 400
        held = {o: (v, e) for o, v, e, _ in line["records"]}
        for _, offset, value in acked:
            assert held[offset][0] == value, f"n{broker} lacks acknowledged {value} at {offset}"
        assert {held[o][1] for _, o, v in acked if v < 300} == {0}
        assert min(held[o][1] for _, o, v in acked if v >= 300) >= 1
        assert line["epochs"][0] == [0, 0] and len(line["epochs"]) >= 2
        first_new = min(o for _, o, v in acked if v >= 300)
        assert any(e >= 1 and start <= first_new for e, start in line["epochs"])
    dead = lines[(f"n{old}", 0)]  # read from disk although its broker is dead
    assert {o: v for o, v, _, _ in dead["records"]} == {o: v for _, o, v in acked if v < 300}
    assert lines[(f"n{old}", 1)]["records"] == [] and lines[(f"n{old}", 1)]["log_end_offset"] == 0


def test_a_log_of_more_offsets_than_max_records_and_no_transaction_is_counted_not_printed(heal_cluster, topic_name):
    """A log small in bytes but over max_records in offsets is counted from its batch lines
    and not printed record by record (its records would not be kept); one at max_records is."""
    from broker.log_dump import read_replica_logs
    from tests.kafka_io import produce
    kafka = heal_cluster.kafka
    kafka.create_topic(topic_name, partitions=1, replication_factor=3)
    assert len(produce(kafka.bootstrap(), topic_name, list(range(3000)), partition=0)) == 3000
    leader = kafka.leaders(topic_name)[0]
    node = next(n for n in kafka.nodes if n.name == f"n{leader}")
    counted = read_replica_logs(node, topic_name, [0], max_records=2999)[0]
    assert counted.records is None and counted.markers is None
    assert counted.note.startswith("3000 offsets, over max_records 2999, none transactional")
    assert (counted.log_start_offset, counted.log_end_offset) == (0, 3000)
    too_big = read_replica_logs(node, topic_name, [0], max_records=10)[0]      # over 10 x 100 bytes
    assert too_big.records is None and too_big.note.startswith("log is ") and too_big.log_end_offset == 3000
    printed = read_replica_logs(node, topic_name, [0], max_records=3000)[0]
    assert sorted(v for _, v, _, _ in printed.records) == list(range(3000)) and printed.note is None


def test_txn_batches_are_the_transactional_data_batches_not_the_markers():
    (seg,) = parse_data_dump(fixture("txn_data_dump.txt")).values()
    assert seg["txn_batches"][:3] == [[0, 0, 1, 0], [2, 2, 2000, 0], [4, 4, 2000, 0]]
    assert len(seg["txn_batches"]) == 12 and all(b[0] not in {m[0] for m in seg["markers"]} for b in seg["txn_batches"])
    assert parse_data_dump(fixture("data_dump.txt"))[
        "/var/lib/kafka/data/probe-0/00000000000000000000.log"]["txn_batches"] == []


def test_find_hanging_table_parses_and_an_empty_one_has_no_rows():
    from broker.txn_tool import find_hanging_argv, parse_find_hanging
    head = "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\tLastTimestamp\tDuration(min)\t\n"
    assert parse_find_hanging(head) == [] and parse_find_hanging("") == []
    (row,) = parse_find_hanging(head + "kchaos\t2\t2000\t0\t1\t1337\t1795702419245\t3\t\n")
    assert row == {"Topic": "kchaos", "Partition": 2, "ProducerId": 2000, "ProducerEpoch": 0, "CoordinatorEpoch": 1,
                   "StartOffset": 1337, "LastTimestamp": 1795702419245, "Duration(min)": 3}
    argv = find_hanging_argv("10.0.0.1:9092", 2)
    assert "find-hanging" in argv and argv[argv.index("--broker-id") + 1] == "2"
