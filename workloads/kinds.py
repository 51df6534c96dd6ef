"""Workload kinds: what a run's workers do, one registry entry per kind.

Like the fault packages (nemesis/packages.py), each kind says in one place
everything the runner needs, so the runner asks ``kind_of(cfg.workload)`` and
never which kind it runs (docs/design.md, "Extending kchaos"):

* ``claims``: the ``[workload]`` fields and values that choose it. Exactly
  one kind claims each config ``harness/run_config.validate`` accepts.
* ``make_client``: the client (workloads/client.py ``Client``) a worker opens
  for each of its processes.
* ``ops``: the op stream each worker walks (workloads/op_streams.py); its first
  op sets the consumer up. How an op is decorated in the history is the
  stream's (``PlannedOp.invoke_fields``: abort, async) and the client's
  (``Client.op_fields``: group, isolation; ``take_events``: rebalances).
* ``make_pump``: when set, the schedule's sends go to this sender
  (``SendPump``), one message each and as fast as it takes them, and the
  worker's op loop skips them.
* ``set_up``: a step before the workload's clock starts, given a client
  context, the seed and the run's logger to say what it did.
* ``check_settings``: an offline check of the settings, beyond the producer's
  and consumer's, that the kind's clients use (raises ValueError, one line).
* ``finish``: a step of the final phase, after faults heal and before the
  drain, given a client context (process ``FINISH_PROCESS``), the recorder and
  the run's logger and the drain timeout (the share drain: workloads/share_plan.py).
* ``bind``: the fields above that depend on the ``[workload]`` table, made
  from it when ``kind_of`` hands the kind out (the share group's settings).
* ``group_members``: its clients are members of the run's consumer group:
  each runs the rebalance protocol the config gives it (``kind_of`` wraps
  them: workloads/group.py ``member_clients``), and the runner reads the
  group's committed offsets at each sample and after the drain
  (harness/samplers.py) for the phantom-commit check.
* ``checks``: the anomaly types (checkers/result.py) its histories can show;
  config.json records them with the kind's name (``stored``). They say what
  a report may expect: the checkers run every check whatever the kind.

A new kind is one more entry in ``KINDS`` plus its client module.

``[workload] client`` picks the Kafka client library the kind's clients use
(``CLIENTS``): librdkafka in-process (the entries below), or the official
Java client in a driver process (workloads/java_client.py ``JAVA_KINDS``,
over the client protocol of docs/design.md), or an outside driver speaking
that protocol (``external``: the same kinds, ``JAVA_KINDS``' clients). ``kind_of`` hands the runner
the kind with that library's clients, so the runner never asks which.
"""
from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from history.writer import SendRow
from workloads.client import Client, ClientContext, SendPump
from workloads.group import GroupClient, member_clients
from workloads.java_client import JAVA_KINDS, java_wait_for_coordinator
from workloads.java_pipelined import driver_pump
from workloads.op_streams import PlannedOp, StreamSpec, assign_op, queue_ops, subscribe_op, txn_ops
from workloads.pipelined import PipelinedProducer
from workloads.queue import QueueClient
from workloads.share_plan import make_share_client, set_up_group, share_drain, share_ops, share_subscribe_op
from workloads.txn import TxnClient, check_txn_settings, transactional_id, wait_for_coordinator

# Anomaly types by what a history needs for them (docs/design.md, "What the checkers decide").
ELECTION_CHECKS = ("unclean-election", "elr-election")
# Any acknowledged write and any read: plain sends' and committed txns' alike; poll chains
# include the final drain's.
READ_CHECKS = ("inconsistent-offset", "duplicate", "nonlinearizable-offset", "nonmonotonic-send",
               "nonmonotonic-poll", "poll-skip", "unseen")
# plain sends; too-little-progress: their acks during faults (checkers/progress.py)
SEND_CHECKS = ("lost-write", "phantom-write", "too-little-progress")
# group members' commits; phantom-commit also the committed-offset samples
GROUP_CHECKS = ("commit-backwards", "lost-consumption", "redelivery", "phantom-commit")
TXN_CHECKS = ("aborted-read", "precommitted-read", "torn-transaction", "lost-txn-write", "int-poll-skip",
              "int-nonmonotonic-poll", "int-nonmonotonic-send", "int-send-skip", "G0", "G0-process",
              "G0-realtime", "G1c", "G1c-process", "G1c-realtime", "hanging-transaction")
SHARE_CHECKS = ("lost-share-record", "share-accepted-redelivered", "share-not-redelivered",
                "share-double-delivery", "share-count-decrease")          # share groups (checkers/share.py)
