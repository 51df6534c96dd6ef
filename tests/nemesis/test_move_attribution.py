"""bench/move_attribution.py's pure rules: which planned move a lost write belongs to,
read against the metadata log's leader changes (docs/design.md, "Planned operations")."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from history.fault_intervals import FaultInterval, NemesisOp

_SPEC = importlib.util.spec_from_file_location(
    "move_attribution", Path(__file__).resolve().parents[2] / "bench" / "move_attribution.py")
attribution = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(attribution)

S = 1_000_000_000


def _move(f: str, leader: str, partition: int, start_s: float, end_s: float | None) -> FaultInterval:
    start = NemesisOp(index=1, invoke_time=int(start_s * S), time=int(start_s * S) + 1, f=f,
                      value={"fault": "planned-moves", "leader": leader, "partition": partition})
    end = None if end_s is None else NemesisOp(index=2, invoke_time=int(end_s * S), time=int(end_s * S),
                                               f="end-move", value={"fault": "planned-moves"})
    return FaultInterval(fault="planned-moves", start=start, nodes=frozenset({leader}), end=end)


def test_leader_changes_keep_only_changes_of_leader_on_the_history_clock():
    zero = 1_000 * 1_000_000
    records = [{"offset": 30, "wall_ms": 2_000, "type": "PartitionRecord", "data": {"partitionId": 0, "leader": 3}},
               {"offset": 40, "wall_ms": 3_000, "type": "PartitionChangeRecord", "data": {"partitionId": 0, "isr": [3, 2]}},
               {"offset": 41, "wall_ms": 3_500, "type": "PartitionChangeRecord", "data": {"partitionId": 0, "leader": 3}},
               {"offset": 88, "wall_ms": 4_000, "type": "PartitionChangeRecord", "data": {"partitionId": 0, "leader": 1}},
               {"offset": 89, "wall_ms": 4_000, "type": "TopicRecord", "data": {"name": "t"}}]
    changes = attribution.leader_changes(records, zero)
    assert [(c.time_ns, c.offset, c.leader, c.previous) for c in changes[0]] == [(1 * S, 30, 3, None), (3 * S, 88, 1, 3)]
    assert attribution.last_change_before(changes[0], int(2.9 * S)).leader == 3
    assert attribution.last_change_before(changes[0], 3 * S).leader == 1
    assert attribution.last_change_before(changes[0], 0) is None


def test_a_controlled_shutdown_owns_losses_on_every_partition_its_broker_led():
    shutdown = _move("controlled-shutdown", "n1", 0, 40.0, 80.0)
    moved_p1 = attribution.LeaderChange(46 * S, 134, 2, 1)
    iv, how = attribution.attributed_move([shutdown], 1, 47 * S, moved_p1)
    assert (iv, how) == (shutdown, "moved")


def test_an_election_or_reassignment_owns_only_its_own_partition():
    elect = _move("elect-preferred", "n3", 0, 10.0, 30.0)
    moved_p1 = attribution.LeaderChange(20 * S, 90, 2, 3)    # n3 also lost p1's leadership: not this move's doing
    assert attribution.attributed_move([elect], 1, 21 * S, moved_p1) == (elect, "other partition")
    moved_p0 = attribution.LeaderChange(20 * S, 88, 1, 3)
    assert attribution.attributed_move([elect], 0, 21 * S, moved_p0) == (elect, "moved")


def test_a_loss_after_a_move_of_another_leader_or_outside_every_move_is_not_owned():
    reassign = _move("reassign-partition", "n2", 2, 90.0, None)   # still open
    other_leader = attribution.LeaderChange(95 * S, 250, 1, 3)
    assert attribution.attributed_move([reassign], 2, 96 * S, other_leader) == (reassign, "same partition")
    assert attribution.attributed_move([reassign], 2, 80 * S, None) == (None, "outside every move")


def test_epoch_starting_at_the_first_lost_offset_and_held_values():
    replicas = [{"node": "n1", "partition": 1, "epochs": [[0, 0], [1, 56061]], "records": [[0, 7, 0, -1]]},
                {"node": "n2", "partition": 1, "epochs": [[0, 0], [1, 56061]], "records": None},
                {"node": "n1", "partition": 0, "epochs": [[0, 0], [1, 56061]]}]
    assert attribution.epoch_starting_at(replicas, 1, 56061) == ["n1 epoch 1", "n2 epoch 1"]
    assert attribution.epoch_starting_at(replicas, 1, 56062) == []
    assert dict(attribution.held_values(replicas)) == {(1, 7): ["n1"]}
