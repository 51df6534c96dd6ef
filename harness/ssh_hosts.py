"""SSH hosts between runs: provisioned for brokers, healed, reset and stopped.

Hosts outlive every run, so what a container's removal does for free is done
here by hand: kill the broker, heal the faults, reset the clock. That needs the
broker's folders and process pattern and the nemesis' heal script, which is
why it lives in harness and not beside ``infra.ssh_node``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from broker.config import DATA_DIR, FAKETIME_FILE, LOG_DIR, NODE_DIRS
from broker.lifecycle import PROCESS_PATTERN
from infra import ssh_claim
from infra.distribution import KafkaDistribution
from infra.errors import KchaosError
from infra.inventory import Inventory
from infra.node import parallel, shell_join
from infra.ssh_node import SshNode, nodes_for
from infra.ssh_provision import ProvisionReport, provision
from nemesis.packages import heal_node_script

log = logging.getLogger(__name__)


def provision_hosts(nodes: Sequence[SshNode], dist: KafkaDistribution) -> dict[str, ProvisionReport]:
    """Every host ready for ``broker.Broker``: packages, jars and the broker's
    folders (``infra.ssh_provision``), and a clock file at +0s."""
    def prepare(node: SshNode) -> ProvisionReport:
        report = provision(node, dist, folders=NODE_DIRS)
        node.run(["sh", "-c", f"printf '+0s\\n' > {FAKETIME_FILE}"])
        return report

    return dict(zip([n.name for n in nodes], parallel(prepare, nodes)))


def heal_script() -> str:
    """Kill the broker, remove the KCHAOS chain, reset the clock (nemesis' own heal)."""
    return "\n".join([f"pkill -KILL -f {shell_join([PROCESS_PATTERN])} 2>/dev/null || true",
                      heal_node_script()])


def heal_node(node: SshNode, timeout_s: float = 60.0) -> None:
    node.run(["sh", "-c", heal_script()], timeout=timeout_s)


def heal_hosts(inventory: Inventory | str | Path) -> dict[str, str]:
    """What `kchaos clean --inventory` does: on every host, kill the broker, remove
    the KCHAOS iptables chain, reset the clock file to +0s and drop any cluster's
    claim on the host. Hosts that cannot be reached are reported, not raised:
    {node: "ok" | error}."""
    nodes = nodes_for(inventory)

    def heal(node: SshNode) -> str:
        try:
            heal_node(node)
            ssh_claim.drop(node)
            return "ok"
        except KchaosError as exc:
            return str(exc)
        finally:
            node.close()

    return dict(zip([n.name for n in nodes], parallel(heal, nodes)))


def reset_hosts(nodes: Sequence[SshNode]) -> None:
    """Before a new cluster: no broker, no fault, no data or logs from an earlier one."""
    def reset(node: SshNode) -> None:
        heal_node(node)
        node.run(["sh", "-c", f"rm -rf {DATA_DIR}/* {LOG_DIR}/*"], timeout=120)

    parallel(reset, nodes)


def stop_hosts(nodes: Sequence[SshNode], cluster: str | None = None) -> dict[str, str]:
    """A cluster's end on SSH hosts: brokers killed, faults healed, data kept for a
    look, and (given the cluster's name) the hosts' claim given back."""
    def stop(node: SshNode) -> str:
        try:
            heal_node(node)
            if cluster is not None:
                ssh_claim.release(node, cluster)
            return "ok"
        except KchaosError as exc:
            log.warning("stopping %s failed: %s", node.name, exc)
            return str(exc)
        finally:
            node.close()

    return dict(zip([n.name for n in nodes], parallel(stop, nodes)))
