"""`kchaos cluster up|status|down` and `kchaos clean`: a cluster by hand, and what kchaos left behind."""
from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from broker.lifecycle import BrokerSettings
from harness.run_cluster import clean_all, clean_ssh_hosts, cluster_attach, cluster_down, cluster_up
from infra.distribution import DEFAULT_KAFKA_VERSION
from infra.engine import engine_answers
from infra.errors import KchaosError, UsageError
from infra.inventory import load_inventory
from nemesis.kafka_proxy import free_ports

console = Console()
err_console = Console(stderr=True)


def register(app: click.Group) -> None:
    """Add ``kchaos cluster`` and ``kchaos clean`` to the top-level group."""
    app.add_command(cluster_group)
    app.add_command(clean_cmd)


@click.group("cluster")
def cluster_group() -> None:
    """Bring a cluster up by hand, inspect it, take it down."""


def parse_props(pairs: tuple[str, ...] | list[str] | None) -> dict[str, str]:
    props = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--broker-prop takes KEY=VALUE, got {pair!r}")
        props[key.strip()] = value.strip()
    return props


name_option = click.option("--name", default="default", show_default=True, help="Cluster name.")


@cluster_group.command("up")
@click.option("--nodes", "-n", type=int, default=3, show_default=True, help="Number of brokers (1-7).")
@click.option("--controllers", type=int, default=0, show_default=True,
              help="Controller-only nodes (1-5) beside the brokers (isolated KRaft); 0: every node is both.")
@click.option("--kafka-version", default=DEFAULT_KAFKA_VERSION, show_default=True, help="Kafka release from Maven Central.")
@name_option
@click.option("--base-image", default=None, help="Use this local image instead of a debootstrap base.")
@click.option("--broker-prop", multiple=True, help="server.properties override KEY=VALUE (repeatable).")
@click.option("--inventory", default=None, type=click.Path(),
              help="Use the SSH hosts of this inventory (TOML) instead of containers; --nodes is then ignored.")
def cluster_up_cmd(nodes: int, controllers: int, kafka_version: str, name: str, base_image: str | None,
                   broker_prop: tuple[str, ...], inventory: str | None) -> None:
    """Start a cluster and leave it running (until `kchaos cluster down`)."""
    if inventory is not None:
        nodes = len(load_inventory(inventory))
    # Every broker also advertises a PROXY listener on a port of this host,
    # where `kchaos nemesis proxy` forwards when it runs (docs/design.md,
    # "Faults inside Kafka's protocol"); the direct listener stays as it was.
    settings = BrokerSettings(properties=parse_props(broker_prop),
                              proxy_ports=free_ports([f"n{i}" for i in range(1, nodes + 1)]))
    with err_console.status(f"bringing up {nodes} Kafka {kafka_version} brokers"
                            + (f" and {controllers} controllers" if controllers else "")):
        handle = cluster_up(name, nodes, kafka_version, base_image, settings, keep=True,
                            backend="ssh" if inventory else "docker", inventory=inventory, controllers=controllers)
    console.print(soft_wrap=True, *[f"cluster [bold]{name}[/] up in {handle.timings['total_s']:.1f}s; "
                  f"bootstrap servers: {handle.kafka.bootstrap()}"])


@cluster_group.command("status")
@name_option
@click.option("--topic", default=None, help="Show only this topic's partitions.")
def cluster_status_cmd(name: str, topic: str | None) -> None:
    """Brokers, the active controller, and each partition's leader and ISR."""
    kafka = cluster_attach(name).kafka
    controller = kafka.active_controller()
    try:
        live = kafka.live_broker_ids()
    except Exception:
        live = set()
    table = Table(title=f"cluster {name}")
    for col in ("node", "address", "role", "node id", "process", "registered", "controller"):
        table.add_column(col)
    for node in kafka.nodes:
        bid = int(node.name[1:])
        state = {None: "down", "T": "paused", "Z": "down"}.get(kafka.brokers[node.name].process_state(), "running")
        role = kafka.role_of(node.name)
        registered = "-" if role == "controller" else "yes" if bid in live else "no"
        table.add_row(node.name, node.address, role, str(bid), state, registered,
                      "active" if controller == bid else "")
    console.print(table)
    try:
        md = kafka.admin().list_topics(timeout=5)
    except Exception as exc:
        console.print(f"topics unavailable: {exc}")
        return
    topics = [topic] if topic else sorted(t for t in md.topics if not t.startswith("__"))
    if topics:
        pt = Table(title="partitions")
        for col in ("topic", "partition", "leader", "isr", "replicas"):
            pt.add_column(col)
        for t in topics:
            for s in kafka.partition_states(t):
                pt.add_row(t, str(s.partition), str(s.leader), ",".join(map(str, s.isr)),
                           ",".join(map(str, s.replicas)))
        console.print(pt)


@cluster_group.command("down")
@name_option
def cluster_down_cmd(name: str) -> None:
    """Remove the cluster's containers and network."""
    console.print(cluster_down(name))


@click.command("clean")
@click.option("--name", default=None, help="Only this cluster (default: every kchaos cluster).")
@click.option("--inventory", default=None, type=click.Path(),
              help="Also heal these SSH hosts: kill brokers, remove the KCHAOS chain, reset clocks.")
def clean_cmd(name: str | None, inventory: str | None) -> None:
    """Remove every container, network and firewall chain kchaos ever made."""
    failed = []
    if inventory is not None:
        for node, status in clean_ssh_hosts(inventory).items():
            console.print(f"{node}: {'healed' if status == 'ok' else status}", highlight=False, soft_wrap=True)
            if status != "ok":
                failed.append(node)
        if not engine_answers():  # SSH-only machine: no Docker engine to clean (and none is started for it)
            if failed:
                raise KchaosError(f"could not heal {', '.join(failed)}")
            return
    containers, networks = clean_all(name)
    console.print(f"removed {containers} containers and {networks} networks")
    if failed:
        raise KchaosError(f"could not heal {', '.join(failed)}")
