"""Replaying a run: its executed fault steps and its clients' ops, at their recorded times.

A seed gives the same plan, not the same interleaving: threads, the network
and Kafka decide when each op lands. ``kchaos replay RUN_DIR`` comes as close
as kchaos can to running the same interleaving again (docs/design.md,
"Suites and reproduction"):

* the fault steps the history executed (nemesis invokes with their planned
  values), each at its recorded time since the workload started, become the
  run's explicit plan (``nemesis.steps``); the final phase's heals stay the
  final phase's;
* every worker invokes the client ops its processes invoked, in their order,
  each its recorded gap after the previous one (``workload.replay`` names the
  history; ``schedule.worker_ops`` reads it here). A history records each
  client invoke's ``worker`` (a pipelined producer's sends are placed by their
  values; the replay's pump sends each at its recorded time); in histories
  from before that field, a process numbered below the concurrency is that
  worker's first, and later processes cannot be placed: their ops are left
  out and counted.

Pure functions of the history's ops; the CLI (harness/replay_cli.py) runs it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from history.ops import INVOKE, NEMESIS, SEND, Op, is_client_op, read_history, workload_start_ns
from workloads.op_streams import PlannedOp

SETUP_OPS = ("assign", "subscribe")     # a worker's first op, replayed by the worker loop for each new process


def worker_of(op: Op, concurrency: int) -> int | None:
    """The worker that invoked a client op: its ``worker`` field; for a pipelined
    producer's send (it names its ``producer``; the pump records no worker), its
    value's: the schedule gives worker w the values w, w + concurrency, ...
    (workloads/op_streams.py); else (older histories) the process number when it
    is a worker's first process."""
    worker = op.get("worker")
    if isinstance(worker, int) and not isinstance(worker, bool):
        return worker
    if op.get("producer") is not None and op.get("f") == SEND:
        msgs = op.get("value") or []
        value = msgs[0][1] if msgs and isinstance(msgs[0], list) and len(msgs[0]) > 1 else None
        return value % concurrency if isinstance(value, int) and not isinstance(value, bool) else None
    process = op.get("process")
    return process if is_client_op(op) and process < concurrency else None


def replayed_ops(ops: list[Op], worker: int, concurrency: int) -> list[PlannedOp]:
    """Worker ``worker``'s invokes as planned ops: its setup op first (at its recorded
    time), then every other op its recorded gap after the previous one. Setup ops of
    its later processes are left out: the worker loop replays the first for each."""
    origin = workload_start_ns(ops)
    mine = [op for op in ops if op.get("type") == INVOKE and is_client_op(op) and not op.get("drain")
            and worker_of(op, concurrency) == worker]
    out: list[PlannedOp] = []
    last_ns = origin
    for op in mine:
        if out and op.get("f") in SETUP_OPS:
            continue
        out.append(PlannedOp(max(0.0, (op["time"] - last_ns) / 1e9), op["f"], op.get("value"),
                             abort=True if op.get("abort") else None,
                             asynchronous=True if op.get("async") else None))
        last_ns = op["time"]
    return out


def unplaced_ops(ops: list[Op], concurrency: int) -> int:
    """Client invokes no worker can be found for (older histories' later processes)."""
    return sum(1 for op in ops if op.get("type") == INVOKE and is_client_op(op) and not op.get("drain")
               and worker_of(op, concurrency) is None)


def replayed_steps(ops: list[Op], workload_s: float) -> list[dict[str, Any]]:
    """The fault steps the history invoked during the workload, as ``nemesis.steps``:
    those before ``workload_s`` and before the last client invoke that is not a drain
    (the workers stop before the final phase heals; its heals are the replay's own)."""
    origin = workload_start_ns(ops)
    last_client = max((op["time"] for op in ops if op.get("type") == INVOKE and is_client_op(op)
                       and not op.get("drain")), default=origin)
    steps = []
    for op in ops:
        if op.get("process") != NEMESIS or op.get("type") != INVOKE or op["time"] > last_client:
            continue
        at = (op["time"] - origin) / 1e9
        if 0 <= at < workload_s:
            steps.append({"at": round(at, 3), "f": op["f"], "value": dict(op.get("value") or {})})
    return steps


@functools.lru_cache(maxsize=2)
def _history(path: str) -> tuple[Op, ...]:
    return tuple(read_history(Path(path)))


def worker_stream(history_path: str, worker: int, concurrency: int):
    """``schedule.worker_ops`` of a replay: the recorded ops, then nothing (the
    worker idles until the workload ends)."""
    yield from replayed_ops(list(_history(history_path)), worker, concurrency)
