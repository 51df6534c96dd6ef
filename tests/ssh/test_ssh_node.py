"""SshNode on real sshd hosts: the Node contract, as root and through sudo, and
every connection failure as one clear line."""
from __future__ import annotations

import time

import pytest

from infra.inventory import load_inventory
from infra.ssh_host_keys import HostKeyChanged, UnknownHostKey, fingerprint
from infra.ssh_node import NotRoot, SshAuthRefused, SshNode, SshUnreachable, nodes_for
from tests.infra.node_contract import NodeContract
from tests.ssh.standin import SSH_USER

pytestmark = pytest.mark.cluster


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert msg and "\n" not in msg, msg
    return msg


def node_of(path, index: int = 0) -> SshNode:
    return nodes_for(load_inventory(path))[index]


class TestSshNode(NodeContract):
    @pytest.fixture
    def node(self, ssh_nodes):
        return ssh_nodes[0]

    def test_runs_as_root_without_sudo(self, node):
        assert node.run(["id", "-u"]).out == "0\n"
        assert not node.command_line(["id"]).startswith("sudo")

    def test_a_command_that_ends_before_reading_its_stdin_gives_its_status(self, node):
        """The host closes the channel while the input is still being sent
        (CI once lost a claim to this race): the command's own status, not a
        lost connection."""
        for _ in range(20):
            assert node.run(["sh", "-c", "exit 3"], stdin=b"x" * (1 << 20), check=False).exit == 3
        assert node.run(["id", "-u"]).out == "0\n"          # the connection is still there


@pytest.fixture(scope="module")
def sudo_node(ssh_env):
    host = ssh_env.hosts.hosts[2]
    inv = ssh_env.inventory("sudo.toml", hosts=[{"address": host.address, "user": SSH_USER}])
    n = node_of(inv).connect()
    yield n
    n.close()


class TestSshNodeThroughSudo(NodeContract):
    """A non-root login: every command goes through `sudo -n` (a pass-through
    stand-in on n3, which the image lacks), files through a private upload folder."""

    @pytest.fixture
    def node(self, sudo_node):
        return sudo_node

    def test_commands_go_through_sudo(self, node):
        assert node.command_line(["id"], timeout=5) == "sudo -n timeout -k 5 5 id </dev/null"
        assert node.run(["id", "-un"]).out == f"{SSH_USER}\n"  # the stand-in sudo does not change user


def test_a_user_without_passwordless_sudo_is_refused(ssh_env):
    host = ssh_env.hosts.hosts[1]  # no sudo at all on n2
    inv = ssh_env.inventory("nosudo.toml", hosts=[{"address": host.address, "user": SSH_USER}])
    with pytest.raises(NotRoot) as info:
        node_of(inv).connect()
    msg = one_line(info.value)
    assert f"user {SSH_USER} is not root" in msg and "passwordless sudo" in msg and info.value.exit_code == 64


def test_unknown_host_key_is_refused_by_default(ssh_env):
    host = ssh_env.hosts.hosts[0]
    (ssh_env.work / "empty_known_hosts").write_text("")
    inv = ssh_env.inventory("unknown.toml", known_hosts=str(ssh_env.work / "empty_known_hosts"))
    with pytest.raises(UnknownHostKey) as info:
        node_of(inv).connect()
    msg = one_line(info.value)
    assert host.address in msg and "SHA256:" in msg and "accept_new_host_keys = true" in msg
    assert "ssh-keyscan" in msg and (ssh_env.work / "empty_known_hosts").read_text() == ""


def test_accepting_new_host_keys_records_them(ssh_env):
    host = ssh_env.hosts.hosts[0]
    kh = ssh_env.work / "fresh_known_hosts"  # does not exist yet
    inv = ssh_env.inventory("accept.toml", known_hosts=str(kh), accept_new_host_keys=True)
    node = node_of(inv).connect()
    try:
        assert node.run(["hostname"]).out.strip() == "n1"
    finally:
        node.close()
    assert kh.read_text() == f"{host.address} {host.host_key_line}\n"
    # Recorded: the next connection verifies against it, with new keys no longer accepted.
    strict = ssh_env.inventory("accept2.toml", known_hosts=str(kh))
    node_of(strict).connect().close()


def test_a_changed_host_key_is_a_clear_error_even_when_accepting_new_keys(ssh_env):
    n1, n2 = ssh_env.hosts.hosts[:2]
    kh = ssh_env.work / "changed_known_hosts"
    kh.write_text(f"{n1.address} {n2.host_key_line}\n")  # n1 "reinstalled": its known key is another one
    for accept in (False, True):
        inv = ssh_env.inventory(f"changed{accept}.toml", known_hosts=str(kh), accept_new_host_keys=accept)
        with pytest.raises(HostKeyChanged) as info:
            node_of(inv).connect()
        msg = one_line(info.value)
        assert "CHANGED" in msg and n1.address in msg and f"ssh-keygen -R '{n1.address}'" in msg
    assert kh.read_text() == f"{n1.address} {n2.host_key_line}\n"


def test_a_refused_key_is_a_clear_error(ssh_env):
    inv = ssh_env.inventory("wrongkey.toml", key=str(ssh_env.wrong_key))
    with pytest.raises(SshAuthRefused) as info:
        node_of(inv).connect()
    msg = one_line(info.value)
    assert "authentication failed" in msg and str(ssh_env.wrong_key) in msg and "authorized_keys" in msg


def test_a_closed_port_is_a_clear_error(ssh_env):
    host = ssh_env.hosts.hosts[0]
    inv = ssh_env.inventory("closed.toml", hosts=[{"address": host.address, "port": 2}])
    t0 = time.monotonic()
    with pytest.raises(SshUnreachable) as info:
        node_of(inv).connect()
    msg = one_line(info.value)
    assert f"{host.address}:2" in msg and "refused" in msg and time.monotonic() - t0 < 5
    assert info.value.exit_code == 3


def test_an_address_nobody_answers_is_a_clear_error(ssh_env):
    inv = ssh_env.inventory("nobody.toml", hosts=[{"address": ssh_env.hosts.unused_address}], connect_timeout=2)
    t0 = time.monotonic()
    with pytest.raises(SshUnreachable) as info:
        node_of(inv).connect()
    assert ssh_env.hosts.unused_address in one_line(info.value) and time.monotonic() - t0 < 10


def test_cli_reports_an_unknown_host_key_in_one_line(ssh_env):
    import os
    import subprocess
    import sys
    inv = ssh_env.inventory("cli.toml", known_hosts=str(ssh_env.work / "nonexistent_known_hosts"))
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "up", "--inventory", str(inv),
                           "--name", f"sshcli{os.getpid()}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "is not in" in lines[0] and "does not exist" in lines[0], proc.stderr


def test_fingerprint_format(ssh_env):
    import paramiko
    key = paramiko.PKey.from_path(str(ssh_env.key))
    assert fingerprint(key).startswith("ssh-ed25519 SHA256:")
