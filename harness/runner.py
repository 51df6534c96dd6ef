"""One chaos run, phase by phase (docs/design.md, "One run, end to end").

Threads: one per worker (harness/worker_loops.py: a logical client process at
a time, of the run's workload kind, workloads/kinds.py), one nemesis thread
walking the fault plan, one metadata sampler. The runner never asks which
kind of workload it runs: the kind names its set-up step, its clients and its
op streams, and config.json records its name and checks.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from broker.lifecycle import BrokerSettings
from checkers import start_spark_ahead
from harness import provenance, schedule
from harness.analysis import analyze
from harness.fault_driver import FaultDriver
from harness.fault_pacing import FaultPace
from harness.client_config import TOPIC, client_context, run_group_id, stored_client_settings
from harness.progress import RunListener, as_listener
from harness.record_collector import RecordReading, collect_find_hanging
from harness.run_cluster import ClusterHandle, cluster_up, mark_kept, sweep_dead_runs
from harness.run_config import RunConfig, workload_kind
from harness.samplers import GroupOffsetSampler, controller_partition_states, metadata_sample
from harness.store import attach_log_file, link_latest, new_run_dir, record_early_failure, write_json
from harness.worker_loops import WorkerLoops
from history.fault_intervals import FaultTracker
from history.ops import FAIL, INFO, OK, POLL, SEND, TXN
from history.recorder import Recorder
from history.writer import HistoryWriter
from infra.distribution import resolve_kafka
from infra.image import build_node_image, image_id
from nemesis.packages import build_nemesis, build_packages, final_ops, heal_all
from nemesis.protocol import NemesisContext
from nemesis.proxy_nemesis import RunProxy
from workloads.client import ClientContext
from workloads.drain import WatermarkProbe, drain
from workloads.drain_wait import settle_seconds, wait_for_drain
from workloads.kinds import FINISH_PROCESS

log = logging.getLogger(__name__)

# The ops whose ok and info completions the progress line counts: the ones that move data,
# whatever the workload kind (fails count whatever the op).
PROGRESS_OPS = (SEND, POLL, TXN)
# The longest the workload waits beyond its time limit for late fault steps (at least; the
# time limit itself when longer): a nemesis op that hangs must not hold the run forever.
MIN_FAULT_SLACK_S = 300.0
EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run."""


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
        self.kind = workload_kind(self.cfg)     # what the workers do (workloads/kinds.py)
        self.progress = progress or (lambda line, periodic=False: None)
        self.events = as_listener(progress)  # phases, counts, fault lines (harness/progress.py)
        self.stop = threading.Event()            # workers and nemesis: the workload is over
        self.sampling_done = threading.Event()   # the sampler runs on through the final phase
        self.drain_completed: dict[int, bool] = {}
        self.cluster: ClusterHandle | None = None
        self.records: RecordReading | None = None    # Kafka's own record, once the cluster is up
        self.nemesis: FaultDriver | None = None      # the nemesis, its ops recorded (harness/fault_driver.py)
        self.packages: list = []
        self.faults = FaultTracker()     # what the progress line says is in effect
        self._abandon = threading.Event()            # interrupted: do not wait for in-flight sends
        self.workers: WorkerLoops | None = None      # the worker threads' bodies, from the workload phase on
        self.proxy: RunProxy | None = None           # a proxied run's protocol proxy (nemesis/proxy_nemesis.py)
        self._threads: list[threading.Thread] = []
        self.t0 = 0.0
        self.pace = FaultPace(0.0, self.cfg.time_limit)   # replaced when the workload starts
        self.ran_on: dict[str, Any] = {}                   # config.json's ran_on (harness/provenance.py)
        self.offsets: GroupOffsetSampler | None = None     # group runs: the committed-offset reads

    # -- phases ---------------------------------------------------------------
    def execute(self) -> RunOutcome:
        run_dir = new_run_dir(Path(self.cfg.store), self.cfg.name)
        self.run_dir = run_dir
        # kchaos.log takes every phase's lines, the analysis's too (the Spark JVM's start-up warnings
        # go there rather than to the console: checkers/session.py)
        log_handler = attach_log_file(run_dir)
        try:
            interrupted = self._run_phases(run_dir)
            if interrupted:
                return RunOutcome(run_dir, EXIT_INTERRUPTED, interrupted=True)
            return self._phase_analysis()
        finally:
            logging.getLogger().removeHandler(log_handler)
            log_handler.close()

    def _run_phases(self, run_dir: Path) -> bool:
        """Cluster, workload and final phase, then the teardown whatever happened;
        True when Ctrl-C or SIGTERM interrupted them."""
        cfg = self.cfg
        cfg_json = cfg.to_json()
        cfg_json["schedule_digest"] = schedule.digest(cfg)
        cfg_json["client_settings"] = stored_client_settings(cfg)   # and the client library's name and version
        cfg_json["workload_kind"] = self.kind.stored()
        self.ran_on = cfg_json["ran_on"] = provenance.harness_side()
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
        except BaseException as exc:
            if not self.t0:      # before the workload: latest stays at the last run worth a report
                record_early_failure(run_dir, exc)
            if not isinstance(exc, (Interrupted, KeyboardInterrupt)):
                raise
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
        return interrupted

    def _phase_cluster(self) -> None:
        cfg = self.cfg
        if cfg.backend == "docker":  # cached after the first time; cluster_up finds both ready
            self.events.phase("image", f"Kafka {cfg.kafka_version} jars and node image")
            dist = resolve_kafka(cfg.kafka_version)
            image = build_node_image(dist, cfg.base_image)
            nodes_ran = provenance.node_side(cfg.kafka_version, dist, image, image_id(image))
        else:
            nodes_ran = provenance.node_side(cfg.kafka_version, None, None, None)
        self._store_ran({"ran_on": {**self.ran_on, **nodes_ran}})
        self.events.phase("cluster", f"bringing up {cfg.nodes} Kafka {cfg.kafka_version} brokers")
        settings = BrokerSettings(properties=dict(cfg.broker), features=dict(cfg.broker_features), quorum=cfg.quorum)
        if cfg.nemesis.proxy:  # its ports first: the brokers advertise them
            self.proxy = RunProxy(cfg.nemesis.proxy, cfg.nodes, cfg.seed, self.recorder.append)
            settings.proxy_ports = self.proxy.ports
        # Unique per run folder, and short: long suite run names must not collide when cut.
        tag = hashlib.sha256(str(self.run_dir.resolve()).encode()).hexdigest()[:8]
        name = re.sub(r"[^a-z0-9_.-]", "-", f"{cfg.name.lower()[:28]}-{tag}")
        self.cluster = cluster_up(name, cfg.nodes, cfg.kafka_version, cfg.base_image, settings,
                                  backend=cfg.backend, inventory=cfg.inventory, controllers=cfg.controllers)
        log.info("cluster %s up: %s", name, self.cluster.timings)
        self.records = RecordReading(self.cluster.kafka, self.run_dir, TOPIC, cfg.workload.partitions)
        if self.proxy is not None:
            self.proxy.start(self.cluster.kafka)
        if cfg.keep_cluster:
            mark_kept(name, cfg.kafka_version, settings)
        self.cluster.kafka.create_topic(TOPIC, cfg.workload.partitions, cfg.workload.replication_factor,
                                        config=cfg.topic)
        if self.kind.set_up is not None:   # e.g. the transaction coordinator answers
            self.kind.set_up(self._client_context(0), cfg.seed, log)

    def _store_ran(self, facts: dict[str, Any]) -> None:
        """Add what is learnt while running (the node software, the workload's real
        length) to config.json; run_config.STORED_KEYS names these keys."""
        path = self.run_dir / "config.json"
        stored = json.loads(path.read_text())
        stored.update(facts)
        write_json(path, stored)
        if "ran_on" in facts:
            self.ran_on = facts["ran_on"]

    def _phase_workload(self) -> None:
        cfg = self.cfg
        self.t0 = time.monotonic()
        self.pace = FaultPace(self.t0, cfg.time_limit)
        link_latest(Path(cfg.store), self.run_dir)   # from here on the folder has a history to report
        self.events.phase("workload", f"{cfg.time_limit:g} s, {cfg.concurrency} workers, faults: "
                          f"{', '.join(cfg.nemesis.faults) or 'none'}", time_limit=cfg.time_limit)
        if cfg.nemesis.faults:
            self.packages = build_packages(list(cfg.nemesis.faults))
            ctx = NemesisContext(self.cluster.kafka, TOPIC, random.Random(f"kchaos:{cfg.seed}:resolve"))
            self.nemesis = FaultDriver(build_nemesis(self.packages, ctx), self.recorder, self.events, self.faults)
        if self.kind.group_members:    # a group's committed offsets, read at each sample
            self.offsets = GroupOffsetSampler(self.cluster.kafka.bootstrap(), run_group_id(cfg), TOPIC,
                                              cfg.workload.partitions, self.recorder.append)
        self._start(self._sampler, "sampler")
        self.workers = WorkerLoops(cfg, self.kind, self.recorder, self._client_context, self.stop,
                                   self._abandon, self._start, self.t0)
        workers = [self._start(self.workers.run, f"worker-{w}", w) for w in range(cfg.concurrency)]
        nemesis_thread = self._start(self._nemesis_loop, "nemesis") if self.nemesis else None
        if nemesis_thread is None:
            self.pace.finished()
        # Every planned step runs, and the plan's tail after the last one (harness/fault_pacing.py);
        # a step that hangs past the slack ends the workload all the same.
        give_up = self.t0 + cfg.time_limit + max(MIN_FAULT_SLACK_S, cfg.time_limit)
        said_late = False
        while True:
            now, end = time.monotonic(), self.pace.workload_end
            if not said_late and now >= self.t0 + cfg.time_limit and self.pace.walking:
                said_late = True
                self.events.note(f"time limit passed {self.pace.slip_s():.0f} s behind the plan: the workload "
                                 f"goes on until every planned fault step has run, and the plan's tail after it")
            if now >= end and not self.pace.walking:
                break
            if now >= give_up:
                log.warning("fault steps ran %.0f s behind the plan: the workload ends with steps left",
                            now - self.t0 - cfg.time_limit)
                break
            time.sleep(max(0.05, min(0.5, end - now)))
            self._report_progress()
        self.stop.set()
        workload_s = time.monotonic() - self.t0
        if workload_s > cfg.time_limit + 1:
            self.events.note(f"the workload ran {workload_s:.0f} s (planned {cfg.time_limit:g} s): "
                             f"fault steps took longer than planned, every one ran")
        self._store_ran({"workload_seconds": round(workload_s, 3)})
        for t in [*workers, *([nemesis_thread] if nemesis_thread else [])]:
            t.join(timeout=cfg.workload.op_timeout + 30)
        if cfg.workload.crash_interval:
            crashes = self.workers.crashes
            log.info("client crashes: %d (crash_interval %gs)", len(crashes), cfg.workload.crash_interval)
            self.events.note(f"{len(crashes)} client crashes (crash_interval {cfg.workload.crash_interval:g}s)")

    def _phase_final(self) -> None:
        """Heal, restart, wait until every partition can be drained, then read
        every partition to its end (docs/design.md, "One run, end to end")."""
        cfg = self.cfg
        kafka = self.cluster.kafka
        self.events.phase("final", "healing faults, restarting brokers, draining")
        self.recorder.writer.workload_over()     # the history's columnar copy logs how far behind it is
        if self.nemesis is not None:
            for op in final_ops(self.packages):  # HEAL_ORDER first, then scenario packages
                self.nemesis.invoke(op)
        healed = self._heal_everything(restart_dead=True)
        max_acked = dict(self.recorder.max_acked)  # the workload is over: no more sends
        probe = WatermarkProbe(kafka.bootstrap(), TOPIC, cfg.consumer)
        try:
            waits = wait_for_drain(lambda: controller_partition_states(kafka, TOPIC), probe, max_acked,
                                   cfg.workload.partitions, cfg.drain_wait)
        finally:
            probe.close()
        first = next(iter(waits.values()), {})
        log.info("pre-drain wait: %s after %.1fs: %s", "reached" if first.get("reached") else "not reached",
                 first.get("waited_s", 0.0), {p: w["why"] for p, w in waits.items()})
        if not first.get("reached", True):
            self.events.note(f"drain wait gave up after {cfg.drain_wait:g}s: {first.get('why')}")
        time.sleep(settle_seconds(cfg.recovery, bool(self.faults.intervals), healed))
        if self.kind.finish is not None:   # e.g. the share drain: the group accepts what it still holds
            self.kind.finish(self._client_context(FINISH_PROCESS), self.recorder.append, log, cfg.drain_timeout)
        if self.records is not None and "hanging-transaction" not in self.kind.checks:
            self.records.begin_beside_drain()
        completed = drain(kafka.bootstrap(), TOPIC, cfg.workload.partitions, cfg.consumer, self.recorder.append,
                          cfg.drain_timeout, max_acked=max_acked, wait=waits, record_text=self.recorder.append_text)
        self.drain_completed = completed
        log.info("drain completed: %s", completed)
        # the checkers' Spark session, if they will want one, starts while the run tears down
        start_spark_ahead(self.run_dir, cfg.checker, sum(self.recorder.counts.values()))
        self.sampling_done.set()
        if self.offsets is not None:   # the last read of the committed offsets, after everything
            self.offsets.sample(final=True)
            self.offsets.close()

    def _teardown(self, interrupted: bool) -> None:
        self.stop.set()
        self.sampling_done.set()
        if interrupted:
            self._abandon.set()
        for t in self._threads:
            t.join(timeout=self.cfg.workload.op_timeout + 15 if not interrupted else 5)
        if interrupted:
            self.recorder.complete_outstanding("interrupted")
        took: dict[str, float] = {}       # the steps' seconds, logged: what the user waits for after the drain
        mark = time.monotonic()

        def step(name: str) -> None:
            nonlocal mark
            took[name], mark = round(time.monotonic() - mark, 2), time.monotonic()
        if self.cluster is not None:
            if interrupted:
                self._heal_everything(restart_dead=False)
                step("healing")
            if self.records is not None:
                self.records.finish()     # read before the nodes go
                step("Kafka's record")
            if "hanging-transaction" in self.kind.checks:     # Kafka's tool on them (KIP-664)
                collect_find_hanging(self.cluster.kafka, self.run_dir)
            try:
                self.cluster.kafka.collect_logs(self.run_dir / "nodes")
            except Exception as exc:
                log.warning("collecting node logs failed: %s", exc)
            step("node logs")
            if not self.cfg.keep_cluster:
                self.cluster.down()
                step("cluster down")
        if self.proxy is not None:
            self.proxy.stop()
        self.recorder.writer.close()
        step("history closed")
        log.info("teardown: %s", ", ".join(f"{k} {v:g} s" for k, v in took.items()))

    def _phase_analysis(self) -> RunOutcome:
        run_dir = self.run_dir
        self.events.phase("checks", "checking the history")
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

    def _client_context(self, process: int) -> ClientContext:
        bootstrap = self.proxy.bootstrap() if self.proxy is not None else self.cluster.kafka.bootstrap()
        return client_context(self.cfg, bootstrap, process)

    def _nemesis_loop(self) -> None:
        """Each planned step after its planned gap from the previous step's
        completion (harness/fault_pacing.py)."""
        try:
            for at, op in schedule.fault_plan(self.cfg):
                if self.stop.wait(max(0.0, self.pace.start_time(at) - time.monotonic())):
                    return
                self.nemesis.invoke(op)
                self.pace.completed(at, time.monotonic())
        finally:
            self.pace.finished()

    def _heal_everything(self, restart_dead: bool) -> dict[str, str]:
        """Heal every node ({node: status}, as ``heal_all`` says; empty without a cluster)."""
        if self.cluster is None:
            return {}
        # A clock set back freezes a broker's wall-clock timers: restart skewed brokers.
        skewed = any(p.name == "clock" for p in self.packages)
        result = heal_all(self.cluster.kafka, restart_dead=restart_dead, restart_skewed=skewed and restart_dead)
        log.info("heal_all: %s", result)
        return result

    def _sampler(self) -> None:
        """Every ``sample_interval``: the controller's view of the partitions and,
        in group runs, the group's committed offsets (harness/samplers.py)."""
        while not self.sampling_done.is_set():
            started = time.monotonic()
            try:
                sample = metadata_sample(self.cluster.kafka, TOPIC)
                if sample is not None:
                    self.recorder.append(sample)
            except Exception as exc:
                log.debug("sample failed: %s", exc)
            if self.offsets is not None:
                self.offsets.sample()
            self.sampling_done.wait(max(0.0, self.cfg.sample_interval - (time.monotonic() - started)))

    def _report_progress(self) -> None:
        c = self.recorder.counts
        ok = sum(v for (f, t), v in c.items() if t == OK and f in PROGRESS_OPS)
        fail = sum(v for (f, t), v in c.items() if t == FAIL)
        info = sum(v for (f, t), v in c.items() if t == INFO and f in PROGRESS_OPS)
        faults = list(self.faults.active_kinds())
        self.events.counts(ok, fail, info, faults)
