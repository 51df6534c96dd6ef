"""Nodes as Docker containers on one ``internal`` network per cluster.

Everything created carries the ``kchaos`` label plus the cluster name and the
creating process's pid, so ``clean`` can find leftovers of a harness that was
killed, and a new run can sweep the leftovers of dead runs without touching
clusters that are still in use.
"""
from __future__ import annotations

import io
import ipaddress
import logging
import os
import random
import re
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from infra.engine import docker_client
from infra.errors import ClusterNotFound, NodeCommandError, NodeUnreachable, UsageError
from infra.node import DEFAULT_TIMEOUT_S, MAX_CONTROLLERS, CommandResult, checked, pid_alive, shell_join

# The docker SDK is imported in the functions that use it: it takes ~0.2 s to
# load, and `kchaos --help` imports this module (through harness.run_cluster).

log = logging.getLogger(__name__)

LABEL = "kchaos"
LABEL_CLUSTER = "kchaos.cluster"
LABEL_PID = "kchaos.pid"
# On controller-only containers of an isolated-KRaft cluster, so an attach knows the roles.
LABEL_ROLE = "kchaos.role"
ROLE_CONTROLLER = "controller"
SUBNET_POOL = ipaddress.ip_network("10.77.0.0/16")
MAX_NODES = 7


