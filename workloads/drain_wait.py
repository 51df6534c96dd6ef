"""Before the final drain: is every partition ready to be read to its end?

The runner waits (``wait_for_drain``, at most ``drain_wait`` s) until every
partition is ready (``partition_ready``): it has a leader, no transaction is
open on it, and either its high watermark covers the highest offset any client
saw acknowledged on it, or every replica is back in its ISR. Pure but for the
clock and the two callables it polls (``workloads.drain.WatermarkProbe`` and
the controller's partition states); the drain itself is ``workloads.drain``.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping

#: (log start offset, high watermark, last stable offset or None when it could
#: not be had) of a partition, or None when unknown.
Watermark = tuple[int, int, int | None] | None


def settle_seconds(recovery: float, faults_ran: bool, healed: Mapping[str, str]) -> float:
    """Seconds the cluster settles after the pre-drain wait, before the drain:
    ``recovery``, or none when no fault ever started and the final heal found
    every node as it should be ("ok": nothing stopped, skewed or restarted).
    There is then nothing to recover from, and the settling was only time the
    user waited (5 s of every faults-off run)."""
    calm = not faults_ran and all(status == "ok" for status in healed.values())
    return 0.0 if calm else recovery


def _acked_text(m: int | None) -> str:
    return "no acknowledged write" if m is None else f"acknowledged up to offset {m}"


def partition_ready(state: Any, watermark: Watermark, max_acked: int | None) -> tuple[bool, str]:
    """One partition: (ready, why). ``state`` has ``leader`` (None: no leader),
    ``isr`` and ``replicas`` (broker.cluster.PartitionState, or any object
    with those attributes), or is None when the metadata did not list it.
    Ready: a leader, no open transaction (the last stable offset, when known,
    has reached the high watermark: the drain reads read_committed and cannot
    pass an open transaction), and the high watermark >= 1 + ``max_acked``
    (the highest offset a client saw acknowledged, None for none) or every
    replica in ISR."""
    if state is None:
        return False, "not in the metadata"
    if state.leader is None:
        return False, "has no leader"
    high = None if watermark is None else watermark[1]
    stable = None if watermark is None else watermark[2]
    if high is not None and stable is not None and stable < high:
        return False, (f"a transaction is open: last stable offset {stable} < high watermark {high} "
                       f"(its coordinator aborts it after transaction.timeout.ms)")
    if high is not None and (max_acked is None or high >= max_acked + 1):
        if max_acked is None:
            return True, f"high watermark {high}, no acknowledged write"
        return True, f"high watermark {high} >= {max_acked + 1} ({_acked_text(max_acked)})"
    isr, replicas = set(state.isr or ()), set(state.replicas or ())
    if replicas and replicas <= isr:
        return True, "all replicas in ISR"
    hw = "high watermark unknown" if high is None else f"high watermark {high} < {max_acked + 1}"
    return False, (f"{hw} ({_acked_text(max_acked)}), ISR {sorted(isr)} of replicas {sorted(replicas)}")


def _evaluate(states: Iterable[Any], watermarks: Mapping[int, Watermark], max_acked: Mapping[int, int],
              partitions: Iterable[int] | None) -> dict[int, tuple[bool, str]]:
    by_p = {int(s.partition): s for s in states}
    parts = sorted(by_p) if partitions is None else [int(p) for p in partitions]
    return {p: partition_ready(by_p.get(p), watermarks.get(p), max_acked.get(p)) for p in parts}


def drain_ready(states: Iterable[Any], watermarks: Mapping[int, Watermark], max_acked: Mapping[int, int],
                partitions: Iterable[int] | None = None) -> tuple[bool, dict[int, str]]:
    """Every partition ready to be drained (``partition_ready``)? Returns
    (all ready, {partition: why}). ``states`` are the partitions' metadata
    (objects with ``partition``, ``leader``, ``isr``, ``replicas``);
    ``watermarks`` maps a partition to (log start, high watermark, last
    stable offset) or None;
    ``max_acked`` a partition to its highest acknowledged offset (absent:
    none); ``partitions`` defaults to those the states name. Pure."""
    verdicts = _evaluate(states, watermarks, max_acked, partitions)
    return bool(verdicts) and all(ok for ok, _ in verdicts.values()), {p: why for p, (_, why) in verdicts.items()}


def wait_for_drain(states: Callable[[], Iterable[Any]], watermarks: Callable[[list[int]], Mapping[int, Watermark]],
                   max_acked: Mapping[int, int], partitions: int | Iterable[int], timeout_s: float, *,
                   interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> dict[int, dict[str, Any]]:
    """Poll ``states()`` and ``watermarks(partitions)`` until ``drain_ready``
    holds or ``timeout_s`` has passed (checked at least once). Returns, per
    partition, the ``wait`` record of its drain ops: ``{"waited_s": float,
    "reached": bool, "why": str}``; on a timeout ``why`` names every
    partition that was not ready (and, if it was ready, this partition's own
    state)."""
    parts = list(range(partitions)) if isinstance(partitions, int) else [int(p) for p in partitions]
    start = clock()
    deadline = start + max(0.0, timeout_s)
    while True:
        try:
            verdicts = _evaluate(list(states()), dict(watermarks(parts)), max_acked, parts)
        except Exception as exc:  # a broker still coming back: ask again
            verdicts = {p: (False, f"metadata unavailable ({type(exc).__name__}: {exc})") for p in parts}
        ready = bool(verdicts) and all(ok for ok, _ in verdicts.values())
        if ready or clock() >= deadline:
            break
        sleep(max(0.0, min(interval_s, deadline - clock())))
    waited = round(clock() - start, 3)
    if ready:
        return {p: {"waited_s": waited, "reached": True, "why": why} for p, (_, why) in verdicts.items()}
    summary = "timeout: " + "; ".join(f"partition {p} {why}" for p, (ok, why) in verdicts.items() if not ok)
    return {p: {"waited_s": waited, "reached": False, "why": summary if not ok else f"{summary} (partition {p}: {why})"}
            for p, (ok, why) in verdicts.items()}
