"""The share workload around its client (workloads/share.py): the op stream a
member walks, the config it needs, the group settings made before the
workload starts, and the share drain at the run's end (docs/design.md,
"Share groups").

* ``share_ops``: sends (``send_fraction``), else a share-poll followed by a
  share-ack of what it delivered, sometimes a share-hold between them
  (``share_hold_probability``; the member holds past its lock: lock expiry)
  and a share-commit after (``commit_fraction`` of all ops, drawn among the
  non-sends; harness/client_config.py says its default).
* ``config_problem``: what is wrong with a share config, in one line, before
  any cluster starts (a Kafka without share groups, a lock below the
  brokers' minimum ...).
* ``set_up_group``: the group's ``share.auto.offset.reset`` (earliest: a
  share group starts at the log end by default, and would never deliver what
  was sent before its first member fetched), record lock, delivery limit and
  session timeout.
* ``share_drain``: after faults heal, a member in explicit mode polls and
  accepts until the group delivers nothing for longer than a lock and a
  session (every lock a member left behind has run out, and every member that
  never left is gone, so the drain is assigned every partition), or the drain
  timeout; its ``share-end`` says which.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import time
from typing import Any, Callable, Iterator

from history.ops import (INFO, INVOKE, SEND, SHARE_ACK, SHARE_COMMIT, SHARE_END, SHARE_HOLD, SHARE_POLL,
                         SHARE_SUBSCRIBE)
from workloads.client import ClientContext
from workloads.op_streams import PlannedOp, StreamSpec
from workloads.share import ShareClient

ACK_MODES = ("explicit", "implicit")
HOLD_EXTRA_S = 3.0          # a hold outlasts the lock by this much (the broker's timer runs late)
DRAIN_QUIET_EXTRA_S = 3.0   # the share drain's quiet outlasts a lock by this much
DRAIN_POLL_TIMEOUT_S = 0.5
# Kafka's defaults for the group settings' bounds (broker settings group.share.*; 4.2+)
BOUNDS = {"lock": ("group.share.min.record.lock.duration.ms", 15000, "group.share.max.record.lock.duration.ms", 60000),
          "limit": ("group.share.min.delivery.count.limit", 2, "group.share.max.delivery.count.limit", 10),
          "session": ("group.share.min.session.timeout.ms", 45000, "group.share.max.session.timeout.ms", 60000)}


def share_subscribe_op(spec: StreamSpec, rng: random.Random) -> PlannedOp:
    """Joining the share group (nothing drawn)."""
    return PlannedOp(0.0, SHARE_SUBSCRIBE, None)


def hold_seconds(workload: Any) -> float:
    return workload.share_lock_ms / 1000 + HOLD_EXTRA_S


def share_ops(spec: StreamSpec, rng: random.Random) -> Iterator[PlannedOp]:
    """The member's ops after its subscribe (module docstring); values as in workloads/op_streams.py."""
    w = spec.workload
    partitions = list(range(w.partitions))
    sent = 0
    commit_p = spec.commit_fraction / (1 - w.send_fraction) if w.send_fraction < 1 else 0.0
    while True:
        delay = rng.uniform(0, 2 / spec.per_worker_rate)
        if rng.random() < w.send_fraction:
            p = rng.choice(partitions)
            batch = []
            for _ in range(rng.randint(1, w.max_batch)):
                batch.append([p, sent * spec.concurrency + spec.worker, None])
                sent += 1
            yield PlannedOp(delay, SEND, batch)
            continue
        yield PlannedOp(delay, SHARE_POLL, None)
        if rng.random() < w.share_hold_probability:
            yield PlannedOp(0.0, SHARE_HOLD, hold_seconds(w))
        yield PlannedOp(0.0, SHARE_ACK, None)
        if rng.random() < commit_p:
            yield PlannedOp(0.0, SHARE_COMMIT, None)


def make_share_client(workload: Any, seed: int, worker: int) -> ShareClient:
    """A member of worker ``worker``; its marks are drawn from its own seeded RNG."""
    return ShareClient(workload.share_ack_mode, workload.share_lock_ms, workload.share_delivery_limit,
                       workload.share_release_probability, workload.share_reject_probability,
                       random.Random(f"kchaos:{seed}:share:{worker}"))


