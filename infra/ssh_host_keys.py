"""Host keys of SSH hosts, checked against known_hosts and never trusted blindly.

``accept_new_host_keys = true`` in the inventory records unknown keys there,
like OpenSSH's ``StrictHostKeyChecking=accept-new``, and still refuses a key
that changed: a changed key means a reinstalled host or an interception.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import threading
from pathlib import Path

import paramiko

from infra.errors import KchaosError, UsageError
from infra.inventory import HostSpec

log = logging.getLogger(__name__)


class UnknownHostKey(UsageError):
    """The host's key is not in known_hosts and new keys are not accepted."""


class HostKeyChanged(KchaosError):
    """known_hosts holds a different key for this host: reinstalled, or intercepted."""


def fingerprint(key) -> str:
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def known_hosts_name(address: str, port: int) -> str:
    """How known_hosts (and paramiko) name a host: ``addr`` on 22, ``[addr]:port`` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


_KNOWN_HOSTS_LOCK = threading.Lock()


def _append_known_host(path: Path, name: str, key) -> None:
    with _KNOWN_HOSTS_LOCK:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        prefix = ""
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            prefix = "\n"
        with open(path, "a") as f:
            f.write(f"{prefix}{name} {key.get_name()} {key.get_base64()}\n")


def host_key_policy(spec: HostSpec, label: str, accept_new: bool):
    """A paramiko policy for keys missing from ``spec.known_hosts``: refused with
    the command that adds them, or (``accept_new``) recorded there."""
    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            if not accept_new:
                missing = "" if spec.known_hosts.exists() else " (that file does not exist)"
                raise UnknownHostKey(
                    f"{label}: host key {fingerprint(key)} is not in {spec.known_hosts}{missing}; "
                    f"check it and add it (ssh-keyscan -p {spec.port} {spec.address} >> "
                    f"{spec.known_hosts}), or set accept_new_host_keys = true in the inventory "
                    "for throw-away hosts")
            _append_known_host(spec.known_hosts, hostname, key)
            client.get_host_keys().add(hostname, key.get_name(), key)
            log.warning("%s: accepted new host key %s, saved to %s", label, fingerprint(key), spec.known_hosts)

    return Policy()
