"""The verdict's shape: what checkers return and what results.json holds.

results.json (written by ``harness``/``checkers``, read by ``reports``)::

    {
      "valid": true | false | "unknown",
      "checker": {"engine": "spark" | "reference",         # the engine that ran
                  "chosen": "configured" | "auto: 1234 ops <= 100000" | ...,   # why that one
                  "master": "local[2]",                   # Spark only
                  "seconds": 12.3,                        # analysis, conversion included
                  "stages": {"convert": s, "start": s, "checks": s, "witnesses": s},  # those that ran
                  "parquet": "converted" | "reused"},     # analyze_run only: history.parquet converted
                                                          # from history.jsonl, or already current
                                                          # (written by the run or an earlier analysis)
      "errors": ["<checker name>: <error text>", ...],     # crashes -> valid "unknown"
      "anomalies": {
        "<type>": {                       # every type below is always present
          "count": 3,
          "allowed": false,
          "reason": null,                 # why it is allowed, when allowed
          "description": "one sentence on what it means",
          "witnesses": [ {WITNESS}, ... ] # at most ``max_witnesses`` (default 20)
        }, ...
      },
      "unclean_elections": [ {"partition": 0, "time": ns, "index": i | null,
                              "offset": metadata log offset | null, "kind": "unclean",
                              "from_leader": 1, "to_leader": 3, "epoch": 7,
                              "last_isr": [1], "last_elr": [] | null, "isr": [3], "elr": [],
                              "lost_writes": 18, "inconsistent_offsets": 0}, ... ],
      "unknown": ["why the verdict is unknown", ...],
      "elections": {"source": "metadata-log" | "samples", "notes": [...],
                    "elections": [every election, kind "isr" | "elr" | "unclean"]},
      "partition_changes": [partition state after each metadata record: partition, time,
                            offset, kind, leader, leader_epoch, isr, elr, last_known_elr, ...],
      "stats": {
        "ops": {"send": {"ok": 10, "fail": 0, "info": 2}, "poll": {...}},
        "acknowledged": 1234, "read": 1200, "drain_complete": true,
        "availability": [{"second": 0, "ok": 10, "fail": 0, "info": 0}, ...],
        "realtime_lag": {"p50_ms": 3.1, "p99_ms": 40.0, "max_ms": 120.0},
        "settled_txns": [{"op": id, "outcome": "committed" | "aborted" | "unknown",   # each info txn
                          "from": "markers" | "reads" | "drain" | null,                # (checkers/settle.py)
                          "evidence": "one sentence"}, ...]                            # only with info txns
      }
    }

A WITNESS is a dict with ``partition``, ``offsets`` (list), ``values`` (list)
and ``ops``: a list of history ops (each with index, time, process, type, f,
value, error, node) that show the anomaly; plus ``context``: the faults
active at that time (nemesis ops not yet healed: f and value) and the last
sample of that partition's leader/ISR/epoch before the first witness op.

Anomaly types (docs/design.md, "What the checkers decide"): inconsistent-offset, duplicate,
nonlinearizable-offset, nonmonotonic-send, nonmonotonic-poll, poll-skip,
lost-write, unseen, phantom-write, unclean-election, elr-election; consumer groups
(checkers/groups.py): commit-backwards, lost-consumption, redelivery, phantom-commit
(checkers/committed_offsets.py); transactions
(checkers/txn.py): aborted-read, precommitted-read, torn-transaction, lost-txn-write,
int-poll-skip, int-nonmonotonic-poll, int-nonmonotonic-send, int-send-skip, G0,
G0-process, G0-realtime, G1c, G1c-process, G1c-realtime (a cycle witness lists its edges in
``cycle``: [{"from": op id, "to": op id, "kind": "ww" | "wr" | "process" | "realtime",
"partition", "offset"}]). A poll-skip or nonmonotonic-poll witness whose chain was taken back
over a txn that did not commit names it in ``after_txn`` (its op id; the txn is among ``ops``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = bool | Literal["unknown"]

ANOMALY_TYPES = (
    "inconsistent-offset",
    "duplicate",
    "nonlinearizable-offset",
    "nonmonotonic-send",
    "nonmonotonic-poll",
    "poll-skip",
    "lost-write",
    "unseen",
    "phantom-write",
    "unclean-election",
    "elr-election",
    "commit-backwards",
    "lost-consumption",
    "redelivery",
    "phantom-commit",
    # transactions (checkers/txn.py)
    "aborted-read",
    "precommitted-read",
    "torn-transaction",
    "lost-txn-write",
    "int-poll-skip",
    "int-nonmonotonic-poll",
    "int-nonmonotonic-send",
    "int-send-skip",
    "G0",
    "G0-process",
    "G0-realtime",
    "G1c",
    "G1c-process",
    "G1c-realtime",
    "hanging-transaction",
    # share groups (checkers/share.py)
    "lost-share-record",
    "share-accepted-redelivered",
    "share-not-redelivered",
    "share-double-delivery",
    "share-count-decrease",
    # progress (checkers/progress_check.py; judged with [checker] min_progress)
    "too-little-progress",
)

# One sentence per type: results.json carries it, reports fall back on it.
DESCRIPTIONS: dict[str, str] = {
    "inconsistent-offset": "one partition offset associated with two or more different values (acks and reads)",
    "duplicate": "one value of a partition found at two or more offsets",
    "nonlinearizable-offset": "send A was acknowledged before send B was invoked, same partition, "
                              "yet offset(A) >= offset(B)",
    "nonmonotonic-send": "successive acknowledged sends of one producer (or process) to a partition, in send "
                         "order, did not get increasing offsets",
    "nonmonotonic-poll": "successive reads of one consumer of a partition (polls and transactions' reads), "
                         "while it stayed assigned, did not have increasing offsets (after a transaction "
                         "that did not commit, counted from where the consumer stood before it)",
    "poll-skip": "a consumer's successive reads of a partition (polls and transactions' reads), while it "
                 "stayed assigned, jumped over offsets known to hold values (after a transaction that did "
                 "not commit, counted from where the consumer stood before it)",
    "lost-write": "an acknowledged send never read, although reads of its partition reached its offset "
                  "or the final drain completed",
    "unseen": "an acknowledged send never read, and no read of its partition reached its offset: "
              "nobody looked, so the verdict cannot be valid",
    "phantom-write": "a send that failed (certainly did not happen) whose value was read",
    "unclean-election": "a partition leader changed to a broker outside the partition's previous ISR and "
                        "eligible leader replicas (from the controller's metadata log; else outside the "
                        "last sampled ISR)",
    "elr-election": "a partition leader elected from its eligible leader replicas (KIP-966): clean by design, "
                    "acks=all writes were refused while the ISR was below min.insync.replicas",
    "commit-backwards": "a consumer group's ok offset commit for a partition, invoked after another ok commit "
                        "of that partition completed, committed a lower offset (no info commit of the group, which "
                        "may have landed late, explains it)",
    "lost-consumption": "a consumer group committed an offset past a value no member of the group was ever "
                        "delivered",
    "redelivery": "a group member's first read of a partition it was assigned lay below an offset the group "
                  "had committed before the assignment began",
    "phantom-commit": "a consumer group's committed offset for a partition, read by OffsetFetch, "
                      "changed between two reads to a value no commit of the group could have written then",
    "aborted-read": "a read_committed read saw a value written by an aborted (fail) transaction (G1a)",
    "precommitted-read": "a read_committed read saw a transaction's value before the transaction committed: "
                         "its own read, or a read that completed before the transaction was invoked",
    "torn-transaction": "a committed transaction (or an unknown one whose partitions all drained) has some "
                        "writes in the completed final drain and others missing from it",
    "lost-txn-write": "a write of a committed transaction never read, although reads of its partition reached "
                      "its offset or the final drain completed",
    "int-poll-skip": "within one transaction, successive reads of a partition jumped over offsets known to "
                     "hold values it could see",
    "int-nonmonotonic-poll": "within one transaction, successive reads of a partition did not have increasing "
                             "offsets",
    "int-nonmonotonic-send": "within one transaction, successive writes to a partition did not get increasing "
                             "offsets",
    "int-send-skip": "within one transaction, other values landed between successive writes to a partition",
    "G0": "a cycle of committed transactions over write-write (log order) dependencies",
    "G0-process": "a cycle of committed transactions over write-write and process-order dependencies",
    "G0-realtime": "a cycle of committed transactions over write-write and real-time (and process) order",
    "G1c": "a cycle of committed transactions over write-read dependencies (read_committed reads)",
    "G1c-process": "a cycle of committed transactions over write-read and process-order dependencies",
    "G1c-realtime": "a cycle of committed transactions over write-read and real-time (and process) order",
    "hanging-transaction": "transactional data on a partition with no marker of its producer after it to the "
                           "log end, in Kafka's record, read after its coordinator should have aborted it: the "
                           "partition's last stable offset stays there and read_committed consumers stall "
                           "(KIP-664)",
    "lost-share-record": "an acknowledged send the share group never accepted (nor rejected, nor archived after "
                         "the delivery-attempt limit), although the run's end says the group had nothing left "
                         "to deliver",
    "share-accepted-redelivered": "a share-group member was delivered a record after Kafka confirmed another "
                                  "acknowledgement accepting it",
    "share-not-redelivered": "a record released (confirmed) or whose lock certainly expired, below the "
                             "delivery-attempt limit, was next delivered with no higher delivery count, or "
                             "never again although the run's end says the group had nothing left",
    "share-double-delivery": "a record was delivered to a second share-group member while the first certainly "
                             "still held its acquisition lock",
    "share-count-decrease": "a record was delivered with a lower delivery count than an earlier delivery of it",
    "too-little-progress": "during a fault, a partition the fault did not impair (not named by it, its leader "
                           "not on a faulted node, its ISR not below min.insync.replicas) acknowledged writes "
                           "at less than [checker] min_progress times its rate outside faults",
}


@dataclass
class CheckResult:
    valid: Verdict
    anomalies: dict[str, dict[str, Any]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    unclean_elections: list[dict[str, Any]] = field(default_factory=list)
    checker: dict[str, Any] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)          # why the verdict is unknown
    elections: dict[str, Any] = field(default_factory=dict)   # source, notes, every election
    partition_changes: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "checker": self.checker,
            "errors": self.errors,
            "anomalies": self.anomalies,
            "unclean_elections": self.unclean_elections,
            "unknown": self.unknown,
            "elections": self.elections,
            "partition_changes": self.partition_changes,
            "stats": self.stats,
        }
