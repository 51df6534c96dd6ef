"""server.properties for a KRaft node: combined (broker + controller), or
broker-only and controller-only for isolated KRaft (docs/design.md, "Isolated KRaft").

Static voters (``controller.quorum.voters``, every controller) by default, so
formatting needs no extra flags and the quorum is known up front; a dynamic
quorum (KIP-853, Kafka 3.9+) names only ``controller.quorum.bootstrap.servers``
and the voter set lives in the metadata log (docs/design.md, "Quorum
membership"). Every property can be overridden from the run config.
"""
from __future__ import annotations

import base64
import posixpath
import random
import uuid
from typing import Mapping, Sequence

BROKER_PORT = 9092
CONTROLLER_PORT = 9093
# The client listener a run's protocol proxy forwards to (docs/design.md,
# "Faults inside Kafka's protocol"): advertised as the proxy's address, so
# clients that bootstrap through the proxy stay behind it.
PROXY_PORT = 9094
DATA_DIR = "/var/lib/kafka/data"
LOG_DIR = "/var/log/kafka"
CONFIG_PATH = "/etc/kafka/server.properties"
FAKETIME_FILE = "/etc/kchaos/faketime"
# Every folder the broker (and the clock nemesis) writes on its node: what a
# freshly provisioned host must have before the first broker starts.
NODE_DIRS = (posixpath.dirname(CONFIG_PATH), DATA_DIR, LOG_DIR, posixpath.dirname(FAKETIME_FILE))

# A node's KRaft role (Kafka's process.roles): combined nodes are both; an
# isolated cluster has broker-only nodes beside controller-only ones.
COMBINED = "combined"
BROKER = "broker"
CONTROLLER = "controller"
PROCESS_ROLES = {COMBINED: "broker,controller", BROKER: "broker", CONTROLLER: "controller"}

# How the KRaft voter set is known: fixed in every node's config (static), or
# kept in the metadata log and changed with add-/remove-controller (dynamic, KIP-853).
STATIC_QUORUM = "static"
DYNAMIC_QUORUM = "dynamic"
QUORUMS = (STATIC_QUORUM, DYNAMIC_QUORUM)


def broker_id(node_name: str) -> int:
    """n1 -> 1: node names and broker ids are the same numbering."""
    return int(node_name.lstrip("n"))


def new_cluster_id(rng: random.Random | None = None) -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.

    Redrawn when it starts with "-", as Kafka's own Uuid.randomUuid does:
    the storage tool would read such an id as a flag.
    """
    while True:
        raw = rng.getrandbits(128).to_bytes(16, "big") if rng else uuid.uuid4().bytes
        cluster_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def property_value(value: object) -> str:
    """A config value (from TOML) as Kafka reads it: booleans lower-case, the rest as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_properties(node_name: str, address: str, voters: Sequence[tuple[str, str]],
                      overrides: Mapping[str, object] | None = None, proxy_port: int | None = None,
                      role: str = COMBINED, brokers: int | None = None, quorum: str = STATIC_QUORUM) -> str:
    """``voters`` is every (node name, address) of the controllers (every node
    when combined); ``brokers`` the broker count (replication factors), the
    voter count by default. With ``proxy_port`` the broker gets a PROXY listener
    on PROXY_PORT advertised as 127.0.0.1:``proxy_port``, where the harness's
    proxy for it listens. A broker-only node listens for clients only; a
    controller-only node for the quorum only, and advertises nothing to clients.
    A ``quorum`` "dynamic" names the voters' addresses as bootstrap servers, not as voters."""
    n = len(voters) if brokers is None else brokers
    props: dict[str, object] = {
        "process.roles": PROCESS_ROLES[role],
        "node.id": broker_id(node_name),
        "controller.quorum.voters": ",".join(f"{broker_id(v)}@{a}:{CONTROLLER_PORT}" for v, a in voters),
        "listeners": f"PLAINTEXT://{address}:{BROKER_PORT},CONTROLLER://{address}:{CONTROLLER_PORT}",
        # Addresses, not names: the harness host cannot resolve n1..nN.
        "advertised.listeners": f"PLAINTEXT://{address}:{BROKER_PORT}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": DATA_DIR,
        "num.partitions": 1,
        "default.replication.factor": min(3, n),
        "offsets.topic.replication.factor": min(3, n),
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": min(3, n),
        "transaction.state.log.min.isr": min(2, n),
        "transaction.state.log.num.partitions": 3,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "unclean.leader.election.enable": "false",
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.segment.bytes": 16 * 1024 * 1024,
    }
    if role == BROKER:
        props["listeners"] = f"PLAINTEXT://{address}:{BROKER_PORT}"
    elif role == CONTROLLER:
        props["listeners"] = f"CONTROLLER://{address}:{CONTROLLER_PORT}"
        del props["advertised.listeners"], props["inter.broker.listener.name"]
        proxy_port = None
    if proxy_port is not None:
        props["listeners"] += f",PROXY://{address}:{PROXY_PORT}"
        props["advertised.listeners"] += f",PROXY://127.0.0.1:{proxy_port}"
        props["listener.security.protocol.map"] += ",PROXY:PLAINTEXT"
    if quorum == DYNAMIC_QUORUM:
        del props["controller.quorum.voters"]
        props["controller.quorum.bootstrap.servers"] = ",".join(f"{a}:{CONTROLLER_PORT}" for _, a in voters)
    for key, value in (overrides or {}).items():
        props[key] = value
    lines = ["# written by kchaos"]
    for key in sorted(props):
        lines.append(f"{key}={property_value(props[key])}")
    return "\n".join(lines) + "\n"
