"""checkers/raft_log.py on hand-written listings: divergence below the committed
offset is an anomaly, above it (an uncommitted tail a new leader truncates) is not."""
from __future__ import annotations

import json

from checkers.raft_log import RaftListing, RaftLog, committed_offset, divergences, judge, keeps_committing, load


def listing(node: str, entries: dict[int, tuple[int, str]], snapshots=()) -> RaftListing:
    return RaftListing(node, min(entries, default=0), max(entries, default=-1) + 1, dict(entries), list(snapshots))


SAME = {o: (1, f"d{o}") for o in range(10)}


def test_a_divergence_below_the_high_watermark_is_an_anomaly():
    planted = {**SAME, 4: (2, "other")}
    log = RaftLog([listing("n4", SAME), listing("n5", planted), listing("n6", SAME)], high_watermark=8)
    out = judge(log)
    assert out["divergences"] == 2 and out["committed_offset"] == 8
    assert {tuple(w["nodes"]) for w in out["witnesses"]} == {("n4", "n5"), ("n5", "n6")}
    assert all(w["offset"] == 4 for w in out["witnesses"])


def test_a_divergence_above_the_high_watermark_is_legal():
    tail = {**SAME, 8: (2, "uncommitted"), 9: (2, "uncommitted")}
    log = RaftLog([listing("n4", SAME), listing("n5", tail)], high_watermark=8)
    assert divergences(log.listings, 8) == []
    assert judge(log)["divergences"] == 0 and judge(log)["offsets_compared"] == 8


def test_offsets_only_one_controller_holds_are_not_compared():
    short = {o: SAME[o] for o in range(5)}
    later = {o: SAME[o] for o in range(6, 10)}   # its log starts after a snapshot
    assert divergences([listing("n4", short), listing("n5", later)], 10) == []


def test_without_a_high_watermark_the_newest_snapshot_bounds_what_is_judged():
    planted = {**SAME, 7: (2, "other")}
    log = RaftLog([listing("n4", SAME, ["00000000000000000005-0000000001.checkpoint"]), listing("n5", planted)])
    assert committed_offset(log) == (5, "newest snapshot")
    assert judge(log)["divergences"] == 0
    assert committed_offset(RaftLog([listing("n4", SAME)]))[0] is None


def test_the_quorum_keeps_committing_when_the_high_watermark_moves():
    assert keeps_committing(RaftLog([], status_before={"high_watermark": 10}, status_after={"high_watermark": 25}))
    assert keeps_committing(RaftLog([], status_before={"high_watermark": 10},
                                    status_after={"high_watermark": 10})) is False
    assert keeps_committing(RaftLog([], status_before={})) is None


def test_load_reads_what_the_collector_writes(tmp_path):
    lines = [{"kchaos-raft-log": 1, "high_watermark": 3, "status_before": {"high_watermark": 3},
              "status_after": {"high_watermark": 9, "voters": [{"id": 4}, {"id": 5}]}, "errors": {}},
             {"node": "n4", "log_start_offset": 0, "end_offset": 3, "snapshots": [],
              "entries": [[0, 1, "a"], [1, 1, "b"], [2, 1, "c"]]},
             {"node": "n5", "log_start_offset": 0, "end_offset": 3, "snapshots": [],
              "entries": [[0, 1, "a"], [1, 1, "x"], [2, 1, "c"]]}]
    (tmp_path / "raft-log.jsonl").write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    out = judge(load(tmp_path))
    assert out["divergences"] == 1 and out["witnesses"][0]["offset"] == 1
    assert out["keeps_committing"] is True and out["voters"] == [4, 5]
    assert load(tmp_path / "nowhere") is None
