"""The run's schedule, pure: what each worker does and when faults happen.

Everything is drawn from RNGs derived from the one seed, so the same seed
and config give the same sequence of ops per worker and the same fault
timeline, whatever the threads' timing. The fault timeline keeps to the
fault budget (``fault_budget``: nemesis/budget.py). Values are unique per partition by
construction (a worker's message counter interleaved across workers), so no
shared counter is needed and a value names the send that wrote it.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
from dataclasses import dataclass
from typing import Any, Iterator

from harness.run_config import RunConfig, effective_commit_fraction


@dataclass(frozen=True)
class PlannedOp:
    delay_s: float          # pause before invoking, from the worker's pacing
    f: str
    value: Any
    abort: bool | None = None   # txn: the workload aborts it (recorded on the invoke as "abort")
    asynchronous: bool | None = None  # commit: an async commit (recorded on the invoke as "async")


def worker_rng(seed: int, worker: int) -> random.Random:
    return random.Random(f"kchaos:{seed}:worker:{worker}")


def nemesis_rng(seed: int) -> random.Random:
    return random.Random(f"kchaos:{seed}:nemesis")


def crash_rng(seed: int, worker: int) -> random.Random:
    return random.Random(f"kchaos:{seed}:crash:{worker}")


def crash_times(cfg: RunConfig, worker: int) -> Iterator[float]:
    """Seconds after the workload starts at which worker ``worker`` crashes its
    client (``crash_interval``, each gap drawn uniformly from 0.5x to 1.5x it;
    nothing when it is 0). An RNG of its own, so crashes leave the op stream alone."""
    interval = cfg.workload.crash_interval
    if not interval:
        return
    rng = crash_rng(cfg.seed, worker)
    t = 0.0
    while True:
        t += rng.uniform(0.5 * interval, 1.5 * interval)
        yield t


def max_ops_per_worker(cfg: RunConfig) -> int:
    """An upper bound on the ops a worker can issue within the time limit."""
    return int(cfg.rate / cfg.concurrency * cfg.time_limit * 2) + 10


def worker_ops(cfg: RunConfig, worker: int) -> Iterator[PlannedOp]:
    """The endless op stream of one worker (the runner stops at the deadline)."""
    assert cfg.seed is not None, "schedule needs a fixed seed"
    rng = worker_rng(cfg.seed, worker)
    w = cfg.workload
    per_worker_rate = cfg.rate / cfg.concurrency
    messages_sent = 0
    partitions = list(range(w.partitions))
    if w.mode == "assign":
        k = rng.randint(1, len(partitions))
        yield PlannedOp(0.0, "assign", sorted(rng.sample(partitions, k)))
    else:
        yield PlannedOp(0.0, "subscribe", None)
    if w.transactions:
        yield from _txn_ops(cfg, worker, rng)
    # Subscribe mode: a share commit_fraction of all ops are commits (workloads/group.py),
    # drawn among the non-sends so that send_fraction keeps its meaning.
    commit_fraction = effective_commit_fraction(cfg)
    commit_p = commit_fraction / (1 - w.send_fraction) if commit_fraction and w.send_fraction < 1 else 0.0
    while True:
        # Uniform 0..2x the mean gap: the op rate averages cfg.rate, without lockstep.
        delay = rng.uniform(0, 2 / per_worker_rate)
        if rng.random() < w.send_fraction:
            p = rng.choice(partitions)
            batch = []
            # A pipelined producer's send is one message (workloads/pipelined.py).
            for _ in range(1 if w.producer == "pipelined" else rng.randint(1, w.max_batch)):
                batch.append([p, messages_sent * cfg.concurrency + worker, None])
                messages_sent += 1
            yield PlannedOp(delay, "send", batch)
        elif commit_p and rng.random() < commit_p:
            yield PlannedOp(delay, "commit", None, asynchronous=rng.random() < w.async_commit_probability)
        else:
            yield PlannedOp(delay, "poll", None)


def _txn_ops(cfg: RunConfig, worker: int, rng: random.Random) -> Iterator[PlannedOp]:
    """Transactions (workloads/txn.py): each op a txn of 1..txn_max_ops micro-ops,
    a send (with probability send_fraction, one message, value unique per
    partition as above) or a poll, aborted by choice with abort_probability."""
    w = cfg.workload
    per_worker_rate = cfg.rate / cfg.concurrency
    partitions = list(range(w.partitions))
    messages_sent = 0
    while True:
        delay = rng.uniform(0, 2 / per_worker_rate)
        mops: list[list] = []
        for _ in range(rng.randint(1, w.txn_max_ops)):
            if rng.random() < w.send_fraction:
                mops.append(["send", rng.choice(partitions), messages_sent * cfg.concurrency + worker])
                messages_sent += 1
            else:
                mops.append(["poll"])
        yield PlannedOp(delay, "txn", mops, abort=rng.random() < w.abort_probability)


def min_insync(cfg: RunConfig) -> int:
    """The run topic's min.insync.replicas: the topic's setting, else the brokers', else Kafka's 1."""
    return int(cfg.topic.get("min.insync.replicas", cfg.broker.get("min.insync.replicas", 1)))


def fault_budget(cfg: RunConfig):
    """The random fault mix's budget (nemesis/budget.py): ``nemesis.budget``
    nodes, or by default as many as leave a controller quorum and
    min.insync.replicas replicas usable; ``nemesis.recovery_window`` seconds."""
    from nemesis.budget import Budget, default_nodes
    nodes = cfg.nemesis.budget
    if nodes is None:
        nodes = default_nodes(cfg.nodes, cfg.workload.replication_factor, min_insync(cfg))
    return Budget(nodes=int(nodes), recovery_s=float(cfg.nemesis.recovery_window), n=cfg.nodes)


def fault_plan(cfg: RunConfig) -> list[tuple[float, dict[str, Any]]]:
    if not cfg.nemesis.faults:
        return []
    from nemesis.packages import build_packages, plan
    packages = build_packages(list(cfg.nemesis.faults))
    return plan(packages, cfg.time_limit, cfg.nemesis.interval, nemesis_rng(cfg.seed), fault_budget(cfg))


def digest(cfg: RunConfig) -> str:
    """A fingerprint of the schedule: every worker's ops up to the bound, and the faults."""
    h = hashlib.sha256()
    for worker in range(cfg.concurrency):
        for op in itertools.islice(worker_ops(cfg, worker), max_ops_per_worker(cfg)):
            h.update(json.dumps([worker, round(op.delay_s, 9), op.f, op.value]
                                + ([op.abort] if op.abort is not None else [])
                                + ([op.asynchronous] if op.asynchronous is not None else [])).encode())
        if cfg.workload.crash_interval:
            h.update(json.dumps([worker, "crashes", [round(t, 6) for t in itertools.takewhile(
                lambda t: t <= cfg.time_limit, crash_times(cfg, worker))]]).encode())
    for at, op in fault_plan(cfg):
        h.update(json.dumps([round(at, 6), op], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]
