"""The workers' threads during the workload phase (docs/design.md, "One run,
end to end").

A worker walks its seeded op stream (harness/schedule.py) one op at a time on
one client process of its workload kind (workloads/kinds.py), paced by the
ops' delays. Only here does an exception from a client become an ``info``
completion, and it retires the process: an indeterminate op may still be in
flight, so the worker goes on under a new process number with a fresh client.
A kind with a send pump sends the stream's messages through it on the
worker's thread while a second thread walks the other ops.

Nothing here knows which kind it runs: it asks the kind for the client, the
pump and the ops, and the client for its op fields and events.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Callable, Iterator

from harness import schedule
from harness.run_config import RunConfig
from history.ops import INFO, INVOKE, SEND
from history.recorder import Recorder
from workloads.client import Client, ClientContext
from workloads.kinds import PumpHooks, WorkloadKind
from workloads.op_streams import PlannedOp

# The run's log: these lines keep the logger name the console and kchaos.log have always shown.
log = logging.getLogger("harness.runner")


class WorkerLoops:
    """The bodies of the worker threads of one run, and what they share: the
    process numbers, the pump instance names and the client crashes so far."""

    def __init__(self, cfg: RunConfig, kind: WorkloadKind, recorder: Recorder,
                 client_context: Callable[[int], ClientContext], stop: threading.Event,
                 abandon: threading.Event, start: Callable[..., threading.Thread], t0: float):
        self.cfg = cfg
        self.kind = kind
        self.recorder = recorder
        self.client_context = client_context   # a process's ClientContext
        self.stop = stop                       # the workload is over
        self.abandon = abandon                 # interrupted: do not wait for in-flight sends
        self.start = start                     # the runner's thread starter (target, name, *args)
        self.t0 = t0                           # the workload's start (time.monotonic)
        self._processes = itertools.count(cfg.concurrency)
        self._pump_names = itertools.count()   # pump instances: "p0", "p1", ...
        self.crashes: list[tuple[int, int]] = []   # (worker, process; -1: a pump) dropped by crash_interval

    def run(self, worker: int) -> None:
        """Worker ``worker``'s thread, as its kind has it."""
        if self.kind.make_pump is not None:
            self._pump_worker(worker)
        else:
            self._op_worker(worker)

    def _op_worker(self, worker: int, skip: str | None = None) -> None:
        """Worker ``worker``'s schedule, one op at a time on one client process,
        paced by the ops' delays. Ops named ``skip`` are not invoked, but their
        delays count, so the others keep the schedule's times (a pump worker's
        sends go elsewhere: ``_pump_worker``)."""
        process = worker
        client = None
        ops = schedule.worker_ops(self.cfg, worker)
        # crash_interval: between ops, at these times, the client is dropped without
        # flushing and the worker goes on as a new process (no op is outstanding then).
        crashes = schedule.crash_times(self.cfg, worker)
        next_crash = self.t0 + next(crashes, float("inf"))
        setup_op = next(ops)  # assign/subscribe: replayed for every new process (queued when it opens)
        next_at = time.monotonic()
        pending: list = []
        try:
            while not self.stop.is_set():
                if client is None:
                    client = self._open_client(worker, process)
                    if client is None:
                        self.stop.wait(1.0)
                        continue
                    pending.insert(0, setup_op)
                planned = pending.pop(0) if pending else next(ops, None)
                if planned is None:      # a finite stream (a replay: harness/replay.py) is done
                    self.stop.wait()
                    break
                if time.monotonic() >= next_crash:
                    while next_crash <= time.monotonic():
                        next_crash = self.t0 + next(crashes, float("inf"))
                    successor = next(self._processes)
                    log.info("worker %d: crashing process %d (client dropped without flushing); going on as "
                             "process %d", worker, process, successor)
                    self._crash_quietly(client)
                    self._record_events(process, client.take_events())   # a share member's answers at close
                    self.crashes.append((worker, process))
                    client, process = None, successor
                    if planned is not setup_op:
                        pending.insert(0, planned)
                    continue
                next_at += planned.delay_s
                if planned.f == skip:
                    continue
                wait = next_at - time.monotonic()
                if wait > 0 and self.stop.wait(wait):
                    break
                next_at = max(next_at, time.monotonic() - 1.0)  # no catch-up bursts after a slow op
                completion = self._invoke_recorded(worker, process, client, planned)
                if completion["type"] == INFO:
                    # The op may still take effect later (a send in flight, a half-done
                    # assignment): retire this process and go on under a new number.
                    self._close_quietly(client, process)
                    client = None
                    process = next(self._processes)
        finally:
            if client is not None:
                self._close_quietly(client, process)

    def _pump_worker(self, worker: int) -> None:
        """Worker ``worker``'s schedule on two threads. Its sends go to one
        pump (a pipelined producer, workloads/pipelined.py: up to ``in_flight``
        outstanding, each on a logical process of its own, which it records
        itself) as fast as its slots free up: ``rate`` does not pace them. Its
        other ops (assign/subscribe, polls) run on a thread of their own:
        ``_op_worker`` skipping the sends. Both walk the same seeded schedule, so values and
        partitions are the schedule's; only the interleaving of sends and polls
        depends on timing. A poll never holds up the sends, nor a send a poll.
        In a replay (``workload.replay``) each send waits for its recorded time
        (``pump_at``), as the polls do."""
        cfg = self.cfg
        polls = self.start(self._op_worker, f"worker-{worker}-polls", worker, SEND)
        recorder = self.recorder
        hooks = PumpHooks(recorder.append, recorder.append_many, recorder.append_sends,
                          lambda: next(self._processes), lambda: f"p{next(self._pump_names)}")
        pump = self.kind.make_pump(self.client_context(worker), cfg.workload, hooks)
        sends = ((p, v) for planned in schedule.worker_ops(cfg, worker) if planned.f == SEND
                 for p, v, _ in planned.value)      # one message each (workloads/op_streams.py)
        timed = self._timed_sends(worker) if cfg.workload.replay else None
        # crash_interval: at the worker's crash times (the polls thread crashes its client at the
        # same ones) the pump is dropped without flush: what it had in flight ends info,
        # what it had not sent is purged, and its next send opens a new instance.
        crashes = schedule.crash_times(cfg, worker)
        next_crash = self.t0 + next(crashes, float("inf"))
        try:
            def until() -> bool:           # stopped, or the next crash is due
                return self.stop.is_set() or time.monotonic() >= next_crash

            while not self.stop.is_set():
                if timed is None:
                    pump.pump(sends, until)
                elif (left := pump.pump_at(timed, until)) is not None:
                    timed = itertools.chain([left], timed)
                if self.stop.is_set() or time.monotonic() < next_crash:
                    break          # stopped, or the schedule ran out
                while next_crash <= time.monotonic():
                    next_crash = self.t0 + next(crashes, float("inf"))
                log.info("worker %d: crashing producer %s (dropped without flushing)", worker, pump.name)
                pump.crash()
                self.crashes.append((worker, -1))
        finally:
            pump.close(flush_s=cfg.workload.op_timeout, abandon=self.abandon.is_set)
            polls.join()

    def _timed_sends(self, worker: int) -> Iterator[tuple[float, int, int]]:
        """A replay's sends of worker ``worker``, each ``(monotonic time due,
        partition, value)``: the recorded ops' gaps add up from the thread's
        start, polls' included, as ``_op_worker`` adds them for the polls."""
        at = time.monotonic()
        for planned in schedule.worker_ops(self.cfg, worker):
            at += planned.delay_s
            if planned.f == SEND:
                for p, v, _ in planned.value:
                    yield at, p, v

    def _open_client(self, worker: int, process: int) -> Client | None:
        """The kind's client for ``process``, opened, or None when opening failed (logged)."""
        client = self.kind.make_client(self.cfg.workload, self.cfg.seed, worker)
        try:
            client.open(self.client_context(process))
        except Exception as exc:
            log.warning("worker %d: opening a client failed: %s", worker, exc)
            return None
        return client

    def _invoke_recorded(self, worker: int, process: int, client: Client, planned: PlannedOp) -> dict:
        """Invoke one planned op on ``client``, recording its invocation and
        completion (a client crash is an ``info`` completion); the completion."""
        op = {"f": planned.f, "value": planned.value, **planned.invoke_fields()}   # abort, async
        fields = client.op_fields(planned.f)     # a group member's group and isolation
        self.recorder.append({"process": process, "type": INVOKE, **op, **fields, "worker": worker})
        try:
            completion = client.invoke(dict(op))
        except Exception as exc:
            log.info("worker %d process %d crashed: %r", worker, process, exc)
            completion = {"type": INFO, "f": planned.f, "value": planned.value, "error": f"crash: {exc!r}",
                          **{k: v for k, v in op.items() if k not in ("f", "value")}, **fields}
        for k in ("process", "index", "time"):
            completion.pop(k, None)
        # Rebalance events (callbacks that ran during the op) follow its completion.
        events = completion.pop("events", None) or client.take_events()
        self.recorder.append({"process": process, **completion, "f": planned.f})
        self._record_events(process, events)
        return completion

    def _record_events(self, process: int, events: list) -> None:
        """Event ops (completions without an invoke: rebalances) of ``process``."""
        for ev in events:
            try:
                self.recorder.append({**ev, "process": process})
            except Exception as exc:  # the history closed under an interrupted run
                log.info("process %s: event not recorded (%s): %s", process, exc, ev)

    def _close_quietly(self, client: Client, process: int) -> None:
        try:
            client.close()
        except Exception as exc:
            log.info("closing a client failed: %s", exc)
        # A group member leaving the group gets a revoke callback inside close():
        # its events follow the process's last op.
        self._record_events(process, client.take_events())

    @staticmethod
    def _crash_quietly(client: Client) -> None:
        """A client crash: its ``crash()`` (the clients here close without
        flushing: purge and drop)."""
        try:
            client.crash()
        except Exception as exc:
            log.info("crashing a client failed: %s", exc)
