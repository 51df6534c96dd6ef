"""A Kafka cluster as a set of brokers on nodes: bring-up and cluster views.

Combined (every node a broker and a controller) or isolated KRaft (named
controller-only nodes beside broker-only ones: docs/design.md, "Isolated KRaft").
Leaders and ISRs come from the admin API; the active KRaft controller comes
from each node's ``quorum-state`` file (KRaft's metadata response names a
random broker as "controller", not the quorum leader), read through Node.run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Sequence

from broker.config import BROKER, BROKER_PORT, COMBINED, CONTROLLER, DATA_DIR, DYNAMIC_QUORUM, broker_id, \
    new_cluster_id, property_value
from broker.lifecycle import Broker, BrokerSettings
from broker.quorum_tool import initial_controllers
from infra.distribution import cache_root
from infra.errors import BrokerNotReady, KchaosError, UsageError
from infra.node import Node, parallel

log = logging.getLogger(__name__)

QUORUM_STATE = f"{DATA_DIR}/__cluster_metadata-0/quorum-state"


class TopicError(KchaosError):
    """A topic could not be created or described."""


@dataclass(frozen=True)
class PartitionState:
    partition: int
    leader: int | None
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    epoch: int | None = None


class KafkaCluster:
    """``controllers``: the names of controller-only nodes; none (the default)
    makes every node combined. ``brokers`` maps every node to its Kafka process,
    controllers included."""

    def __init__(self, nodes: Sequence[Node], settings: BrokerSettings | None = None,
                 controllers: Collection[str] = ()):
        self.nodes = list(nodes)
        self.settings = settings or BrokerSettings()
        self.controller_names = frozenset(controllers)
        unknown = self.controller_names - {n.name for n in self.nodes}
        if unknown:
            raise UsageError(f"controllers {sorted(unknown)} are not nodes of this cluster")
        self.brokers = {n.name: Broker(n, self.settings, self.role_of(n.name)) for n in self.nodes}
        self.timings: dict[str, float] = {}          # of the last setup()
        self.ready_timings: dict[str, float] = {}    # of the last wait_ready()

    # -- roles -------------------------------------------------------------
    @property
    def isolated(self) -> bool:
        """Controllers on nodes of their own (isolated KRaft)."""
        return bool(self.controller_names)

    def role_of(self, name: str) -> str:
        if not self.controller_names:
            return COMBINED
        return CONTROLLER if name in self.controller_names else BROKER

    @property
    def broker_nodes(self) -> list[Node]:
        """The nodes clients and replicas talk to (every node when combined)."""
        return [n for n in self.nodes if n.name not in self.controller_names]

    @property
    def controller_nodes(self) -> list[Node]:
        """The KRaft quorum's voters (every node when combined)."""
        return [n for n in self.nodes if self.role_of(n.name) != BROKER]

    # -- addresses ---------------------------------------------------------
    def bootstrap(self, names: Sequence[str] | None = None) -> str:
        """Client bootstrap servers: broker nodes only (a controller-only node has no client listener)."""
        return ",".join(f"{n.address}:{BROKER_PORT}" for n in self.broker_nodes if names is None or n.name in names)

    def node(self, name_or_id: str | int) -> Node:
        name = f"n{name_or_id}" if isinstance(name_or_id, int) else name_or_id
        for n in self.nodes:
            if n.name == name:
                return n
        raise UsageError(f"no node {name!r} in this cluster ({', '.join(n.name for n in self.nodes)})")

    def broker(self, name_or_id: str | int) -> Broker:
        return self.brokers[self.node(name_or_id).name]

    # -- lifecycle ---------------------------------------------------------
    def setup(self, cluster_id: str | None = None, timeout_s: float = 120.0) -> str:
        """Configure, format and start every broker, then wait for readiness.

        Formatting runs no JVM on a warm start: the bootstrap checkpoint Kafka's
        StorageTool writes holds feature levels only (no node or cluster id with
        static voters), so it is cached on the host, keyed by the node's jars,
        JVM, features and broker properties, and copied to every node with its
        own meta.properties. On a miss one node runs StorageTool and fills the cache.

        The broker JVMs start from an AppCDS archive (half of a broker's start
        was loading classes) cached the same way, keyed by jars and JVM. With no
        archive cached, the first broker records one: once the cluster is ready
        it is stopped, its archive taken, and it is started again (once per
        Kafka and JDK). ``self.timings`` says where the time went.
        """
        cluster_id = cluster_id or new_cluster_id()
        voters = [(n.name, n.address) for n in self.controller_nodes]
        t0 = time.monotonic()
        first = next(iter(self.brokers.values()))

        def configure(b: Broker) -> str:
            b.configure(voters, brokers=len(self.broker_nodes))
            return b.runtime_listing() if b is first else ""
        listing = parallel(configure, self.brokers.values())[0]
        boot_path = _cache_file("bootstrap", _key(listing, sorted(self.settings.features.items()),
                                                  sorted((k, str(v)) for k, v in self.settings.properties.items())),
                                ".checkpoint")
        cds_path = _cache_file("cds", _key(listing), ".jsa")
        use_cds = self.settings.cds and bool(listing.strip())
        have_cds = use_cds and cds_path.exists()
        if use_cds and not have_cds:
            log.info("no CDS archive for this Kafka and JDK yet: n%s records one during this start",
                     broker_id(first.name))
        t_conf = time.monotonic()
        # A dynamic quorum's voters each run StorageTool with the initial voter set
        # (it writes the voter set into their metadata log); the others format as before.
        voter_args = self.initial_voter_args() if self.settings.quorum == DYNAMIC_QUORUM else ()
        plain = [b for b in self.brokers.values() if not voter_args or b.role == BROKER]
        bootstrap = boot_path.read_bytes() if boot_path.exists() and plain else None
        todo = plain
        if bootstrap is None and plain:
            plain[0].format(cluster_id)
            bootstrap = plain[0].bootstrap_checkpoint()
            _write_atomic(boot_path, bootstrap)
            todo = plain[1:]

        def prepare(b: Broker) -> None:
            if b not in plain:
                b.format(cluster_id, voter_args)
            elif b in todo:
                b.format_like(cluster_id, bootstrap)
            if have_cds:
                b.put_cds_archive(cds_path)
        parallel(prepare, self.brokers.values())
        t_format = time.monotonic()
        recording = first if use_cds and not have_cds else None
        parallel(lambda b: b.start(record_cds=b is recording), self.brokers.values())
        t_jvm = time.monotonic()
        self.wait_ready(timeout_s)
        t_ready = time.monotonic()
        self.timings = {"configure_s": t_conf - t0, "format_s": t_format - t_conf, "jvm_start_s": t_jvm - t_format,
                        **self.ready_timings, "ready_s": t_ready - t_jvm}
        if recording is not None:
            self._take_cds_archive(recording, cds_path, timeout_s)
            self.timings["cds_record_s"] = time.monotonic() - t_ready
        return cluster_id

    def initial_voter_args(self) -> list[str]:
        """StorageTool's ``--initial-controllers`` for every controller, each
        with a fresh metadata directory id (StorageTool gives a voter the id its
        entry names: docs/design.md, "Quorum membership")."""
        return ["--initial-controllers", initial_controllers(
            [(n.name, n.address, new_cluster_id()) for n in self.controller_nodes])]

    def _take_cds_archive(self, broker: Broker, dest: Path, timeout_s: float) -> None:
        """Stop the recording broker (its JVM writes the archive as it exits),
        keep the archive, start the broker again from it."""
        starts = broker.started_count()
        broker.stop(wait_s=120.0)
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / dest.name
            if broker.take_cds_recording(local) and local.stat().st_size > 0:
                _write_atomic(dest, local.read_bytes())
                broker.put_cds_archive(dest)
            else:
                log.warning("%s: the JVM wrote no CDS archive; brokers start without one", broker.name)
        broker.start()
        self.wait_ready(timeout_s, [broker.name], {broker.name: starts})

    def wait_ready(self, timeout_s: float = 120.0, names: Sequence[str] | None = None,
                   previous_starts: dict[str, int] | None = None) -> None:
        """Each node logged that it started, and the admin API lists every broker
        (controller-only nodes register with no one: their started line suffices)."""
        names = list(names) if names else [n.name for n in self.nodes]
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        parallel(lambda name: self.brokers[name].wait_started(
            timeout_s, (previous_starts or {}).get(name, 0)), names)
        t_started = time.monotonic()
        want = {broker_id(n.name) for n in self.broker_nodes if n.name in names}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            try:
                seen = self.live_broker_ids()
            except Exception as exc:  # admin client errors while brokers register
                log.debug("metadata not ready: %s", exc)
            if want <= seen:
                self.ready_timings = {"started_log_s": t_started - t0, "registered_s": time.monotonic() - t_started}
                return
            time.sleep(0.5)
        missing = sorted(want - seen)
        tails = "; ".join(f"n{i}: {self.broker(i).log_tail()}" for i in missing)
        raise BrokerNotReady(f"brokers {missing} never registered with the cluster after {timeout_s:.0f}s: {tails}")

    def restart(self, name: str, timeout_s: float = 90.0) -> None:
        """Start a broker that is not running and wait until it has started."""
        b = self.brokers[name]
        b.resume()
        if b.is_running():
            return
        starts = b.started_count()
        b.resume()
        b.start()
        b.wait_started(timeout_s, starts)

    def teardown(self) -> None:
        parallel(lambda b: b.kill(), self.brokers.values())

    def collect_logs(self, dest: Path) -> None:
        parallel(lambda b: b.collect_logs(dest / b.name), self.brokers.values())

    # -- admin API -----------------------------------------------------------
    def admin(self, timeout_s: float = 5.0):
        # confluent_kafka is imported where a client is made: `kchaos --help` imports this module
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": int(timeout_s * 1000),
                            "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
                            "log_level": 0, "logger": _quiet_logger()})

    def live_broker_ids(self, admin=None) -> set[int]:
        md = (admin or self.admin()).list_topics(timeout=5)
        return set(md.brokers)

    def create_topic(self, topic: str, partitions: int, replication_factor: int,
                     config: dict[str, str] | None = None, timeout_s: float = 60.0) -> None:
        from confluent_kafka.admin import NewTopic        # (see admin)
        if replication_factor > len(self.broker_nodes):
            raise UsageError(f"replication factor {replication_factor} is above the broker count "
                             f"{len(self.broker_nodes)}")
        new = NewTopic(topic, partitions, replication_factor,
                       config={k: property_value(v) for k, v in (config or {}).items()})
        deadline = time.monotonic() + timeout_s
        admin = self.admin()
        while True:
            try:
                admin.create_topics([new], operation_timeout=30)[topic].result(
                    timeout=max(1.0, deadline - time.monotonic()))
                break
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" in str(exc):  # also a retry of a create that took
                    break
                if not _transient(exc) or time.monotonic() >= deadline:
                    raise TopicError(f"creating topic {topic!r}: {exc}") from exc
                log.info("creating topic %r: %s; retrying", topic, exc)
                time.sleep(0.5)
                admin = self.admin()
        while time.monotonic() < deadline:
            states = self.partition_states(topic, admin)
            if len(states) == partitions and all(s.leader is not None and s.leader >= 0 for s in states):
                return
            time.sleep(0.3)
        raise TopicError(f"topic {topic!r} has partitions without a leader after {timeout_s:.0f}s")

    def partition_states(self, topic: str, admin=None) -> list[PartitionState]:
        """Leaders and ISRs as whichever broker answers sees them (see
        ``authoritative_partition_states`` when staleness matters)."""
        return self._states((admin or self.admin()).list_topics(topic=topic, timeout=5), topic)

    @staticmethod
    def _states(md, topic: str) -> list[PartitionState]:
        t = md.topics.get(topic)
        if t is None or t.error is not None and "UNKNOWN_TOPIC" in str(t.error):
            return []
        out = []
        for p in sorted(t.partitions.values(), key=lambda p: p.id):
            leader = p.leader if p.leader is not None and p.leader >= 0 else None
            out.append(PartitionState(p.id, leader, tuple(sorted(p.isrs)), tuple(p.replicas),
                                      getattr(p, "leader_epoch", None)))
        return out

    def authoritative_partition_states(self, topic: str, controller: int,
                                       attempts: int = 2) -> list[PartitionState] | None:
        """The partition states as the active controller's broker sees them.

        Any broker answers a metadata request, and an isolated or paused one
        answers with a stale view (it may still call itself leader). In
        combined mode the active controller's broker holds the newest metadata.
        In isolated mode the controller answers no client (and the Metadata
        response as confluent-kafka exposes it has no leader epoch), so each
        partition's state is the one most running brokers answer themselves: a
        broker cut from the controllers is alone with its stale view.
        A client that has learnt the cluster asks whichever broker it likes, so
        each attempt uses a fresh client bootstrapped to the controller and
        keeps its answer only if it came over that bootstrap connection
        (``orig_broker_id`` -1) or from the controller itself.
        """
        if self.isolated:
            return self._freshest_broker_states(topic, attempts)
        return self._states_of(controller, topic, attempts)

    def _states_of(self, broker: int, topic: str, attempts: int) -> list[PartitionState] | None:
        """The partition states as broker ``broker`` itself answers, or None."""
        from confluent_kafka.admin import AdminClient     # (see admin)
        for _ in range(attempts):
            admin = AdminClient({"bootstrap.servers": f"{self.node(broker).address}:{BROKER_PORT}",
                                 "socket.timeout.ms": 3000, "log_level": 0, "logger": _quiet_logger()})
            md = admin.list_topics(topic=topic, timeout=3)
            if md.orig_broker_id in (-1, broker):
                return self._states(md, topic)
        return None

    def _freshest_broker_states(self, topic: str, attempts: int) -> list[PartitionState] | None:
        def ask(node: Node) -> list[PartitionState] | None:
            try:
                return self._states_of(broker_id(node.name), topic, attempts) if self.brokers[
                    node.name].is_running() else None
            except Exception:  # a paused or unreachable broker: the others answer
                return None
        votes: dict[int, Counter] = {}
        for states in parallel(ask, self.broker_nodes):
            for s in states or []:
                votes.setdefault(s.partition, Counter())[s] += 1
        # most_common keeps first-seen order among ties: the lowest-numbered broker's answer
        return [votes[p].most_common(1)[0][0] for p in sorted(votes)] if votes else None

    def leaders(self, topic: str) -> dict[int, int | None]:
        return {s.partition: s.leader for s in self.partition_states(topic)}

    def isr(self, topic: str) -> dict[int, tuple[int, ...]]:
        return {s.partition: s.isr for s in self.partition_states(topic)}

    def quorum_states(self) -> dict[str, dict]:
        """Each reachable controller's view of the KRaft quorum (leaderId, leaderEpoch)."""
        def read(node: Node) -> tuple[str, dict | None]:
            try:
                res = node.run(["cat", QUORUM_STATE], check=False, timeout=5)
                return node.name, json.loads(res.out) if res.exit == 0 and res.out.strip() else None
            except Exception:
                return node.name, None
        return {name: st for name, st in parallel(read, self.controller_nodes) if st}

    def active_controller(self) -> int | None:
        """The quorum leader with the highest epoch any node knows, if it is alive."""
        best: tuple[int, int] | None = None
        for st in self.quorum_states().values():
            leader, epoch = st.get("leaderId", -1), st.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        if best is None:
            return None
        return best[0] if self.broker(best[0]).is_running() else None


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _cache_file(kind: str, key: str, suffix: str) -> Path:
    return cache_root() / kind / f"{key}{suffix}"


def _write_atomic(path: Path, data: bytes) -> None:
    """Another session may start a cluster at the same moment: readers see the
    whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _quiet_logger():
    """librdkafka logs connection errors to stderr by default; route them to logging."""
    lg = logging.getLogger("kchaos.librdkafka")
    return lg


def _transient(exc: BaseException) -> bool:
    """An admin request that failed in the client (librdkafka's local errors,
    negative codes: a broker handle torn down, a timeout, a transport error) or
    with an error Kafka marks retriable may succeed when asked again."""
    err = exc.args[0] if exc.args else None
    code = getattr(err, "code", None)
    if not callable(code):
        return False
    return code() < 0 or bool(err.retriable())
