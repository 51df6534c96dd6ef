"""The op streams a worker walks, one per workload kind (workloads/kinds.py).

Pure: every op is drawn from the RNG given (harness/schedule.py derives it
from the run's seed and the worker), so the same seed and config give the same
ops whatever the threads' timing. Values are unique per partition by
construction (a worker's message counter interleaved across workers), so no
shared counter is needed and a value names the send that wrote it.

A stream's first op sets the consumer up (``assign`` or ``subscribe``); the
runner replays it for every new process of the worker.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True)
class PlannedOp:
    delay_s: float          # pause before invoking, from the worker's pacing
    f: str
    value: Any
    abort: bool | None = None   # txn: the workload aborts it (recorded on the invoke as "abort")
    asynchronous: bool | None = None  # commit: an async commit (recorded on the invoke as "async")

    def invoke_fields(self) -> dict[str, Any]:
        """What the op's invoke records besides ``f`` and ``value``: the
        schedule's choices that the history must show (an aborted txn, an
        async commit)."""
        fields: dict[str, Any] = {}
        if self.abort:
            fields["abort"] = True
        if self.asynchronous:
            fields["async"] = True
        return fields


@dataclass(frozen=True)
class StreamSpec:
    """What a stream needs of the run config besides the RNG."""

    workload: Any               # the run config's [workload] table (harness/run_config.py WorkloadConfig)
    worker: int
    concurrency: int            # workers in the run: values interleave across them
    per_worker_rate: float      # ops per second this worker aims at
    commit_fraction: float = 0.0  # the share of all ops that are commits (group members)


def assign_op(spec: StreamSpec, rng: random.Random) -> PlannedOp:
    """An assignment of 1..P partitions, drawn."""
    partitions = list(range(spec.workload.partitions))
    k = rng.randint(1, len(partitions))
    return PlannedOp(0.0, "assign", sorted(rng.sample(partitions, k)))


def subscribe_op(spec: StreamSpec, rng: random.Random) -> PlannedOp:
    """Joining the group (nothing drawn)."""
    return PlannedOp(0.0, "subscribe", None)


def home_partitions(partitions: int, worker: int, concurrency: int) -> list[int]:
    """The partitions worker ``worker`` sends to: with at least as many workers
    as partitions, one (``worker % partitions``); with fewer, every
    ``concurrency``-th. Every partition has a sender, and a fault that stops one
    partition stalls only its own workers: a worker blocked on a send to a cut
    leader would otherwise hold up its sends to every other partition
    (docs/design.md, "Progress where a fault does not reach")."""
    first = worker % partitions % concurrency if partitions and concurrency else 0
    return [p for p in range(partitions) if p % max(1, concurrency) == first]


def queue_ops(spec: StreamSpec, rng: random.Random, one_message: bool) -> Iterator[PlannedOp]:
    """Sends (``send_fraction`` of the ops), commits (``commit_fraction`` of
    all ops, drawn among the non-sends so that send_fraction keeps its
    meaning; ``async_commit_probability`` of them asynchronous) and polls.
    A send is 1..max_batch messages to one of the worker's home partitions
    (``home_partitions``), or one message with ``one_message`` (a pipelined
    producer's: workloads/pipelined.py). Polls read what the assign op drew."""
    w = spec.workload
    partitions = home_partitions(w.partitions, spec.worker, spec.concurrency)
    messages_sent = 0
    commit_fraction = spec.commit_fraction
    commit_p = commit_fraction / (1 - w.send_fraction) if commit_fraction and w.send_fraction < 1 else 0.0
    while True:
        # Uniform 0..2x the mean gap: the op rate averages the run's rate, without lockstep.
        delay = rng.uniform(0, 2 / spec.per_worker_rate)
        if rng.random() < w.send_fraction:
            p = rng.choice(partitions)
            batch = []
            for _ in range(1 if one_message else rng.randint(1, w.max_batch)):
                batch.append([p, messages_sent * spec.concurrency + spec.worker, None])
                messages_sent += 1
            yield PlannedOp(delay, "send", batch)
        elif commit_p and rng.random() < commit_p:
            yield PlannedOp(delay, "commit", None, asynchronous=rng.random() < w.async_commit_probability)
        else:
            yield PlannedOp(delay, "poll", None)


def txn_ops(spec: StreamSpec, rng: random.Random) -> Iterator[PlannedOp]:
    """Transactions (workloads/txn.py): each op a txn of 1..txn_max_ops micro-ops,
    a send (with probability send_fraction, one message, value unique per
    partition as above) or a poll, aborted by choice with abort_probability."""
    w = spec.workload
    partitions = list(range(w.partitions))
    messages_sent = 0
    while True:
        delay = rng.uniform(0, 2 / spec.per_worker_rate)
        mops: list[list] = []
        for _ in range(rng.randint(1, w.txn_max_ops)):
            if rng.random() < w.send_fraction:
                mops.append(["send", rng.choice(partitions), messages_sent * spec.concurrency + spec.worker])
                messages_sent += 1
            else:
                mops.append(["poll"])
        yield PlannedOp(delay, "txn", mops, abort=rng.random() < w.abort_probability)
