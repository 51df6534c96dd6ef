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
from infra import docker_backend
from infra.distribution import DEFAULT_KAFKA_VERSION, cache_root, resolve_kafka
from infra.errors import KchaosError
from infra.image import build_node_image

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


def cluster_up(name: str = DEFAULT_CLUSTER, nodes: int = 3, kafka_version: str = DEFAULT_KAFKA_VERSION,
               base_image: str | None = None, settings: BrokerSettings | None = None,
               keep: bool = False, ready_timeout_s: float = 120.0) -> ClusterHandle:
    """Nodes up, brokers formatted and started, every broker ready.

    On any failure the half-made cluster is removed before the error goes up.
    """
    t0 = time.monotonic()
    docker_backend.validate_node_count(nodes)
    dist = resolve_kafka(kafka_version)
    image = build_node_image(dist, base_image)
    t_image = time.monotonic()
    dc = docker_backend.create_cluster(name, image, nodes)
    try:
        kafka = KafkaCluster(dc.nodes, settings or BrokerSettings())
        kafka.setup(timeout_s=ready_timeout_s)
    except BaseException:
        docker_backend.destroy(name)
        raise
    if keep:
        mark_kept(name, kafka_version, settings)
    t_ready = time.monotonic()
    return ClusterHandle(name, kafka, "docker",
                         {"image_s": t_image - t0, "start_s": t_ready - t_image, "total_s": t_ready - t0})


def cluster_attach(name: str = DEFAULT_CLUSTER, settings: BrokerSettings | None = None) -> ClusterHandle:
    dc = docker_backend.attach_cluster(name)
    return ClusterHandle(name, KafkaCluster(dc.nodes, settings or BrokerSettings()), "docker")


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
         "broker_properties": (settings.properties if settings else {})}))


def kept_clusters() -> frozenset[str]:
    d = _kept_dir()
    return frozenset(p.stem for p in d.glob("*.json")) if d.exists() else frozenset()


def cluster_down(name: str = DEFAULT_CLUSTER) -> tuple[int, int]:
    (_kept_dir() / f"{name}.json").unlink(missing_ok=True)
    return docker_backend.destroy(name)


def clean_all(name: str | None = None) -> tuple[int, int]:
    """Remove every container and network kchaos ever made, or one cluster's
    (firewall chains and clock offsets live inside the containers and go with them)."""
    if name is None:
        for p in _kept_dir().glob("*.json") if _kept_dir().exists() else []:
            p.unlink(missing_ok=True)
    else:
        (_kept_dir() / f"{name}.json").unlink(missing_ok=True)
    return docker_backend.destroy(name)


def sweep_dead_runs() -> tuple[int, int]:
    """Leftovers of runs whose harness died: removed before a new run starts."""
    return docker_backend.destroy(None, only_dead_owners=True, spare=kept_clusters())
