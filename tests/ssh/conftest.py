"""One set of stand-in SSH hosts per test session: three sshd-only containers
from the node image, a client key pair, per-host host keys and a known_hosts
file, all fresh. Removed (by name) at the end, even after a failure."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ssh.standin import StandInHosts, new_ed25519, write_key


@dataclass
class SshEnv:
    work: Path
    key: Path          # authorized on every host, for root and for the user "kchaos"
    wrong_key: Path    # authorized nowhere
    known_hosts: Path  # the true host keys of every host
    hosts: StandInHosts
    dist: Any

    def inventory(self, file: str, hosts: list[dict] | None = None, **top) -> Path:
        """Write an inventory for the stand-in hosts (override any key)."""
        import tomli_w
        data = {"key": str(self.key), "known_hosts": str(self.known_hosts), "connect_timeout": 5, **top,
                "hosts": hosts if hosts is not None else [{"address": h.address} for h in self.hosts.hosts]}
        path = self.work / file
        path.write_text(tomli_w.dumps({k: v for k, v in data.items() if v is not None}))
        return path


@pytest.fixture(scope="session")
def ssh_env(tmp_path_factory):
    from infra.distribution import resolve_kafka
    from infra.image import build_node_image
    work = tmp_path_factory.mktemp("ssh")
    private, public = new_ed25519()
    key = write_key(work / "id_ed25519", private)
    wrong = write_key(work / "wrong_ed25519", new_ed25519()[0])
    dist = resolve_kafka()
    hosts = StandInHosts(f"ssh{os.getpid()}", build_node_image(dist), 3, work)
    try:
        hosts.start(public, sudo_shim_on=("n3",))
        yield SshEnv(work, key, wrong, hosts.known_hosts(work / "known_hosts"), hosts, dist)
    finally:
        hosts.remove()


@pytest.fixture(scope="session")
def inventory(ssh_env) -> Path:
    return ssh_env.inventory("hosts.toml")


@pytest.fixture(scope="session")
def ssh_nodes(inventory):
    from infra.ssh_node import connect_all
    nodes = connect_all(inventory)
    try:
        yield nodes
    finally:
        for n in nodes:
            n.close()