class DockerNode:
    """One container. Commands run through ``docker exec`` as root."""

    def __init__(self, container, name: str, address: str):
        self._container = container
        self.name = name
        self.address = address

    def run(self, argv: Sequence[str], stdin: bytes | None = None, check: bool = True,
            timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None,
            detach: bool = False) -> CommandResult:
        import docker.errors     # (see the imports)
        argv = [str(a) for a in argv]
        full = argv
        if stdin is not None:
            tmp = f"/tmp/.kchaos-stdin-{os.getpid()}-{time.monotonic_ns()}"
            self._put_bytes(stdin, tmp)
            full = ["sh", "-c", f"{shell_join(argv)} < {tmp}; rc=$?; rm -f {tmp}; exit $rc"]
        if not detach:
            # No timeout in the exec API: coreutils' timeout inside the node enforces it.
            full = ["timeout", "-k", "5", str(max(1, int(timeout))), *full]
        try:
            if detach:
                self._container.exec_run(full, environment=env, detach=True)
                return CommandResult(0, "", "")
            exit_code, out, err = self._exec(full, env)
        except docker.errors.NotFound as exc:
            raise NodeUnreachable(f"{self.name}: container is gone") from exc
        except docker.errors.APIError as exc:
            raise NodeUnreachable(f"{self.name}: {exc.explanation or exc}") from exc
        result = CommandResult(exit_code, out.decode(errors="replace"), err.decode(errors="replace"))
        if result.exit == 124:
            result = CommandResult(124, result.out, result.err + f"\ntimed out after {timeout:.0f}s")
        return checked(self.name, argv, result, check)

    def _exec(self, argv: list[str], env: dict[str, str] | None) -> tuple[int, bytes, bytes]:
        """Exit code, stdout and stderr of ``argv``, the output's frames joined once.
        ``exec_run(demux=True)`` appends each frame to the bytes so far: quadratic, and a
        replica dump of 100 MB ran into its 300 s timeout on that alone."""
        api = self._container.client.api
        exec_id = api.exec_create(self._container.id, argv, stdout=True, stderr=True, environment=env)["Id"]
        out: list[bytes] = []
        err: list[bytes] = []
        for o, e in api.exec_start(exec_id, stream=True, demux=True):
            if o:
                out.append(o)
            if e:
                err.append(e)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return (code if code is not None else -1), b"".join(out), b"".join(err)

    def _put_bytes(self, data: bytes, remote: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(os.path.basename(remote))
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        parent = os.path.dirname(remote) or "/"
        self.run(["mkdir", "-p", parent])
        self._container.put_archive(parent, buf.getvalue())

    def put(self, local: Path, remote: str) -> None:
        self._put_bytes(Path(local).read_bytes(), remote)

    def get(self, remote: str, local: Path) -> None:
        import docker.errors     # (see the imports)
        try:
            stream, _ = self._container.get_archive(remote)
        except docker.errors.NotFound as exc:
            raise NodeCommandError(self.name, ["get", remote], 1, "", f"{remote}: no such file") from exc
        buf = io.BytesIO(b"".join(stream))
        with tarfile.open(fileobj=buf) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise NodeCommandError(self.name, ["get", remote], 1, "", f"{remote}: not a regular file")
            data = tar.extractfile(member).read()
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(data)

    def __repr__(self) -> str:
        return f"DockerNode({self.name}, {self.address})"


@dataclass
class DockerCluster:
    name: str
    network: str
    subnet: str
    nodes: list[DockerNode]
    # Names of the controller-only nodes (isolated KRaft); empty when every node is combined.
    controllers: list[str] = field(default_factory=list)


def _network_name(cluster: str) -> str:
    return f"kchaos-{cluster}"


def _container_name(cluster: str, node: str) -> str:
    return f"kchaos-{cluster}-{node}"


def _used_subnets() -> list[ipaddress.IPv4Network]:
    used = []
    for net in docker_client().networks.list():
        for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
            if cfg.get("Subnet"):
                try:
                    used.append(ipaddress.ip_network(cfg["Subnet"], strict=False))
                except ValueError:
                    pass
    # Host routes too: a subnet that shadows a real route would misroute traffic.
    try:
        out = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            dest = line.split()[0]
            if "/" in dest:
                used.append(ipaddress.ip_network(dest, strict=False))
    except (OSError, ValueError):
        pass
    return used


def _free_subnet(skip: int = 0) -> ipaddress.IPv4Network:
    used = _used_subnets()
    free = [c for c in SUBNET_POOL.subnets(new_prefix=24) if not any(c.overlaps(u) for u in used)]
    if free:
        return free[min(skip, len(free) - 1)]
    raise UsageError(f"no free /24 left in {SUBNET_POOL} for a new cluster network; run kchaos clean")


def validate_node_count(n: int) -> int:
    if not isinstance(n, int) or not 1 <= n <= MAX_NODES:
        raise UsageError(f"node count must be between 1 and {MAX_NODES}, got {n}")
    return n


def validate_controller_count(n: int) -> int:
    """0 (combined nodes) or 1 to MAX_CONTROLLERS controller-only nodes."""
    if not isinstance(n, int) or not 0 <= n <= MAX_CONTROLLERS:
        raise UsageError(f"controller count must be between 0 (combined nodes) and {MAX_CONTROLLERS}, got {n}")
    return n


def validate_cluster_name(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,39}", name or ""):
        raise UsageError(f"cluster name {name!r} must be 1-40 lowercase letters, digits, '.', '_' or '-'")
    return name


def create_internal_network(name: str, labels: dict[str, str]):
    """An ``internal`` bridge network (no route off this machine) on a free /24.

    Another session may take the same free /24 between our look and our
    create, so a clash on the subnet moves on to the next free one.
    Returns (network, subnet).
    """
    import docker.errors     # (see the imports)
    import docker.types
    client = docker_client()
    for attempt in range(20):
        subnet = _free_subnet(skip=attempt)
        gateway = str(next(subnet.hosts()))
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=str(subnet), gateway=gateway)])
        try:
            network = client.networks.create(name, driver="bridge", internal=True, ipam=ipam,
                                             labels=labels, check_duplicate=True)
            return network, subnet
        except docker.errors.APIError as exc:
            if "overlap" not in str(exc).lower():
                raise
            time.sleep(random.random() * 0.5)
    raise UsageError("could not find a free subnet for a cluster network; run kchaos clean")