def config_problem(workload: Any, has_share_groups: bool, kafka_version: str, broker: dict[str, Any],
                   features: dict[str, int]) -> str | None:
    """One line on what keeps the share config from running, or None."""
    w = workload
    if not has_share_groups:
        return (f'mode = "share" needs share groups (KIP-932, on by default from Kafka 4.2); Kafka '
                f"{kafka_version} has none")
    if features.get("share.version") == 0:
        return 'mode = "share" needs share groups; [broker_features] "share.version" = 0 turns them off'
    if w.share_ack_mode not in ACK_MODES:
        return f"share_ack_mode must be one of {', '.join(ACK_MODES)}, got {w.share_ack_mode!r}"
    if w.client != "librdkafka":
        return f'mode = "share" runs on client = "librdkafka" only, got {w.client!r}'
    probs = {"share_release_probability": w.share_release_probability,
             "share_reject_probability": w.share_reject_probability,
             "share_hold_probability": w.share_hold_probability}
    for name, p in probs.items():
        if not 0 <= p <= 1:
            return f"{name} must be between 0 and 1, got {p:g}"
    if w.share_release_probability + w.share_reject_probability > 1:
        return "share_release_probability + share_reject_probability must be at most 1"
    for what, field, value in (("lock", "share_lock_ms", w.share_lock_ms),
                               ("limit", "share_delivery_limit", w.share_delivery_limit),
                               ("session", "share_session_timeout_ms", w.share_session_timeout_ms)):
        lo_key, lo, hi_key, hi = BOUNDS[what]
        lo, hi = int(broker.get(lo_key, lo)), int(broker.get(hi_key, hi))
        if not lo <= value <= hi:
            return (f'{field} = {value} is outside the brokers\' bounds {lo}..{hi} ([broker] "{lo_key}" and '
                    f'"{hi_key}")')
    if w.share_session_timeout_ms < w.share_lock_ms:
        return (f"share_session_timeout_ms {w.share_session_timeout_ms} is below share_lock_ms {w.share_lock_ms}: "
                "a member's session would end, releasing its records, before their locks run out")
    return None


def set_up_group(workload: Any, ctx: ClientContext, seed: int, log: logging.Logger) -> None:
    """The group's settings (module docstring), retried for up to 60 s."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = {"share.auto.offset.reset": "earliest",
               "share.record.lock.duration.ms": str(workload.share_lock_ms),
               "share.delivery.count.limit": str(workload.share_delivery_limit),
               "share.session.timeout.ms": str(workload.share_session_timeout_ms)}
    admin = AdminClient({"bootstrap.servers": ctx.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, ctx.group_id, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()])
    deadline = time.monotonic() + 60
    while True:
        try:
            for fut in admin.incremental_alter_configs([resource], request_timeout=10).values():
                fut.result()
            log.info("share group %s: %s", ctx.group_id, entries)
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"share group {ctx.group_id}: setting {entries} failed: {exc}") from exc
            time.sleep(1)


def share_drain(workload: Any, ctx: ClientContext, record: Callable[[dict], Any], log: logging.Logger,
                timeout_s: float) -> bool:
    """The share drain (module docstring) as process ``ctx.process``; whether it completed."""
    ctx = dataclasses.replace(ctx, poll_timeout_s=DRAIN_POLL_TIMEOUT_S)
    client = ShareClient("explicit", workload.share_lock_ms, workload.share_delivery_limit, 0.0, 0.0,
                         random.Random(0), drain=True)
    client.open(ctx)
    q = ctx.process

    def run(f: str, value: Any = None) -> dict:
        fields = client.op_fields(f)
        record({"process": q, "type": INVOKE, "f": f, "value": value, **fields})
        try:
            out = client.invoke({"f": f, "value": value})
        except Exception as exc:   # noqa: BLE001 - recorded, and the drain is not complete
            out = {"type": INFO, "f": f, "value": value, "error": f"crash: {exc!r}", **fields}
        events = out.pop("events", None) or client.take_events()
        record({"process": q, **out})
        for ev in events:
            record({**ev, "process": q})
        return out

    # Quiet past a lock (locks members left behind run out) and past a session (members that
    # never left are removed, so the drain is assigned every partition: the group's assignor
    # shares partitions among the members it still counts).
    quiet_s = max(workload.share_lock_ms, workload.share_session_timeout_ms) / 1000 + DRAIN_QUIET_EXTRA_S
    deadline = time.monotonic() + timeout_s
    complete, why = False, f"timed out after {timeout_s:g} s"
    try:
        if run(SHARE_SUBSCRIBE, ctx.topic)["type"] != "ok":
            why = "the share drain could not subscribe"
        else:
            quiet_since: float | None = None
            while time.monotonic() < deadline:
                out = run(SHARE_POLL)
                if out["type"] == "ok" and out.get("value"):
                    run(SHARE_ACK)
                    run(SHARE_COMMIT)
                    quiet_since = None
                elif out["type"] == "ok" and not out.get("error"):
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since >= quiet_s:
                        complete, why = True, f"the group delivered nothing for {quiet_s:g} s"
                        break
                else:
                    quiet_since = None
    finally:
        client.close()
        for ev in client.take_events():
            record({**ev, "process": q})
        record({"process": q, "type": "ok", "f": SHARE_END, "value": {"complete": complete, "why": why},
                **client.op_fields(SHARE_POLL)})
    log.info("share drain: %s (%s)", "complete" if complete else "not complete", why)
    return complete
