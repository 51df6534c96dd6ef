"""One cluster at a time on a set of SSH hosts.

Containers are made per run, but SSH hosts are shared: two runs (two nightly
jobs, or a run and a colleague's ``cluster up``) on one inventory would kill
each other's brokers and heal each other's faults, and both histories would be
garbage. So a cluster claims its hosts before touching them: an atomic
``mkdir`` of ``CLAIM_DIR`` on each host, with the owner (cluster, harness host,
pid, time) written inside, and gives them back when it goes down.

A claim whose owner is gone is stale and is taken over: same harness host,
owner pid no longer alive, and its cluster not kept on purpose (``--keep``).
Anything else is refused with the owner named; ``kchaos clean --inventory``
removes claims whatever their owner.
"""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Set
from typing import Any, Sequence

from infra.errors import UsageError
from infra.node import Node, pid_alive

CLAIM_DIR = "/var/lib/kchaos-claim"
OWNER_FILE = f"{CLAIM_DIR}/owner"


class HostsInUse(UsageError):
    """Another live kchaos cluster holds one of the hosts."""


def owner_record(cluster: str) -> dict[str, Any]:
    return {"cluster": cluster, "harness": socket.gethostname(), "pid": os.getpid(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def is_stale(owner: dict[str, Any] | None, kept: Set[str]) -> bool:
    """May a new cluster take over this claim? Only when its owner is provably
    gone (the same rule ``docker_backend.destroy`` applies to dead runs' containers)."""
    if owner is None:
        return True   # a claim with no readable owner: a harness died between mkdir and write
    try:
        pid = int(owner.get("pid"))
    except (TypeError, ValueError):
        return False  # an owner we cannot read is not ours to take
    return owner.get("harness") == socket.gethostname() and not pid_alive(pid) \
        and str(owner.get("cluster")) not in kept


def _read_owner(node: Node) -> dict[str, Any] | None:
    res = node.run(["cat", OWNER_FILE], check=False)
    if res.exit != 0:
        return None
    try:
        owner = json.loads(res.out)
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def _write_owner(node: Node, owner: dict[str, Any], create: bool) -> bool:
    """Write the owner file; with ``create``, only if the claim folder did not
    exist yet (``mkdir`` is the atomic test). Returns whether it was written;
    a take-over (not ``create``) that cannot write raises."""
    mkdir = "mkdir" if create else "mkdir -p"
    return node.run(["sh", "-c", f"{mkdir} {CLAIM_DIR} && cat > {OWNER_FILE}"],
                    stdin=json.dumps(owner).encode(), check=not create).exit == 0


def claim(node: Node, owner: dict[str, Any], kept: Set[str]) -> None:
    """Claim one host for ``owner``, taking over a stale claim; raises HostsInUse."""
    if _write_owner(node, owner, create=True):
        return
    held = _read_owner(node)
    if held is not None and all(held.get(k) == owner[k] for k in ("cluster", "harness", "pid")):
        return
    if not is_stale(held, kept):
        raise HostsInUse(f"{node.name} is in use by kchaos cluster {held.get('cluster')!r} "
                         f"(pid {held.get('pid')} on {held.get('harness')}, since {held.get('since')}); "
                         "wait for it to end, or free the hosts with: kchaos clean --inventory FILE")
    _write_owner(node, owner, create=False)


def drop(node: Node, check: bool = True) -> None:
    """Remove the host's claim, whoever holds it (``kchaos clean --inventory``)."""
    node.run(["rm", "-rf", CLAIM_DIR], check=check)


def release(node: Node, cluster: str) -> None:
    """Give a host back, if this cluster still holds it."""
    held = _read_owner(node)
    if held is None or held.get("cluster") == cluster:
        drop(node, check=False)


def claim_all(nodes: Sequence[Node], cluster: str, kept: Set[str]) -> None:
    """All hosts or none: on a refusal, the hosts already claimed are given back."""
    owner = owner_record(cluster)
    done: list[Node] = []
    try:
        for node in nodes:
            claim(node, owner, kept)
            done.append(node)
    except BaseException:
        for node in done:
            release(node, cluster)
        raise