def create_cluster(name: str, image: str, n: int, controllers: int = 0) -> DockerCluster:
    """Make the network and n containers, plus ``controllers`` controller-only
    ones numbered after them (n+1, ...); no Kafka is started here."""
    validate_node_count(n)
    validate_controller_count(controllers)
    validate_cluster_name(name)
    client = docker_client()
    if client.networks.list(filters={"label": f"{LABEL_CLUSTER}={name}"}):
        raise UsageError(f"a cluster named {name!r} already exists; run `kchaos cluster down --name {name}` "
                         "or `kchaos clean`")
    labels = {LABEL: "1", LABEL_CLUSTER: name, LABEL_PID: str(os.getpid())}
    network, subnet = create_internal_network(_network_name(name), labels)
    hosts = list(subnet.hosts())

    def make(i: int) -> DockerNode:
        node_name = f"n{i}"
        address = str(hosts[10 + i - 1])  # .11, .12, ...
        api = client.api
        node_labels = {**labels, LABEL_ROLE: ROLE_CONTROLLER} if i > n else labels
        # Created straight on the internal network: never on the default bridge,
        # not even for a moment, so a node has no route off this machine.
        created = api.create_container(
            image, name=_container_name(name, node_name), hostname=node_name, labels=node_labels,
            detach=True,
            host_config=api.create_host_config(cap_add=["NET_ADMIN"], network_mode=network.name,
                                               mem_limit="1500m"),
            networking_config=api.create_networking_config({
                network.name: api.create_endpoint_config(ipv4_address=address, aliases=[node_name])}))
        container = client.containers.get(created["Id"])
        container.start()
        return DockerNode(container, node_name, address)

    # In parallel: each create + start is a few engine round trips that wait on dockerd, not on us.
    with ThreadPoolExecutor(max_workers=n + controllers) as pool:
        nodes = list(pool.map(make, range(1, n + controllers + 1)))
    return DockerCluster(name, network.name, str(subnet), nodes, [f"n{i}" for i in range(n + 1, n + controllers + 1)])


def attach_cluster(name: str) -> DockerCluster:
    """Find a running cluster by name (for `cluster status`, `nemesis`, ...)."""
    client = docker_client()
    nets = client.networks.list(filters={"label": f"{LABEL_CLUSTER}={name}"})
    if not nets:
        raise ClusterNotFound(f"no kchaos cluster named {name!r} is running; start one with `kchaos cluster up`")
    net = client.networks.get(nets[0].id)
    subnet = net.attrs["IPAM"]["Config"][0]["Subnet"]
    containers = client.containers.list(all=True, filters={"label": f"{LABEL_CLUSTER}={name}"}, ignore_removed=True)
    nodes = []
    controllers = []
    for c in containers:
        address = c.attrs["NetworkSettings"]["Networks"][net.name]["IPAddress"]
        nodes.append(DockerNode(c, c.attrs["Config"]["Hostname"], address))
        if c.labels.get(LABEL_ROLE) == ROLE_CONTROLLER:
            controllers.append(nodes[-1].name)
    nodes.sort(key=lambda node: int(node.name[1:]))
    return DockerCluster(name, net.name, subnet, nodes, sorted(controllers, key=lambda v: int(v[1:])))


def list_clusters() -> list[str]:
    nets = docker_client().networks.list(filters={"label": LABEL})
    return sorted({n.attrs["Labels"].get(LABEL_CLUSTER, "?") for n in (docker_client().networks.get(x.id) for x in nets)})


def destroy(cluster: str | None = None, only_dead_owners: bool = False,
            spare: frozenset[str] = frozenset()) -> tuple[int, int]:
    """Remove containers and networks of one cluster, or of all kchaos clusters.

    With ``only_dead_owners``, spare clusters named in ``spare`` (kept on purpose
    by ``cluster up``/``--keep-cluster``) and those whose creating process still
    lives. Returns (containers removed, networks removed).
    """
    import docker.errors     # (see the imports)
    client = docker_client()
    flt = {"label": f"{LABEL_CLUSTER}={cluster}"} if cluster else {"label": LABEL}

    def doomed(labels: dict[str, str]) -> bool:
        if not only_dead_owners:
            return True
        if labels.get(LABEL_CLUSTER) in spare:
            return False
        try:
            return not pid_alive(int(labels.get(LABEL_PID, "0")))
        except ValueError:
            return True

    n_containers = n_networks = 0
    for c in client.containers.list(all=True, filters=flt, ignore_removed=True):
        if doomed(c.labels):
            try:
                c.remove(force=True)
                n_containers += 1
            except docker.errors.NotFound:
                pass
    for net in client.networks.list(filters=flt):
        if doomed(net.attrs.get("Labels") or {}):
            try:
                client.networks.get(net.id).remove()
                n_networks += 1
            except docker.errors.NotFound:
                pass
    return n_containers, n_networks
