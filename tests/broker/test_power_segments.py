"""The power-loss cut on real segment files (written by Kafka 4.3.1: idempotent
producers, uncompressed and gzip batches, segments rolled by segment.ms), checked
against Kafka's own DumpLogSegments listing of the same files (dump.txt)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from broker.unsynced_data import (FlushPolicy, LONG_MAX, SegmentError, parse_checkpoint, parse_listing, partition_dir,
                          plan_cut, power_cut, scan_batches)
from infra.node import LocalNode

FIXTURES = Path(__file__).parent / "fixtures" / "power"
SEGMENTS = sorted(FIXTURES.glob("*.log"))


def kafka_listing() -> dict[str, list[tuple[int, int, int, int, int]]]:
    """{segment file: [(base, last, position, size, count)]} from DumpLogSegments."""
    out: dict[str, list] = {}
    current = None
    for line in (FIXTURES / "dump.txt").read_text().splitlines():
        if line.startswith("Dumping"):
            current = Path(line.split()[1]).name
            out[current] = []
            continue
        f = dict(re.findall(r"(\w+): (\S+)", line))
        out[current].append(tuple(int(f[k]) for k in ("baseOffset", "lastOffset", "position", "size", "count")))
    return out


def test_scan_agrees_with_kafkas_dump_on_every_fixture_segment():
    listing = kafka_listing()
    assert set(listing) == {p.name for p in SEGMENTS}
    for seg in SEGMENTS:
        data = seg.read_bytes()
        batches, valid = scan_batches(data)
        assert [(b.base_offset, b.last_offset, b.position, b.size, b.records) for b in batches] == listing[seg.name]
        assert valid == len(data)


def test_scan_stops_at_a_torn_or_zero_filled_tail():
    data = (FIXTURES / "00000000000000000043.log").read_bytes()
    whole, _ = scan_batches(data)
    torn, valid = scan_batches(data[:200])  # inside the second batch
    assert [b.base_offset for b in torn] == [43] and valid == 159
    padded, valid = scan_batches(data + bytes(4096))  # preallocated zeros
    assert padded == whole and valid == len(data)


def test_scan_rejects_bytes_that_are_not_batches():
    data = bytearray((FIXTURES / "00000000000000000043.log").read_bytes())
    data[16] = 7  # magic
    with pytest.raises(SegmentError):
        scan_batches(bytes(data))


def test_checkpoint_and_dir_names():
    assert parse_checkpoint("0\n2\nkchaos 0 163\n__consumer_offsets 12 0\n") == \
        {"kchaos-0": 163, "__consumer_offsets-12": 0}
    assert parse_checkpoint("") == {}
    assert partition_dir("my-topic-3") == ("my-topic", 3)
    assert partition_dir("__cluster_metadata-0") is None
    assert partition_dir("kchaos-0.7b3f2a-delete") is None


ACTIVE = FIXTURES / "00000000000000000163.log"  # batches 163-169, 170-176, 177-179
FILES = ["00000000000000000142.log", "00000000000000000163.log", "00000000000000000163.index",
         "00000000000000000163.timeindex", "00000000000000000163.snapshot", "00000000000000000170.snapshot",
         "leader-epoch-checkpoint"]


def test_default_flush_cuts_the_active_segment_back_to_its_base():
    cut = plan_cut("fx-0", FILES, recovery_point=142, active=ACTIVE.read_bytes())
    assert (cut.cut, cut.log_end, cut.new_end, cut.records, cut.bytes) == (163, 180, 163, 17, 421)
    assert cut.truncate == ("00000000000000000163.log", 0)
    # index files rebuilt by Kafka; the producer snapshot past the new end goes, the one at it stays
    assert cut.delete == ["00000000000000000163.index", "00000000000000000163.timeindex",
                          "00000000000000000170.snapshot"]
    assert cut.record() == {"from": 163, "to": 180, "records": 17, "bytes": 421, "recovery_point": 142,
                            "active_base": 163}


def test_a_recovery_point_inside_the_active_segment_keeps_the_batches_before_it():
    cut = plan_cut("fx-0", FILES, recovery_point=170, active=ACTIVE.read_bytes())
    assert (cut.new_end, cut.records, cut.truncate) == (170, 10, ("00000000000000000163.log", 159))
    # a recovery point inside a batch keeps that batch (flushes end on batch boundaries)
    cut = plan_cut("fx-0", FILES, recovery_point=172, active=ACTIVE.read_bytes())
    assert (cut.new_end, cut.records, cut.truncate) == (177, 3, ("00000000000000000163.log", 318))


def test_nothing_is_cut_when_everything_was_flushed():
    full = plan_cut("fx-0", FILES, recovery_point=180, active=ACTIVE.read_bytes())
    every = plan_cut("fx-0", FILES, recovery_point=0, active=ACTIVE.read_bytes(), flushed_every_append=True)
    for cut in (full, every):
        assert (cut.new_end, cut.log_end, cut.records, cut.bytes, cut.truncate, cut.delete) == (180, 180, 0, 0, None, [])


def test_flush_policy_exactness():
    assert FlushPolicy().exact and not FlushPolicy().every_append
    assert FlushPolicy(messages=1).every_append and FlushPolicy(messages=1).exact
    assert not FlushPolicy(messages=1000).exact and not FlushPolicy(ms=1000).exact
    assert FlushPolicy(messages=LONG_MAX, ms=LONG_MAX).exact


def test_power_cut_on_a_node_truncates_files_and_reports_the_dropped_range(tmp_path):
    """The node-side steps, on this host (LocalNode): a log dir laid out as
    Kafka's, with the fixture segments."""
    data = tmp_path / "data"
    part = data / "fx-0"
    part.mkdir(parents=True)
    for seg in SEGMENTS:
        shutil.copy(seg, part / seg.name)
    for extra in ("00000000000000000163.index", "00000000000000000163.timeindex"):
        (part / extra).write_bytes(bytes(64))
    (data / "other-0").mkdir()
    shutil.copy(FIXTURES / "00000000000000000043.log", data / "other-0" / "00000000000000000043.log")
    (data / "__cluster_metadata-0").mkdir()
    (data / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"x" * 10)
    (data / "recovery-point-offset-checkpoint").write_text("0\n2\nfx 0 61\nother 0 50\n")

    policies = {"fx": FlushPolicy(), "other": FlushPolicy(messages=1)}
    out = power_cut(LocalNode(), lambda topic: policies[topic], data_dir=str(data))

    assert out["logs"] == {"fx-0": {"from": 163, "to": 180, "records": 17, "bytes": 421, "recovery_point": 61,
                                    "active_base": 163}}
    assert out["records"] == 17 and out["metadata_log"].startswith("kept")
    assert (part / "00000000000000000163.log").stat().st_size == 0
    assert not (part / "00000000000000000163.index").exists()
    assert (part / "00000000000000000061.log").read_bytes() == (FIXTURES / "00000000000000000061.log").read_bytes()
    assert (data / "other-0" / "00000000000000000043.log").stat().st_size == 495
    assert (data / "__cluster_metadata-0" / "00000000000000000000.log").stat().st_size == 10


def test_listing_parse():
    checkpoint, dirs = parse_listing("0\n1\nfx 0 5\n--- files\nfx-0/00000000000000000000.log 74\nmeta.properties 9\n")
    assert checkpoint == {"fx-0": 5} and dirs == {"fx-0": {"00000000000000000000.log": 74}}