#: The process a kind's ``finish`` step records as: below the drain's (workloads/drain.py DRAIN_PROCESS_BASE).
FINISH_PROCESS = 999_999


@dataclass(frozen=True)
class PumpHooks:
    """What a ``SendPump`` records through and draws its names from (the runner's)."""

    record: Callable[[dict], Any]
    record_many: Callable[[list[dict]], Any]
    record_sends: Callable[[list[SendRow], str | None], Any]
    new_process: Callable[[], int]
    new_name: Callable[[], str]


@dataclass(frozen=True)
class WorkloadKind:
    """One kind of workload (the module docstring says what each field means)."""

    name: str
    summary: str
    claims: Mapping[str, Any]
    make_client: Callable[[Any, int, int], Client]          # (workload, seed, worker)
    ops: Callable[[StreamSpec, random.Random], Iterator[PlannedOp]]
    checks: tuple[str, ...]
    make_pump: Callable[[ClientContext, Any, PumpHooks], SendPump] | None = None   # (ctx, workload, hooks)
    set_up: Callable[[ClientContext, int, logging.Logger], None] | None = None    # (ctx, seed, run log)
    check_settings: Callable[[ClientContext], None] | None = None
    finish: Callable[[ClientContext, Callable[[dict], Any], logging.Logger, float], Any] | None = None
    bind: Callable[[Any], dict[str, Any]] | None = None     # workload -> fields to replace
    group_members: bool = False

    def claims_config(self, workload: Any) -> bool:
        return all(getattr(workload, key) == value for key, value in self.claims.items())

    def stored(self) -> dict[str, Any]:
        """The kind as config.json records it (``workload_kind``)."""
        return {"name": self.name, "summary": self.summary, "checks": list(self.checks)}


def _stream(setup: Callable[[StreamSpec, random.Random], PlannedOp],
            body: Callable[[StreamSpec, random.Random], Iterator[PlannedOp]]):
    """The setup op, then the body, both drawn from the one RNG in that order."""
    def ops(spec: StreamSpec, rng: random.Random) -> Iterator[PlannedOp]:
        yield setup(spec, rng)
        yield from body(spec, rng)
    return ops


def _batches(spec: StreamSpec, rng: random.Random) -> Iterator[PlannedOp]:
    return queue_ops(spec, rng, one_message=False)


def _single_messages(spec: StreamSpec, rng: random.Random) -> Iterator[PlannedOp]:
    return queue_ops(spec, rng, one_message=True)


def _pipelined_producer(ctx: ClientContext, workload: Any, hooks: PumpHooks) -> SendPump:
    return PipelinedProducer(ctx, workload.in_flight, hooks.record, hooks.new_process, hooks.new_name,
                             record_many=hooks.record_many, record_sends=hooks.record_sends)


def _wait_for_coordinator(ctx: ClientContext, seed: int, log: logging.Logger) -> None:
    """The transaction coordinator answers before the clock starts (workloads/txn.py)."""
    try:
        log.info("transaction coordinator ready after %.1f s", wait_for_coordinator(ctx, seed))
    except Exception as exc:  # the workload's own txns will say what fails
        log.warning("transaction coordinator not ready after 60 s: %s", exc)


def _bind_share(workload: Any) -> dict[str, Any]:
    """The share group's settings and drain, from the [workload] table."""
    return {"set_up": lambda ctx, seed, log: set_up_group(workload, ctx, seed, log),
            "finish": lambda ctx, record, log, timeout: share_drain(workload, ctx, record, log, timeout)}


_QUEUE = {"name": "queue", "transactions": False}

