"""Kafka's own record: folding the metadata log (``records.fold_changes``),
attributing lost writes to elections (``elections.attribute``), loading the
stored files, and the anomalies producer settings allow (``common.client_allowances``)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import checkers
from checkers.common import Settings, client_allowances
from checkers.elections import attribute
from checkers.kafka_record import (Replica, RunRecords, Settlement, elections, fold_changes, load_records, presence,
                                   records_read_wall_ms, txn_outcome)
from chk_gen import Params, W0, simulate_run
from chk_gen_inject import inject_run

MS = 1_000_000
T0 = W0 // MS      # wall ms at history time 0


def rec(typ: str, offset: int, dt_ms: int | None, **data: Any) -> dict[str, Any]:
    return {"offset": offset, "wall_ms": None if dt_ms is None else T0 + dt_ms, "type": typ,
            "data": {"partitionId": 0, "topicId": "T", **data}}


def created(**over: Any) -> dict[str, Any]:
    d = {"replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1, "leaderEpoch": 4,
         "eligibleLeaderReplicas": [], "lastKnownElr": [], "leaderRecoveryState": 0, **over}
    return rec("PartitionRecord", 10, 0, **d)


def change(offset: int, dt_ms: int | None = None, **data: Any) -> dict[str, Any]:
    return rec("PartitionChangeRecord", offset, offset if dt_ms is None else dt_ms, **{"leader": -2, **data})


# ------------------------------------------------------------------ fold_changes

def test_partition_record_creates_and_sets_the_epoch() -> None:
    (c,) = fold_changes([created()], W0)
    assert (c["kind"], c["leader"], c["leader_epoch"], c["isr"], c["elr"], c["replicas"]) == \
           ("create", 1, 4, [1, 2, 3], [], [1, 2, 3])
    assert c["previous_leader"] is None and c["time"] == 0 and c["recovering"] is False


def test_leader_change_bumps_the_epoch_and_no_change_keeps_it() -> None:
    out = fold_changes([created(), change(11, isr=[1, 2]), change(12, leader=2), change(13, leader=2)], W0)
    assert [c["leader_epoch"] for c in out] == [4, 4, 5, 6]
    assert [c["kind"] for c in out] == ["create", None, "isr", "isr"]
    assert out[1]["isr"] == [1, 2] and out[1]["leader"] == 1
    assert out[2]["previous_isr"] == [1, 2] and out[2]["isr"] == [1, 2]      # null isr: unchanged
    assert out[2]["time"] == 12 * MS


def test_leaderless_then_elr_then_unclean() -> None:
    out = fold_changes([
        created(),
        change(11, isr=[1], eligibleLeaderReplicas=[2, 3]),
        change(12, leader=-1, isr=[], eligibleLeaderReplicas=[1, 2, 3]),
        change(13, leader=3, isr=[3], eligibleLeaderReplicas=[1, 2]),
        change(14, isr=[3], eligibleLeaderReplicas=[], lastKnownElr=[1]),
        change(15, leader=1, leaderRecoveryState=1),
        change(16, leaderRecoveryState=0),
    ], W0)
    assert [c["kind"] for c in out] == ["create", None, "leaderless", "elr", None, "unclean", None]
    assert out[2]["leader"] is None and out[2]["leader_epoch"] == 5
    assert out[3]["leader"] == 3 and out[3]["leader_epoch"] == 6 and out[3]["previous_elr"] == [1, 2, 3]
    assert out[4]["last_known_elr"] == [1] and out[4]["elr"] == []
    assert out[5]["leader_epoch"] == 7 and out[5]["previous_isr"] == [3] and out[5]["previous_elr"] == []
    assert [c["recovering"] for c in out[4:]] == [False, True, False]
    assert [e["kind"] for e in elections(out)] == ["elr", "unclean"]


def test_last_known_leader_back_with_isr_and_elr_empty_is_a_last_leader_election() -> None:
    """The records of a real power loss of all three brokers (Kafka 4.3.1,
    flush.messages=1): each broker left the ELR on its unclean shutdown, the
    last leader stayed in lastKnownElr, and the controller elected it back,
    recovering, with unclean election off (KIP-966 balanced recovery)."""
    out = fold_changes([
        created(leader=2, isr=[2, 3], leaderEpoch=1),
        change(11, isr=[2], eligibleLeaderReplicas=[3]),
        change(12, leader=-1, isr=[], eligibleLeaderReplicas=[2, 3], lastKnownElr=[2]),
        change(13, eligibleLeaderReplicas=[2]),
        change(14, eligibleLeaderReplicas=[]),
        change(15, leader=2, isr=[2], leaderRecoveryState=1, lastKnownElr=[]),
    ], W0)
    assert [c["kind"] for c in out] == ["create", None, "leaderless", None, None, "last-leader"]
    assert out[5]["recovering"] is True and out[5]["leader_epoch"] == 3
    # another broker than the last known leader, with ISR and ELR empty, is unclean
    other = fold_changes([*(c for c in [created(leader=2, isr=[2, 3], leaderEpoch=1),
                                        change(12, leader=-1, isr=[], eligibleLeaderReplicas=[], lastKnownElr=[2]),
                                        change(15, leader=3, isr=[3], leaderRecoveryState=1)])], W0)
    assert [c["kind"] for c in other] == ["create", "leaderless", "unclean"]


def test_lost_write_is_attributed_to_the_last_leader_election_that_removed_it() -> None:
    last_leader = {"kind": "last-leader", "time": 20, "epoch": 3, "partition": 0}
    assert attribute([last_leader], offset=50, t=10, epoch_starts={3: 40}) == (last_leader, "epoch")


def test_leader_in_isr_and_elr_is_an_isr_election() -> None:
    out = fold_changes([created(), change(11, isr=[1, 2], eligibleLeaderReplicas=[2]), change(12, leader=2)], W0)
    assert out[-1]["kind"] == "isr"


def test_missing_leader_field_means_no_change_and_other_records_are_skipped() -> None:
    r = change(11, isr=[1, 3])
    del r["data"]["leader"]
    other = {"offset": 5, "wall_ms": T0, "type": "TopicRecord", "data": {"name": "t"}}
    out = fold_changes([other, created(), r, change(12, leaderRecoveryState=None)], W0)
    assert [c["kind"] for c in out] == ["create", None, None]
    assert out[1]["leader"] == 1 and out[1]["leader_epoch"] == 4 and out[1]["isr"] == [1, 3]
    assert out[2]["recovering"] is False


def test_no_wall_clock_means_no_time() -> None:
    assert fold_changes([created(), change(11, leader=2)], None)[1]["time"] is None
    assert fold_changes([rec("PartitionRecord", 1, None, leader=1, isr=[1])], W0)[0]["time"] is None


def test_second_partition_record_is_judged_against_the_isr() -> None:
    out = fold_changes([created(isr=[1]), created(leader=2, leaderEpoch=9)], W0)
    assert out[1]["kind"] == "unclean" and out[1]["leader_epoch"] == 9


# --------------------------------------------------------------------- attribute

def el(time: int | None, epoch: int) -> dict[str, Any]:
    return {"partition": 0, "time": time, "epoch": epoch}


def test_attribute_by_epoch_start_offset() -> None:
    a, b = el(100, 5), el(200, 7)
    assert attribute([a, b], 10, 50, {5: 8, 7: 3}) == (a, "epoch")       # 8 <= 10
    assert attribute([a, b], 6, 50, {5: 8, 7: 3}) == (b, "epoch")        # 8 > 6, then 3 <= 6
    assert attribute([a, b], 2, 50, {5: 8, 7: 3})[0] is None              # neither reached down to 2
    assert attribute([a, b], 10, 150, {5: 8, 7: 3}) == (b, "epoch")      # a came before the ack
    assert attribute([b, a], 10, 50, {5: 8, 7: 3}) == (a, "epoch")       # first by time, not list order


def test_attribute_unknown_start_is_unattributed() -> None:
    e, why = attribute([el(100, 5), el(200, 7)], 10, 50, {7: 3})
    assert e is None and "epoch 5" in why and "unknown" in why


def test_attribute_needs_an_ack_time_and_offset() -> None:
    assert attribute([el(100, 5)], 10, None, {5: 0}) == (None, "no ack time")
    assert attribute([el(100, 5)], None, 50, {5: 0}) == (None, "no acknowledged offset")
    assert attribute([el(None, 5)], 10, 50, {5: 0})[0] is None          # an election without a time


def test_attribute_by_time_for_samples() -> None:
    a, b = el(100, 5), el(200, 7)
    assert attribute([b, a], None, 50, None) == (a, "time")
    assert attribute([a, b], 3, 150, None) == (b, "time")
    assert attribute([a], 3, 150, None)[0] is None


def test_epoch_starts_take_the_lowest_and_presence_names_every_replica() -> None:
    rr = RunRecords(changes=[], replicas={0: [
        Replica("n2", 0, 0, 5, [(0, 0), (3, 4)], {10: 0, 11: 4}),
        Replica("n1", 0, 0, 5, [(0, 0), (3, 2)], {10: 0}),
        Replica("n3", 0, 0, 5, [(0, 0)], None)]})
    assert rr.epoch_starts(0) == {0: 0, 3: 2}
    assert presence(rr, 0, 11) == {"n1": "absent", "n2": 4, "n3": "not read"}


# ------------------------------------------------------------ txn_outcome

def txn_replica(node: str, values: dict[int, tuple[int, int]] | None, markers: list | None,
                end: int = 50, note: str | None = None) -> Replica:
    """A replica holding ``values`` as value -> (offset, producer id)."""
    return Replica(node, 0, 0, end, [(0, 0)], None if values is None else {v: o for v, (o, _) in values.items()},
                   note=note, producers=None if values is None else {v: p for v, (_, p) in values.items()},
                   markers=markers)


# producer 3001's transaction ended at 30 (before the value), then its value 17 at 40; producer 3002's
# transaction ends at 42 (another producer: not the value's), producer 3001's at 44 (epoch + 1: KIP-890).
HELD = {17: (40, 3001), 18: (41, 3002)}
COMMITTED = [(30, 3001, 4, "ABORT"), (42, 3002, 1, "ABORT"), (44, 3001, 6, "COMMIT")]


def test_txn_outcome_commit_names_the_replicas_offsets_producer_and_marker() -> None:
    rr = RunRecords(replicas={0: [txn_replica("n2", HELD, COMMITTED), txn_replica("n1", HELD, COMMITTED)]})
    assert txn_outcome(rr, 0, 17) == Settlement(
        "commit", "n1, n2: value 17 at offset 40 (producer 3001), COMMIT marker at offset 44 (producer epoch 6)")
    assert txn_outcome(rr, 0, 18).state == "abort"   # the other producer's marker


def test_txn_outcome_abort() -> None:
    aborted = [(30, 3001, 4, "COMMIT"), (45, 3001, 5, "ABORT"), (46, 3001, 6, "COMMIT")]
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, aborted)]})
    s = txn_outcome(rr, 0, 17)
    assert s.state == "abort" and "ABORT marker at offset 45 (producer epoch 5)" in s.evidence


def test_txn_outcome_open_when_no_marker_of_its_producer_follows() -> None:
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, [(42, 3002, 1, "COMMIT")]),
                                  txn_replica("n3", HELD, [(42, 3002, 1, "COMMIT")])]})
    s = txn_outcome(rr, 0, 17)
    assert s == Settlement("open", "n1, n3: value 17 at offset 40 (producer 3001), "
                                   "no marker of that producer after it (log end 50)")


def test_txn_outcome_absent_names_the_read_logs_and_the_unread_ones() -> None:
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, COMMITTED), txn_replica("n2", {}, []),
                                  txn_replica("n3", None, None, note="over max_records")]})
    s = txn_outcome(rr, 0, 99)
    assert s.state == "absent" and "n1, n2" in s.evidence and "n3 not read (over max_records)" in s.evidence
    held = txn_outcome(rr, 0, 17)          # a replica lacking it does not contradict those holding it
    assert held.state == "commit" and held.evidence.endswith("; absent from n2; n3 not read (over max_records)")


def test_txn_outcome_not_read_when_no_listing_can_tell() -> None:
    assert txn_outcome(RunRecords(), 0, 17).state == "not-read"
    old = Replica("n1", 0, 0, 50, [(0, 0)], {17: 40})              # a run stored before markers were
    rr = RunRecords(replicas={0: [old, txn_replica("n2", None, None, note="over max_records")]})
    s = txn_outcome(rr, 0, 17)
    assert s.state == "not-read" and "n1 not read (stored without producers or markers)" in s.evidence


def test_txn_outcome_conflict_when_replicas_disagree() -> None:
    aborted = [(44, 3001, 6, "ABORT")]
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, COMMITTED), txn_replica("n2", HELD, aborted)]})
    s = txn_outcome(rr, 0, 17)
    assert s.state == "conflict" and "COMMIT marker" in s.evidence and "ABORT marker" in s.evidence
    # Held without a marker on a log that goes on past the others' marker: another history.
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, COMMITTED), txn_replica("n2", HELD, [], end=60)]})
    assert txn_outcome(rr, 0, 17).state == "conflict"


def test_txn_outcome_a_replica_that_stopped_before_the_marker_agrees() -> None:
    rr = RunRecords(replicas={0: [txn_replica("n1", HELD, COMMITTED), txn_replica("n2", HELD, [], end=44)]})
    s = txn_outcome(rr, 0, 17)
    assert s.state == "commit" and "n2: value 17 at offset 40 (producer 3001), no marker" in s.evidence


# ----------------------------------------------------------------- loading files

def test_replica_rows_with_and_without_producers_and_markers_load(tmp_path: Path) -> None:
    rows = [{"kchaos-replicas": 1, "topic": "t", "max_records": 10},
            {"node": "n1", "broker": 1, "partition": 0, "log_start_offset": 0, "log_end_offset": 46,
             "epochs": [[0, 0]], "records": [[40, 17, 0, 3001], [41, 18, 0, 3002]],
             "markers": [[42, 3002, 1, "ABORT"], [44, 3001, 6, "COMMIT"]], "note": None, "error": None},
            {"node": "n2", "broker": 2, "partition": 0, "log_start_offset": 0, "log_end_offset": 46,
             "epochs": [[0, 0]], "records": [[40, 17, 0], [41, 18, 0]], "note": None, "error": None}]
    (tmp_path / "replicas.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rr = load_records(tmp_path, W0)
    new, old = sorted(rr.replicas[0], key=lambda r: r.node)
    assert new.by_value == {17: 40, 18: 41} and new.producers == {17: 3001, 18: 3002}
    assert new.markers == [(42, 3002, 1, "ABORT"), (44, 3001, 6, "COMMIT")] and new.txn_readable
    assert old.by_value == {17: 40, 18: 41} and old.producers is None and old.markers is None
    assert not old.txn_readable and presence(rr, 0, 17) == {"n1": 40, "n2": 40}
    s = txn_outcome(rr, 0, 17)
    assert s.state == "commit" and s.evidence.endswith("n2 not read (stored without producers or markers)")



def test_simulated_run_written_and_loaded_is_checked_with_its_record(tmp_path: Path) -> None:
    p = Params(seed=7, partitions=2, clients=3, steps=80, mode="assign", drain=True, p_fail=0.0, p_info=0.1,
               mixed=True, retention=True, meta=True, elr=True)
    inj = None
    for seed in range(50):
        inj = inject_run(simulate_run(p), "unclean-election", random.Random(seed))
        if inj is not None and inj.removed:
            break
    assert inj is not None and inj.removed
    inj.run.write(tmp_path)
    loaded = load_records(tmp_path, W0)
    direct = inj.run.records()
    assert loaded.changes == direct.changes and loaded.notes == []
    assert {q: [(r.node, r.epochs, r.by_value) for r in rs] for q, rs in loaded.replicas.items()} == \
           {q: [(r.node, r.epochs, r.by_value) for r in rs] for q, rs in direct.replicas.items()}
    r = checkers.check(tmp_path / "history.jsonl", {"engine": "reference"}, records=loaded)
    assert r.valid is False and r.anomalies["unclean-election"]["count"] == 1
    assert r.anomalies["lost-write"]["count"] == len(inj.removed)
    assert {w["attributed_to"]["epoch"] for w in r.anomalies["lost-write"]["witnesses"]} == {inj.epoch}


def test_missing_metadata_log_falls_back_on_samples(tmp_path: Path) -> None:
    rr = load_records(tmp_path, W0)
    assert rr.changes is None and any("no metadata log" in n for n in rr.notes)


# ---------------------------------------------------------- client allowances

def test_idempotent_producer_gets_no_allowance() -> None:
    assert client_allowances({"enable.idempotence": True}) == {}
    assert client_allowances({"enable.idempotence": "true", "retries": 5}) == {}
    assert client_allowances(None) == {}


def test_non_idempotent_producer_with_defaults_may_duplicate_and_reorder() -> None:
    out = client_allowances({"enable.idempotence": False})
    assert set(out) == {"duplicate", "nonmonotonic-send"}
    assert set(client_allowances({})) == {"duplicate", "nonmonotonic-send"}
    assert set(client_allowances({"enable.idempotence": "false", "max.in.flight": 1})) == {"duplicate"}


def test_no_retries_means_no_allowance() -> None:
    assert client_allowances({"enable.idempotence": False, "retries": 0}) == {}
    assert client_allowances({"enable.idempotence": False, "message.send.max.retries": "0"}) == {}


def test_settings_carry_client_allowances_and_config_can_take_them_away() -> None:
    s = Settings.from_config({"client_settings": {"producer": {"enable.idempotence": False}}})
    assert {"duplicate", "nonmonotonic-send", "elr-election"} <= set(s.allowed_for("assign"))
    s = Settings.from_config({"client_settings": {"producer": {"enable.idempotence": False}},
                              "allowed": {"duplicate": ""}})
    assert "duplicate" not in s.allowed_for("assign")


def test_records_read_time_comes_from_the_replicas_header_alone(tmp_path: Path) -> None:
    """The report's "read at" line and the checkers' read_time are one field of one header."""
    assert records_read_wall_ms(tmp_path) is None                       # no replicas.jsonl
    rep = tmp_path / "replicas.jsonl"
    rep.write_text(json.dumps({"kchaos-replicas": 1, "read_wall_ms": 5_000}) + "\n" + "{not json\n")
    assert records_read_wall_ms(tmp_path) == 5_000
    assert load_records(tmp_path, 1_000_000_000).read_time == 4_000_000_000
    rep.write_text(json.dumps({"kchaos-replicas": 1, "read_wall_ms": True}) + "\n")
    assert records_read_wall_ms(tmp_path) is None
    rep.write_text(json.dumps({"node": "n1", "partition": 0, "read_wall_ms": 5_000}) + "\n")   # no header
    assert records_read_wall_ms(tmp_path) is None
