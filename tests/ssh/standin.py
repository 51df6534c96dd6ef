"""Stand-in SSH hosts for the SSH backend's tests: containers that run only sshd.

Docker is only how the test makes hosts; the code under test reaches them over
SSH and nothing else. Everything is labelled like the Docker backend's
clusters (``kchaos``, ``kchaos.cluster``, ``kchaos.pid``), so ``kchaos clean``
finds leftovers and other sessions' sweeps spare them while this process lives.
"""
from __future__ import annotations

import io
import os
import socket
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SSH_USER = "kchaos"  # a non-root user on every host; passwordless "sudo" only where a shim is installed
HOST_KEY_PATH = "/etc/ssh/kchaos_host_ed25519_key"
# A pass-through stand-in for sudo (the image has none): enough to exercise the
# non-root code path (sudo -n, upload then install) on paths the user may write.
SUDO_SHIM = b'#!/bin/sh\n[ "$1" = "-n" ] && shift\n[ "$1" = "--" ] && shift\nexec "$@"\n'


def new_ed25519() -> tuple[bytes, str]:
    """(OpenSSH private key bytes, "ssh-ed25519 AAAA..." public line)."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption())
    public = key.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH).decode()
    return private, public


def write_key(path: Path, private: bytes) -> Path:
    path.write_bytes(private)
    path.chmod(0o600)
    return path


@dataclass
class StandInHost:
    name: str
    address: str
    container: str
    host_key_line: str  # "ssh-ed25519 AAAA..."


@dataclass
class StandInHosts:
    cluster: str
    image: str
    n: int
    workdir: Path
    hosts: list[StandInHost] = field(default_factory=list)
    network: str | None = None
    subnet: str | None = None
    unused_address: str | None = None  # in the subnet, no host behind it

    def start(self, client_public_key: str, sudo_shim_on: tuple[str, ...] = ()) -> "StandInHosts":
        from infra.docker_backend import create_internal_network
        from infra.engine import docker_client
        client = docker_client()
        api = client.api
        labels = {"kchaos": "1", "kchaos.cluster": self.cluster, "kchaos.pid": str(os.getpid())}
        self.network = f"kchaos-{self.cluster}"
        net, subnet = create_internal_network(self.network, labels)
        hosts = list(subnet.hosts())
        self.subnet = str(subnet)
        self.unused_address = str(hosts[99])
        script = (f"useradd -m -p '*' -s /bin/sh {SSH_USER} && mkdir -p /home/{SSH_USER}/.ssh "
                  f"&& cp /root/.ssh/authorized_keys /home/{SSH_USER}/.ssh/ "
                  f"&& chown -R {SSH_USER}: /home/{SSH_USER}/.ssh && chmod 700 /home/{SSH_USER}/.ssh "
                  f"&& exec /usr/sbin/sshd -D -e -h {HOST_KEY_PATH} -o UsePAM=no")
        for i in range(1, self.n + 1):
            name, address = f"n{i}", str(hosts[10 + i - 1])
            container = f"kchaos-{self.cluster}-{name}"
            host_private, host_public = new_ed25519()
            created = api.create_container(
                self.image, name=container, hostname=name, labels=labels, detach=True,
                command=["sh", "-c", script],
                host_config=api.create_host_config(cap_add=["NET_ADMIN"], network_mode=self.network,
                                                   mem_limit="1500m"),
                networking_config=api.create_networking_config({
                    self.network: api.create_endpoint_config(ipv4_address=address, aliases=[name])}))
            self.hosts.append(StandInHost(name, address, container, host_public))
            files = {"root/.ssh/authorized_keys": (client_public_key.encode() + b"\n", 0o600),
                     HOST_KEY_PATH.lstrip("/"): (host_private, 0o600),
                     HOST_KEY_PATH.lstrip("/") + ".pub": (host_public.encode() + b"\n", 0o644)}
            if name in sudo_shim_on:
                files["usr/local/bin/sudo"] = (SUDO_SHIM, 0o755)
            api.put_archive(created["Id"], "/", _tar(files))
            api.start(created["Id"])
        for h in self.hosts:
            wait_for_sshd(h.address)
        return self

    def known_hosts(self, path: Path, hosts: list[StandInHost] | None = None) -> Path:
        path.write_text("".join(f"{h.address} {h.host_key_line}\n" for h in (hosts or self.hosts)))
        return path

    def remove(self) -> None:
        """Only what this object made, by name."""
        import docker.errors
        from infra.engine import docker_client
        client = docker_client()
        for i in range(1, self.n + 1):
            try:
                client.containers.get(f"kchaos-{self.cluster}-n{i}").remove(force=True)
            except docker.errors.NotFound:
                pass
        if self.network:
            try:
                client.networks.get(self.network).remove()
            except docker.errors.NotFound:
                pass


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        # Only the .ssh folders get entries of their own (0700): an entry for an
        # existing folder such as /etc would reset its mode.
        for d in sorted({str(Path(p).parent) for p in files if Path(p).parent.name == ".ssh"}):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, int(time.time())
            tar.addfile(info)
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def wait_for_sshd(address: str, port: int = 22, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=2) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd on {address}:{port} did not answer within {timeout_s:.0f}s")
        time.sleep(0.2)
