"""The run's schedule, pure: what each worker does and when faults happen.

Everything is drawn from RNGs derived from the one seed, so the same seed
and config give the same sequence of ops per worker and the same fault
timeline, whatever the threads' timing. Each worker's ops are its workload
kind's stream (workloads/op_streams.py); the fault timeline keeps to the
fault budget (``fault_budget``: nemesis/budget.py).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import random
from typing import Any, Iterator

from harness import replay
from harness.client_config import effective_commit_fraction
from harness.layout_config import run_ids
from harness.run_config import RunConfig
from nemesis.budget import Budget, default_broker_nodes, default_controller_nodes, default_nodes, with_standing
from nemesis.packages import build_packages, plan
from nemesis.roles import with_targets
from nemesis.upgrade import bind_upgrade
from workloads.kinds import kind_of
from workloads.op_streams import PlannedOp, StreamSpec


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
    """The endless op stream of one worker (the runner stops at the deadline):
    its workload kind's (workloads/kinds.py), drawn from the worker's RNG; in a
    replay, the history's recorded ops (finite)."""
    assert cfg.seed is not None, "schedule needs a fixed seed"
    if cfg.workload.replay:                    # kchaos replay: the recorded ops of a history
        return replay.worker_stream(cfg.workload.replay, worker, cfg.concurrency)
    spec = StreamSpec(cfg.workload, worker, cfg.concurrency, cfg.rate / cfg.concurrency,
                      effective_commit_fraction(cfg))
    return kind_of(cfg.workload).ops(spec, worker_rng(cfg.seed, worker))


def min_insync(cfg: RunConfig) -> int:
    """The run topic's min.insync.replicas: the topic's setting, else the brokers', else Kafka's 1."""
    return int(cfg.topic.get("min.insync.replicas", cfg.broker.get("min.insync.replicas", 1)))


def fault_budget(cfg: RunConfig) -> Budget:
    """The random fault mix's budget (nemesis/budget.py): ``nemesis.budget``
    nodes, or by default as many as leave a controller quorum and
    min.insync.replicas replicas usable; ``nemesis.recovery_window`` seconds;
    holding the standing cost of the chosen packages armed for the whole
    workload (the proxy's rules)."""
    nodes = cfg.nemesis.budget
    if cfg.controllers:  # separate quorums: brokers keep min.insync.replicas, controllers a majority
        if nodes is None:
            nodes = default_broker_nodes(cfg.workload.replication_factor, min_insync(cfg))
        budget = Budget(nodes=int(nodes), recovery_s=float(cfg.nemesis.recovery_window), n=cfg.nodes,
                        controllers=cfg.controllers, controller_nodes=default_controller_nodes(cfg.controllers))
    else:
        if nodes is None:
            nodes = default_nodes(cfg.nodes, cfg.workload.replication_factor, min_insync(cfg))
        budget = Budget(nodes=int(nodes), recovery_s=float(cfg.nemesis.recovery_window), n=cfg.nodes)
    return with_standing(budget, build_packages(list(cfg.nemesis.faults)), cfg.nemesis)


def fault_plan(cfg: RunConfig) -> list[tuple[float, dict[str, Any]]]:
    """(seconds after the workload starts, op), sorted: ``nemesis.steps`` when the config
    gives them (kchaos shrink writes such configs), else drawn from the seed."""
    if not cfg.nemesis.faults:
        return []
    if cfg.nemesis.steps:
        return sorted(((float(s["at"]), {"f": s["f"], "value": dict(s.get("value") or {})})
                       for s in cfg.nemesis.steps), key=lambda step: step[0])
    packages = [bind_upgrade(with_targets(p, cfg.nemesis.targets, run_ids(cfg)), cfg.upgrade_to, cfg.nodes,
                             cfg.controllers) for p in build_packages(list(cfg.nemesis.faults))]
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
