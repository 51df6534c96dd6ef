"""Bringing a whole cluster up and down: infra backend + brokers.

This is the one place that knows both the backend (Docker today, SSH later)
and the broker layer; everything above it gets a ``ClusterHandle``.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker.cluster import KafkaCluster
from broker.lifecycle import BrokerSettings
from harness import ssh_hosts
from infra import docker_backend, ssh_claim
from infra.distribution import DEFAULT_KAFKA_VERSION, cache_root, resolve_kafka
from infra.errors import UsageError
from infra.image import build_node_image
from infra.inventory import load_inventory
from infra.ssh_node import connect_all, nodes_for

log = logging.getLogger(__name__)

DEFAULT_CLUSTER = "default"


@dataclass
class ClusterHandle:
    name: str
    kafka: KafkaCluster
    backend: str = "docker"
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def nodes(self):
        return self.kafka.nodes

    def down(self) -> None:
        if self.backend == "docker":
            docker_backend.destroy(self.name)
        elif self.backend == "ssh":
            # The hosts stay: brokers killed, faults healed; data and logs kept for a look.
            ssh_hosts.stop_hosts(self.kafka.nodes, cluster=self.name)
            _ssh_record(self.name).unlink(missing_ok=True)


def cluster_up(name: str = DEFAULT_CLUSTER, nodes: int = 3, kafka_version: str = DEFAULT_KAFKA_VERSION,
               base_image: str | None = None, settings: BrokerSettings | None = None,
               keep: bool = False, ready_timeout_s: float = 120.0, backend: str = "docker",
               inventory: str | Path | None = None, controllers: int = 0) -> ClusterHandle:
    """Nodes up, brokers formatted and started, every broker ready.

    ``controllers`` > 0: isolated KRaft, that many controller-only containers
    beside ``nodes`` broker-only ones; 0: combined nodes. On SSH hosts the
    inventory's roles say which hosts are controllers (infra/inventory.py).
    On any failure the half-made cluster is removed before the error goes up.
    With ``backend="ssh"`` the nodes are the hosts of ``inventory`` (``nodes`` and
    ``base_image`` are then unused).
    """
    docker_backend.validate_controller_count(controllers)
    if backend == "ssh":
        return _cluster_up_ssh(name, inventory, kafka_version, settings, keep, ready_timeout_s, controllers)
    t0 = time.monotonic()
    docker_backend.validate_node_count(nodes)
    dist = resolve_kafka(kafka_version)
    image = build_node_image(dist, base_image)
    t_image = time.monotonic()
    dc = docker_backend.create_cluster(name, image, nodes, controllers)
    t_containers = time.monotonic()
    try:
        kafka = KafkaCluster(dc.nodes, settings or BrokerSettings(), dc.controllers)
        kafka.setup(timeout_s=ready_timeout_s)
    except BaseException:
        docker_backend.destroy(name)
        raise
    if keep:
        mark_kept(name, kafka_version, settings)
    t_ready = time.monotonic()
    return ClusterHandle(name, kafka, "docker",
                         {"image_s": t_image - t0, "containers_s": t_containers - t_image, **kafka.timings,
                          "start_s": t_ready - t_image, "total_s": t_ready - t0})


def cluster_attach(name: str = DEFAULT_CLUSTER, settings: BrokerSettings | None = None,
                   inventory: str | Path | None = None) -> ClusterHandle:
    """A running cluster: the SSH hosts of ``inventory`` (or of the SSH cluster
    brought up under ``name``), else the Docker cluster ``name``."""
    if inventory is None and _ssh_record(name).exists():
        inventory = json.loads(_ssh_record(name).read_text())["inventory"]
    if inventory is not None:
        inv = load_inventory(inventory)
        return ClusterHandle(name, KafkaCluster(nodes_for(inv), settings or BrokerSettings(), inv.controllers), "ssh")
    dc = docker_backend.attach_cluster(name)
    return ClusterHandle(name, KafkaCluster(dc.nodes, settings or BrokerSettings(), dc.controllers), "docker")


def _kept_dir() -> Path:
    return cache_root() / "clusters"


def mark_kept(name: str, kafka_version: str, settings: BrokerSettings | None) -> None:
    """Record a cluster left up on purpose, so sweeps of dead runs spare it.

    Written only after a successful bring-up: a `cluster up` killed half-way
    leaves no record and its leftovers are swept like any dead run's.
    """
    _kept_dir().mkdir(parents=True, exist_ok=True)
    (_kept_dir() / f"{name}.json").write_text(json.dumps(
        {"name": name, "kafka_version": kafka_version,
         "broker_properties": (settings.properties if settings else {}),
         "proxy_ports": (settings.proxy_ports if settings else {})}))


def kept_proxy_ports(name: str) -> dict[str, int]:
    """The ports a cluster left up advertises on its PROXY listener, per
    broker ({} when it has none: brought up by an older kchaos, or by a run)."""
    path = _kept_dir() / f"{name}.json"
    if not path.exists():
        return {}
    return {k: int(v) for k, v in (json.loads(path.read_text()).get("proxy_ports") or {}).items()}


def kept_clusters() -> frozenset[str]:
    d = _kept_dir()
    return frozenset(p.stem for p in d.glob("*.json")) if d.exists() else frozenset()


def cluster_down(name: str = DEFAULT_CLUSTER) -> str:
    """Take the cluster down; says what was done, in a sentence for the user."""
    (_kept_dir() / f"{name}.json").unlink(missing_ok=True)
    if _ssh_record(name).exists():
        handle = cluster_attach(name)
        handle.down()
        return (f"stopped the brokers and healed faults on {len(handle.kafka.nodes)} SSH hosts "
                "(their data and logs stay)")
    containers, networks = docker_backend.destroy(name)
    return f"removed {containers} containers and {networks} networks"


def clean_all(name: str | None = None) -> tuple[int, int]:
    """Remove every container and network kchaos ever made, or one cluster's
    (firewall chains and clock offsets live inside the containers and go with them).
    SSH hosts outlive runs: ``clean_ssh_hosts`` heals them."""
    if name is None:
        for p in _kept_dir().glob("*.json") if _kept_dir().exists() else []:
            p.unlink(missing_ok=True)
    else:
        (_kept_dir() / f"{name}.json").unlink(missing_ok=True)
    return docker_backend.destroy(name)


def sweep_dead_runs() -> tuple[int, int]:
    """Leftovers of runs whose harness died: removed before a new run starts."""
    return docker_backend.destroy(None, only_dead_owners=True, spare=kept_clusters())


# -- SSH hosts (infra.ssh_node, harness.ssh_hosts) --------------------------------------
def _ssh_record(name: str) -> Path:
    """Which inventory an SSH cluster runs on, so `cluster status`/`nemesis`/`down` find it by name."""
    return cache_root() / "ssh-clusters" / f"{name}.json"


def _cluster_up_ssh(name: str, inventory: str | Path | None, kafka_version: str,
                    settings: BrokerSettings | None, keep: bool, ready_timeout_s: float,
                    controllers: int = 0) -> ClusterHandle:
    """``controllers``: 0, or the count the inventory's roles give (a run
    config's, checked against it); any other count is refused."""
    if inventory is None:
        raise UsageError("the ssh backend needs an inventory file (--inventory FILE)")
    docker_backend.validate_cluster_name(name)
    t0 = time.monotonic()
    dist = resolve_kafka(kafka_version)
    inv = load_inventory(inventory)
    inv.require_controllers(controllers)
    nodes = connect_all(inv)
    try:
        ssh_claim.claim_all(nodes, name, kept=kept_clusters())
    except BaseException:
        for node in nodes:
            node.close()
        raise
    try:
        ssh_hosts.reset_hosts(nodes)
        reports = ssh_hosts.provision_hosts(nodes, dist)
        log.info("hosts provisioned: %s", reports)
        t_prov = time.monotonic()
        _ssh_record(name).parent.mkdir(parents=True, exist_ok=True)
        _ssh_record(name).write_text(json.dumps({"name": name, "inventory": str(inv.path or inventory)}))
        kafka = KafkaCluster(nodes, settings or BrokerSettings(), inv.controllers)
        kafka.setup(timeout_s=ready_timeout_s)
    except BaseException:
        ssh_hosts.stop_hosts(nodes, cluster=name)
        _ssh_record(name).unlink(missing_ok=True)
        raise
    if keep:
        mark_kept(name, kafka_version, settings)
    t_ready = time.monotonic()
    return ClusterHandle(name, kafka, "ssh",
                         {"provision_s": t_prov - t0, "start_s": t_ready - t_prov, "total_s": t_ready - t0})


def clean_ssh_hosts(inventory: str | Path) -> dict[str, str]:
    """`kchaos clean --inventory`: kill brokers, remove the KCHAOS chain, reset clocks;
    forget SSH clusters recorded on this inventory. Returns {node: "ok" | error}."""
    report = ssh_hosts.heal_hosts(inventory)
    target = str(Path(inventory).expanduser().resolve())
    d = _ssh_record("x").parent
    for rec in d.glob("*.json") if d.exists() else []:
        try:
            if json.loads(rec.read_text()).get("inventory") == target:
                rec.unlink(missing_ok=True)
                (_kept_dir() / rec.name).unlink(missing_ok=True)
        except (OSError, ValueError):
            pass
    return report
