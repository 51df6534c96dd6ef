"""One chaos run, phase by phase (docs/design.md, "One run, end to end").

Threads: one per worker (a logical client process at a time), one nemesis
thread walking the fault plan, one metadata sampler. Only the runner turns
an exception from a client into an ``info`` completion, and it retires the
process: an indeterminate op may still be in flight, so the worker goes on
under a new process number with a fresh client.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import re
import signal
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable

from harness import schedule
from harness.run_cluster import ClusterHandle, cluster_up, mark_kept, sweep_dead_runs
from harness.run_config import RunConfig, run_group_id
from history.ops import ACTION_START, INFO, INVOKE, NEMESIS, OK, SAMPLER, SEND, TXN, acknowledged_offsets
from history.fault_intervals import FaultTracker, NemesisOp
from history.writer import HistoryWriter
from harness.progress import RunListener, as_listener, fault_line
from harness.store import attach_log_file, new_run_dir, write_json

log = logging.getLogger(__name__)

TOPIC = "kchaos"
EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run."""


# Fields of a pipelined producer's send row (history.writer.SendRow).
_ROW_PROCESS, _ROW_TYPE, _ROW_PARTITION, _ROW_OFFSET = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(4)


class Recorder:
    """The history writer plus what the console and the final phase need:
    counts by outcome, each process's outstanding invocation, and per
    partition the highest offset a send completion acknowledged."""

    def __init__(self, writer: HistoryWriter):
        self.writer = writer
        self.counts: Counter[tuple[str, str]] = Counter()
        # The invoke op; a send recorded as a row (append_sends): the row.
        self.outstanding: dict[Any, dict | tuple] = {}
        self.max_acked: dict[int, int] = {}
        self._lock = threading.Lock()

    def append(self, op: dict) -> dict:
        op = self.writer.append(op)
        with self._lock:
            self._note(op)
        return op

    def append_many(self, ops: list[dict]) -> list[dict]:
        """``append`` for several ops with one write (a pipelined producer's
        invokes, or the completions one poll served: workloads/pipelined.py)."""
        ops = self.writer.append_many(ops)
        outstanding = self.outstanding
        with self._lock:
            for op in ops:
                if op["type"] == INVOKE:     # _note's first case, inlined: half of a pipelined run's ops
                    outstanding[op["process"]] = op
                else:
                    self._note(op)
        return ops

    def append_sends(self, rows: list[tuple], node: str | None = None) -> None:
        """``append_many`` of one-message sends given as rows (a pipelined
        producer's: ``history.writer.SendRow``) without making their
        dicts (``HistoryWriter.append_sends``); noted as ``_note`` notes ops.
        A batch of invokes (or of completions of one type) is noted by C
        loops (map, zip): this is per message of the fastest workload."""
        self.writer.append_sends(rows, node)
        outstanding, max_acked = self.outstanding, self.max_acked
        types = list(map(_ROW_TYPE, rows))
        with self._lock:
            if types.count(INVOKE) == len(types):
                outstanding.update(zip(map(_ROW_PROCESS, rows), rows))
                return
            for typ in set(types):
                if typ != INVOKE:
                    self.counts[(SEND, typ)] += types.count(typ)
            if INVOKE in types:
                for row in rows:
                    if row[1] == INVOKE:
                        outstanding[row[0]] = row
                    else:
                        outstanding.pop(row[0], None)
            else:
                deque(map(outstanding.pop, map(_ROW_PROCESS, rows), repeat(None)), maxlen=0)
            get = max_acked.get
            for p, offset in zip(map(_ROW_PARTITION, rows), map(_ROW_OFFSET, rows)):
                if type(offset) is int and isinstance(p, int) and offset > get(p, -1):
                    max_acked[p] = offset

    def _note(self, op: dict) -> None:
        """Counts, outstanding invocations, acknowledged offsets (under the lock)."""
        typ = op["type"]
        if typ == INVOKE:
            self.outstanding[op["process"]] = op
        else:
            f = op["f"]
            self.outstanding.pop(op["process"], None)
            self.counts[(f, typ)] += 1
            if f == SEND and isinstance(op.get("value"), list):
                self._note_acked(op["value"])
            elif f == TXN and typ == OK and isinstance(op.get("value"), list):
                # A committed txn's sends: ["send", p, v, offset] micro-ops.
                self._note_acked([m[1:] for m in op["value"] if isinstance(m, list) and m[:1] == [SEND]])

    def _note_acked(self, messages: list) -> None:
        # ok and info send completions: a message with an offset was acknowledged there.
        for p, offset in acknowledged_offsets(messages):
            if isinstance(p, int) and offset > self.max_acked.get(p, -1):
                self.max_acked[p] = offset

    def complete_outstanding(self, error: str) -> None:
        """An interrupted run still leaves every invocation with a completion."""
        with self._lock:
            pending = list(self.outstanding.values())
        for op in pending:
            if isinstance(op, tuple):       # a send row: (process, type, partition, value, ...)
                op = {"process": op[0], "f": SEND, "value": [[op[2], op[3], None]]}
            self.append({"process": op["process"], "type": INFO, "f": op["f"], "value": op.get("value"),
                         "error": error})