KINDS: dict[str, WorkloadKind] = {kind.name: kind for kind in (
    WorkloadKind(
        "assign", "a producer and an assigned consumer per process (workloads/queue.py)",
        {**_QUEUE, "mode": "assign", "producer": "batch"},
        lambda w, seed, worker: QueueClient(), _stream(assign_op, _batches),
        READ_CHECKS + SEND_CHECKS + ELECTION_CHECKS),
    WorkloadKind(
        "group", "consumer-group members that subscribe, commit and rebalance (workloads/group.py)",
        {**_QUEUE, "mode": "subscribe", "producer": "batch"},
        lambda w, seed, worker: GroupClient(), _stream(subscribe_op, _batches),
        READ_CHECKS + SEND_CHECKS + GROUP_CHECKS + ELECTION_CHECKS, group_members=True),
    WorkloadKind(
        "pipelined", "pipelined producers' one-message sends, assigned consumers' polls (workloads/pipelined.py)",
        {**_QUEUE, "mode": "assign", "producer": "pipelined"},
        lambda w, seed, worker: QueueClient(), _stream(assign_op, _single_messages),
        READ_CHECKS + SEND_CHECKS + ELECTION_CHECKS, make_pump=_pipelined_producer),
    WorkloadKind(
        "pipelined-group", "pipelined producers' one-message sends, group members' polls and commits",
        {**_QUEUE, "mode": "subscribe", "producer": "pipelined"},
        lambda w, seed, worker: GroupClient(), _stream(subscribe_op, _single_messages),
        READ_CHECKS + SEND_CHECKS + GROUP_CHECKS + ELECTION_CHECKS, make_pump=_pipelined_producer,
        group_members=True),
    WorkloadKind(
        "transactions", "transactions of sends and polls, one transactional id per worker (workloads/txn.py)",
        {"name": "queue", "transactions": True, "mode": "assign", "producer": "batch"},
        lambda w, seed, worker: TxnClient(transactional_id(seed, worker), w.txn_send_offsets),
        _stream(assign_op, txn_ops), READ_CHECKS + TXN_CHECKS + ELECTION_CHECKS,
        set_up=_wait_for_coordinator, check_settings=check_txn_settings),
    WorkloadKind(
        "share", "share-group members that share-poll, acknowledge, commit and hold records (workloads/share.py)",
        {**_QUEUE, "mode": "share", "producer": "batch"},
        make_share_client, _stream(share_subscribe_op, share_ops),
        READ_CHECKS + SEND_CHECKS + SHARE_CHECKS + ELECTION_CHECKS, bind=_bind_share),
)}

#: The client libraries ``[workload] client`` names; the first is the default.
#: Any client but the first runs in a driver process over the client protocol: the Java driver,
#: or an outside one (``external``: ``[workload] driver_command``), with the same kinds.
CLIENTS = ("librdkafka", "java", "external")


def with_client(kind: WorkloadKind, workload: Any) -> WorkloadKind:
    """``kind`` with the clients of the library ``workload.client`` names;
    ValueError (one line) when that library does not run the kind yet."""
    client = getattr(workload, "client", CLIENTS[0])
    if client == CLIENTS[0]:
        return kind
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; clients: {', '.join(CLIENTS)}")
    make = JAVA_KINDS.get(kind.name)
    if make is None:
        raise ValueError(f'client = "{client}" does not run the {kind.name} workload yet; it runs: '
                         f"{', '.join(JAVA_KINDS)}")
    # The librdkafka set-up and settings check are librdkafka's; the Java settings are checked
    # by the driver itself (harness/client_config.py).
    set_up = java_wait_for_coordinator if kind.set_up is not None else None
    make_pump = driver_pump if kind.make_pump is not None else None    # pipelined sends through the driver
    return dataclasses.replace(kind, make_client=make, make_pump=make_pump, set_up=set_up, check_settings=None)


def claimants(workload: Any) -> list[WorkloadKind]:
    """Every kind that claims ``workload`` (the run config's [workload] table)."""
    return [kind for kind in KINDS.values() if kind.claims_config(workload)]


def kind_of(workload: Any) -> WorkloadKind:
    """The one kind that claims ``workload``, with the clients of its ``client``
    library; ValueError naming the fields when none or several do, or the
    library does not run it."""
    found = claimants(workload)
    if len(found) == 1:
        kind = found[0] if found[0].bind is None else dataclasses.replace(found[0], **found[0].bind(workload))
        kind = with_client(kind, workload)
        if kind.group_members:     # a fresh one per call: a migration counts each worker's members
            protocols = tuple(getattr(workload, "group_protocols", None) or ())
            kind = dataclasses.replace(kind, make_client=member_clients(kind.make_client, protocols))
        return kind
    keys = dict.fromkeys(key for kind in KINDS.values() for key in kind.claims)
    fields = ", ".join(f"{key} = {getattr(workload, key, None)!r}" for key in keys)
    if not found:
        raise ValueError(f"no workload kind runs [workload] {fields}; kinds: {', '.join(KINDS)}")
    raise ValueError(f"[workload] {fields} is claimed by {', '.join(k.name for k in found)}")


def workload_names() -> tuple[str, ...]:
    """The values ``[workload] name`` may take: those some kind claims."""
    return tuple(dict.fromkeys(str(kind.claims["name"]) for kind in KINDS.values() if "name" in kind.claims))
