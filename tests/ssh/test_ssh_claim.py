"""Two clusters never share SSH hosts: claims, refusals, stale takeover, clean."""
from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from infra.ssh_claim import CLAIM_DIR, OWNER_FILE, HostsInUse, claim_all, is_stale, owner_record, release

NOT_KEPT: frozenset[str] = frozenset()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_only_a_provably_gone_owner_is_stale():
    me = socket.gethostname()
    assert is_stale(None, NOT_KEPT)
    assert is_stale({"cluster": "a", "harness": me, "pid": dead_pid()}, NOT_KEPT)
    assert not is_stale({"cluster": "a", "harness": me, "pid": dead_pid()}, {"a"})  # kept on purpose
    assert not is_stale({"cluster": "a", "harness": me, "pid": os.getpid()}, NOT_KEPT)  # alive
    assert not is_stale({"cluster": "a", "harness": "another-ci-box", "pid": dead_pid()}, NOT_KEPT)


def _owners(nodes) -> list[str | None]:
    out = []
    for n in nodes:
        res = n.run(["cat", OWNER_FILE], check=False)
        out.append(json.loads(res.out)["cluster"] if res.exit == 0 else None)
    return out


@pytest.fixture
def hosts(ssh_nodes):
    for n in ssh_nodes:
        n.run(["rm", "-rf", CLAIM_DIR])
    yield ssh_nodes
    for n in ssh_nodes:
        n.run(["rm", "-rf", CLAIM_DIR])


def test_a_second_cluster_is_refused_and_claims_nothing(hosts):
    claim_all(hosts, "first", NOT_KEPT)
    assert _owners(hosts) == ["first"] * 3
    claim_all(hosts, "first", NOT_KEPT)   # the owner claiming again is a no-op
    with pytest.raises(HostsInUse, match=r"n1 is in use by kchaos cluster 'first'.*kchaos clean --inventory"):
        claim_all(hosts, "second", NOT_KEPT)
    assert _owners(hosts) == ["first"] * 3
    for n in hosts:
        release(n, "second")              # not its claim: nothing happens
    assert _owners(hosts) == ["first"] * 3
    for n in hosts:
        release(n, "first")
    assert _owners(hosts) == [None] * 3


def test_a_refusal_on_one_host_gives_back_the_others(hosts):
    foreign = {**owner_record("theirs"), "harness": "another-ci-box"}
    hosts[2].run(["sh", "-c", f"mkdir {CLAIM_DIR} && cat > {OWNER_FILE}"], stdin=json.dumps(foreign).encode())
    with pytest.raises(HostsInUse, match="n3 is in use by kchaos cluster 'theirs'"):
        claim_all(hosts, "mine", NOT_KEPT)
    assert _owners(hosts) == [None, None, "theirs"]


def test_a_dead_harness_claim_is_taken_over_and_clean_frees_any(hosts, inventory):
    from harness.ssh_hosts import heal_hosts
    gone = {**owner_record("crashed"), "pid": dead_pid()}
    for n in hosts:
        n.run(["sh", "-c", f"mkdir {CLAIM_DIR} && cat > {OWNER_FILE}"], stdin=json.dumps(gone).encode())
    claim_all(hosts, "next", NOT_KEPT)
    assert _owners(hosts) == ["next"] * 3
    hosts[0].run(["sh", "-c", f"cat > {OWNER_FILE}"],
                 stdin=json.dumps({**owner_record("theirs"), "harness": "another-ci-box"}).encode())
    assert set(heal_hosts(inventory).values()) == {"ok"}
    assert _owners(hosts) == [None] * 3