@dataclass
class RunOutcome:
    run_dir: Path
    exit_code: int
    verdict: Any = "unknown"
    interrupted: bool = False
    stats: dict[str, Any] = field(default_factory=dict)


class Runner:
    def __init__(self, cfg: RunConfig, progress: Callable[..., None] | RunListener | None = None):
        self.cfg = cfg.with_seed()
        self.progress = progress or (lambda line, periodic=False: None)
        self.events = as_listener(progress)  # phases, counts, fault lines (harness/progress.py)
        self.stop = threading.Event()            # workers and nemesis: the workload is over
        self.sampling_done = threading.Event()   # the sampler runs on through the final phase
        self.drain_completed: dict[int, bool] = {}
        self.cluster: ClusterHandle | None = None
        self.nemesis = None
        self.packages: list = []
        self.faults = FaultTracker()     # what the progress line says is in effect
        # One nemesis op at a time: the final heal waits for a fault op still running.
        self._nemesis_lock = threading.Lock()
        self._processes = itertools.count(self.cfg.concurrency)
        self._producer_names = itertools.count()     # pipelined producers: "p0", "p1", ...
        self._abandon = threading.Event()            # interrupted: do not wait for in-flight sends
        self.crashes: list[tuple[int, int]] = []     # (worker, process; -1: a pipelined producer) dropped by crash_interval
        self._threads: list[threading.Thread] = []
        self.t0 = 0.0

    # -- phases ---------------------------------------------------------------
    def execute(self) -> RunOutcome:
        cfg = self.cfg
        run_dir = new_run_dir(Path(cfg.store), cfg.name)
        self.run_dir = run_dir
        log_handler = attach_log_file(run_dir)
        cfg_json = cfg.to_json()
        cfg_json["schedule_digest"] = schedule.digest(cfg)
        from harness.run_config import offline_client_context
        from workloads.client import effective_settings
        cfg_json["client_settings"] = effective_settings(offline_client_context(cfg))
        write_json(run_dir / "config.json", cfg_json)
        self.recorder = Recorder(HistoryWriter(run_dir / "history.jsonl"))
        interrupted = False
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(signum, frame):
            raise Interrupted(signal.Signals(signum).name)

        for s in previous:
            signal.signal(s, on_signal)
        try:
            if cfg.backend == "docker":  # an SSH run may have no Docker engine at all
                sweep_dead_runs()
            self._phase_cluster()
            self._phase_workload()
            self._phase_final()
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = True
            log.warning("run interrupted (%s): healing and tearing down", exc)
            self.events.note(f"interrupted ({exc}): healing faults and tearing down")
        finally:
            # A second Ctrl-C must not leave containers behind: finish the clean-up first.
            for s in previous:
                signal.signal(s, signal.SIG_IGN)
            try:
                self._teardown(interrupted)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
                logging.getLogger().removeHandler(log_handler)
                log_handler.close()
        if interrupted:
            return RunOutcome(run_dir, EXIT_INTERRUPTED, interrupted=True)
        return self._phase_analysis()

    def _phase_cluster(self) -> None:
        from broker.lifecycle import BrokerSettings
        cfg = self.cfg
        if cfg.backend == "docker":  # cached after the first time; cluster_up finds both ready
            from infra.distribution import resolve_kafka
            from infra.image import build_node_image
            self.events.phase("image", f"Kafka {cfg.kafka_version} jars and node image")
            build_node_image(resolve_kafka(cfg.kafka_version), cfg.base_image)
        self.events.phase("cluster", f"bringing up {cfg.nodes} Kafka {cfg.kafka_version} brokers")
        settings = BrokerSettings(properties=dict(cfg.broker), features=dict(cfg.broker_features))
        # Unique per run folder, and short: long suite run names must not collide when cut.
        tag = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:8]
        name = re.sub(r"[^a-z0-9_.-]", "-", f"{cfg.name.lower()[:28]}-{tag}")
        self.cluster = cluster_up(name, cfg.nodes, cfg.kafka_version, cfg.base_image, settings,
                                  backend=cfg.backend, inventory=cfg.inventory)
        log.info("cluster %s up: %s", name, self.cluster.timings)
        if cfg.keep_cluster:
            mark_kept(name, cfg.kafka_version, settings)
        self.cluster.kafka.create_topic(TOPIC, cfg.workload.partitions, cfg.workload.replication_factor,
                                        config=cfg.topic)
        if cfg.workload.transactions:
            from workloads.txn import wait_for_coordinator
            try:
                log.info("transaction coordinator ready after %.1f s",
                         wait_for_coordinator(self._client_context(0), cfg.seed))
            except Exception as exc:  # the workload's own txns will say what fails
                log.warning("transaction coordinator not ready after 60 s: %s", exc)

    def _phase_workload(self) -> None:
        cfg = self.cfg
        self.t0 = time.monotonic()
        self.events.phase("workload", f"{cfg.time_limit:g} s, {cfg.concurrency} workers, faults: "
                          f"{', '.join(cfg.nemesis.faults) or 'none'}", time_limit=cfg.time_limit)
        if cfg.nemesis.faults:
            import random
            from nemesis.protocol import NemesisContext
            from nemesis.packages import build_nemesis, build_packages
            self.packages = build_packages(list(cfg.nemesis.faults))
            ctx = NemesisContext(self.cluster.kafka, TOPIC, random.Random(f"kchaos:{cfg.seed}:resolve"))
            self.nemesis = build_nemesis(self.packages, ctx)
        self._start(self._sampler, "sampler")
        worker = self._pipelined_worker if cfg.workload.producer == "pipelined" else self._worker
        workers = [self._start(worker, f"worker-{w}", w) for w in range(cfg.concurrency)]
        nemesis_thread = self._start(self._nemesis_loop, "nemesis") if self.nemesis else None
        deadline = self.t0 + cfg.time_limit
        while time.monotonic() < deadline:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            self._report_progress()
        self.stop.set()
        for t in [*workers, *([nemesis_thread] if nemesis_thread else [])]:
            t.join(timeout=cfg.workload.op_timeout + 30)
        if cfg.workload.crash_interval:
            log.info("client crashes: %d (crash_interval %gs)", len(self.crashes), cfg.workload.crash_interval)
            self.events.note(f"{len(self.crashes)} client crashes (crash_interval {cfg.workload.crash_interval:g}s)")

    def _phase_final(self) -> None:
        """Heal, restart, wait until every partition can be drained, then read
        every partition to its end (docs/design.md, "One run, end to end")."""
        cfg = self.cfg
        kafka = self.cluster.kafka
        self.events.phase("final", "healing faults, restarting brokers, draining")
        if self.nemesis is not None:
            from nemesis.packages import final_ops
            for op in final_ops(self.packages):  # HEAL_ORDER first, then scenario packages
                self._invoke_nemesis(op)
        self._heal_everything(restart_dead=True)
        from workloads.drain import WatermarkProbe, drain, wait_for_drain
        max_acked = dict(self.recorder.max_acked)  # the workload is over: no more sends
        probe = WatermarkProbe(kafka.bootstrap(), TOPIC, cfg.consumer)
        try:
            waits = wait_for_drain(lambda: self._drain_states(kafka), probe, max_acked,
                                   cfg.workload.partitions, cfg.drain_wait)
        finally:
            probe.close()
        first = next(iter(waits.values()), {})
        log.info("pre-drain wait: %s after %.1fs: %s", "reached" if first.get("reached") else "not reached",
                 first.get("waited_s", 0.0), {p: w["why"] for p, w in waits.items()})
        if not first.get("reached", True):
            self.events.note(f"drain wait gave up after {cfg.drain_wait:g}s: {first.get('why')}")
        time.sleep(cfg.recovery)
        completed = drain(kafka.bootstrap(), TOPIC, cfg.workload.partitions, cfg.consumer, self.recorder.append,
                          cfg.drain_timeout, max_acked=max_acked, wait=waits)
        self.drain_completed = completed
        log.info("drain completed: %s", completed)
        self.sampling_done.set()

    @staticmethod
    def _drain_states(kafka) -> list:
        """Leaders and ISRs for the pre-drain wait: the active controller's view
        when it can be had (another broker's may be stale), else any broker's."""
        controller = kafka.active_controller()
        states = kafka.authoritative_partition_states(TOPIC, controller) if controller else None
        return states if states is not None else kafka.partition_states(TOPIC)

    def _teardown(self, interrupted: bool) -> None:
        self.stop.set()
        self.sampling_done.set()
        if interrupted:
            self._abandon.set()
        for t in self._threads:
            t.join(timeout=self.cfg.workload.op_timeout + 15 if not interrupted else 5)
        if interrupted:
            self.recorder.complete_outstanding("interrupted")
        if self.cluster is not None:
            if interrupted:
                self._heal_everything(restart_dead=False)
            try:  # Kafka's own record (metadata.jsonl, replicas.jsonl), read before the nodes go
                from harness.record_collector import collect_records
                collect_records(self.cluster.kafka, self.run_dir, TOPIC, self.cfg.workload.partitions)
            except Exception as exc:
                log.warning("reading Kafka's records failed: %s", exc)
            try:
                self.cluster.kafka.collect_logs(self.run_dir / "nodes")
            except Exception as exc:
                log.warning("collecting node logs failed: %s", exc)
            if not self.cfg.keep_cluster:
                self.cluster.down()
        self.recorder.writer.close()

    def _phase_analysis(self) -> RunOutcome:
        run_dir = self.run_dir
        self.events.phase("checks", "checking the history")
        from harness.analysis import analyze
        verdict = analyze(run_dir, self.cfg.checker)
        code = {True: EXIT_VALID, False: EXIT_INVALID}.get(verdict, EXIT_UNKNOWN)
        return RunOutcome(run_dir, code, verdict, stats=dict(self.recorder.counts))

    # -- threads ----------------------------------------------------------------
    def _start(self, target, name: str, *args) -> threading.Thread:
        t = threading.Thread(target=self._guard(target), args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def _guard(self, target):
        def run(*args):
            try:
                target(*args)
            except Exception:
                log.exception("%s crashed", threading.current_thread().name)
        return run

    def _client_context(self, process: int):
        from workloads.client import ClientContext
        cfg = self.cfg
        return ClientContext(
            bootstrap=self.cluster.kafka.bootstrap(), topic=TOPIC, partitions=cfg.workload.partitions,
            process=process, producer_config=dict(cfg.producer), consumer_config=dict(cfg.consumer),
            mode=cfg.workload.mode, group_id=run_group_id(cfg), op_timeout_s=cfg.workload.op_timeout,
            poll_max_messages=cfg.workload.poll_max_messages, poll_timeout_s=cfg.workload.poll_timeout)

    def _worker(self, worker: int, skip: str | None = None) -> None:
        """Worker ``worker``'s schedule, one op at a time on one client process,
        paced by the ops' delays. Ops named ``skip`` are not invoked, but their
        delays count, so the others keep the schedule's times (a pipelined
        worker's sends go elsewhere: ``_pipelined_worker``)."""
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
                planned = pending.pop(0) if pending else next(ops)
                if time.monotonic() >= next_crash:
                    while next_crash <= time.monotonic():
                        next_crash = self.t0 + next(crashes, float("inf"))
                    successor = next(self._processes)
                    log.info("worker %d: crashing process %d (client dropped without flushing); going on as "
                             "process %d", worker, process, successor)
                    self._crash_quietly(client)
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
                    self._close_quietly(client)
                    client = None
                    process = next(self._processes)
        finally:
            if client is not None:
                self._close_quietly(client)

    def _pipelined_worker(self, worker: int) -> None:
        """Worker ``worker``'s schedule on two threads. Its sends go to one
        pipelined producer (workloads/pipelined.py: up to ``in_flight``
        outstanding, each on a logical process of its own, which it records
        itself) as fast as its slots free up: ``rate`` does not pace them. Its
        other ops (assign/subscribe, polls) run on a thread of their own:
        ``_worker`` skipping the sends. Both walk the same seeded schedule, so values and
        partitions are the schedule's; only the interleaving of sends and polls
        depends on timing. A poll never holds up the sends, nor a send a poll."""
        from workloads.pipelined import PipelinedProducer
        cfg = self.cfg
        polls = self._start(self._worker, f"worker-{worker}-polls", worker, SEND)
        producer = PipelinedProducer(self._client_context(worker), cfg.workload.in_flight, self.recorder.append,
                                     lambda: next(self._processes), lambda: f"p{next(self._producer_names)}",
                                     record_many=self.recorder.append_many,
                                     record_sends=self.recorder.append_sends)
        sends = ((p, v) for planned in schedule.worker_ops(cfg, worker) if planned.f == SEND
                 for p, v, _ in planned.value)      # one message each (schedule.worker_ops)
        # crash_interval: at the worker's crash times (the polls thread crashes its client at the
        # same ones) the producer is dropped without flush: what it had in flight ends info,
        # what it had not sent is purged, and its next send opens a new instance.
        crashes = schedule.crash_times(cfg, worker)
        next_crash = self.t0 + next(crashes, float("inf"))
        try:
            while not self.stop.is_set():
                producer.pump(sends, lambda: self.stop.is_set() or time.monotonic() >= next_crash)
                if self.stop.is_set() or time.monotonic() < next_crash:
                    break          # stopped, or the schedule ran out
                while next_crash <= time.monotonic():
                    next_crash = self.t0 + next(crashes, float("inf"))
                log.info("worker %d: crashing producer %s (dropped without flushing)", worker, producer.name)
                producer.crash()
                self.crashes.append((worker, -1))
        finally:
            producer.close(flush_s=cfg.workload.op_timeout, abandon=self._abandon.is_set)
            polls.join()

    def _open_client(self, worker: int, process: int):
        """A queue client for ``process`` (a transactions client with
        ``transactions``: one transactional id per worker), or None when
        opening failed (logged)."""
        from workloads.queue import QueueClient
        if self.cfg.workload.transactions:
            from workloads.txn import TxnClient, transactional_id
            client = TxnClient(transactional_id(self.cfg.seed, worker), self.cfg.workload.txn_send_offsets)
        elif self.cfg.workload.mode == "subscribe":
            from workloads.group import GroupClient   # a consumer-group member with commits
            client = GroupClient()
        else:
            client = QueueClient()
        try:
            client.open(self._client_context(process))
        except Exception as exc:
            log.warning("worker %d: opening a client failed: %s", worker, exc)
            return None
        return client

    def _invoke_recorded(self, worker: int, process: int, client, planned) -> dict:
        """Invoke one planned op on ``client``, recording its invocation and
        completion (a client crash is an ``info`` completion); the completion."""
        op = {"f": planned.f, "value": planned.value}
        if getattr(planned, "abort", None):
            op["abort"] = True              # a txn the schedule aborts
        if getattr(planned, "asynchronous", None):
            op["async"] = True              # an async commit (workloads/group.py)
        # A group member's ops name its group and isolation (workloads/group.py).
        fields = client.op_fields(planned.f) if hasattr(client, "op_fields") else {}
        self.recorder.append({"process": process, "type": INVOKE, **op, **fields})
        try:
            completion = client.invoke(dict(op))
        except Exception as exc:
            log.info("worker %d process %d crashed: %r", worker, process, exc)
            completion = {"type": INFO, "f": planned.f, "value": planned.value, "error": f"crash: {exc!r}",
                          **{k: v for k, v in op.items() if k not in ("f", "value")}, **fields}
        for k in ("process", "index", "time"):
            completion.pop(k, None)
        # Rebalance events (callbacks that ran during the op) follow its completion.
        events = completion.pop("events", None) or getattr(client, "take_events", list)()
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

    def _close_quietly(self, client) -> None:
        try:
            client.close()
        except Exception as exc:
            log.info("closing a client failed: %s", exc)
        # A group member leaving the group gets a revoke callback inside close():
        # its events follow the process's last op.
        take = getattr(client, "take_events", None)
        if take is not None:
            self._record_events(client.process, take())

    @staticmethod
    def _crash_quietly(client) -> None:
        """A client crash: its ``crash()`` when it has one, else ``close()``
        (the queue and txn clients close without flushing: purge and drop)."""
        try:
            getattr(client, "crash", client.close)()
        except Exception as exc:
            log.info("crashing a client failed: %s", exc)

    def _nemesis_loop(self) -> None:
        from harness.schedule import fault_plan
        for at, op in fault_plan(self.cfg):
            if self.stop.wait(max(0.0, self.t0 + at - time.monotonic())):
                return
            self._invoke_nemesis(op)

    def _invoke_nemesis(self, op: dict) -> dict:
        with self._nemesis_lock:
            return self._invoke_nemesis_locked(op)

    def _invoke_nemesis_locked(self, op: dict) -> dict:
        self.recorder.append({"process": NEMESIS, "type": INVOKE, "f": op["f"], "value": op.get("value")})
        try:
            done = self.nemesis.invoke(dict(op))
        except Exception as exc:
            log.warning("nemesis op %s failed: %s", op["f"], exc)
            # A nemesis raises only when it could do nothing: no fault began or ended.
            done = {"type": INFO, "f": op["f"],
                    "value": {**(op.get("value") or {}), "action": None, "error": str(exc)}}
        done = {k: v for k, v in done.items() if k not in ("index", "time", "process")}
        recorded = self.recorder.append({"process": NEMESIS, **done, "type": INFO, "f": op["f"]})
        event = NemesisOp(index=recorded["index"], invoke_time=recorded["time"], time=recorded["time"],
                          f=op["f"], value=recorded.get("value"))
        active = set(self.faults.active_kinds())
        self.faults.add(event)
        # A stop or heal of a fault that was not in effect (the final phase heals
        # every kind) is no news to the console; the history has it anyway.
        healed_something = event.fault in active if event.fault else bool(active)
        if (event.action == ACTION_START or event.action is not None and healed_something
                or isinstance(event.value, dict) and event.value.get("error")):
            self.events.fault(fault_line(event))
        return recorded

    def _heal_everything(self, restart_dead: bool) -> None:
        if self.cluster is None:
            return
        from nemesis.packages import heal_all
        # A clock set back freezes a broker's wall-clock timers: restart skewed brokers.
        skewed = any(p.name == "clock" for p in self.packages)
        result = heal_all(self.cluster.kafka, restart_dead=restart_dead, restart_skewed=skewed and restart_dead)
        log.info("heal_all: %s", result)

    def _sampler(self) -> None:
        """Every few hundred ms: the active controller and, as its broker sees
        them, each partition's leader and ISR. A sample that cannot be had
        from the controller is skipped rather than recorded from a stale view."""
        kafka = self.cluster.kafka
        while not self.sampling_done.is_set():
            started = time.monotonic()
            try:
                controller = kafka.active_controller()
                states = kafka.authoritative_partition_states(TOPIC, controller) if controller else None
                if states is not None:
                    self.recorder.append({"process": SAMPLER, "type": "ok", "f": "sample", "value": {
                        "controller": controller,
                        "partitions": {str(s.partition): {"leader": s.leader, "isr": list(s.isr), "epoch": s.epoch}
                                       for s in states}}})
            except Exception as exc:
                log.debug("sample failed: %s", exc)
            self.sampling_done.wait(max(0.0, self.cfg.sample_interval - (time.monotonic() - started)))

    def _report_progress(self) -> None:
        c = self.recorder.counts
        ok = sum(v for (f, t), v in c.items() if t == "ok" and f in ("send", "poll", "txn"))
        fail = sum(v for (f, t), v in c.items() if t == "fail")
        info = sum(v for (f, t), v in c.items() if t == "info" and f in ("send", "poll", "txn"))
        faults = list(self.faults.active_kinds())
        self.events.counts(ok, fail, info, faults)
