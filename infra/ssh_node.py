"""Nodes as existing hosts reached over SSH (paramiko): the inventory backend.

``SshNode`` keeps the Node protocol exactly as ``DockerNode`` does: argument
vectors quoted once by ``shell_join``, coreutils ``timeout`` on the host (exit
124), stdin, environment, detached commands, SFTP for files. Commands run as
root: a login as root runs them directly, any other user through ``sudo -n``
(a user without passwordless sudo is refused at connect time). Host keys are
checked as ``infra.ssh_host_keys`` says.

Making a host able to run a broker is ``infra.ssh_provision``; healing and
stopping hosts that outlive a run is ``harness.ssh_hosts``.
"""
from __future__ import annotations

import logging
import posixpath
import select
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Sequence

import paramiko

from infra.errors import KchaosError, NodeCommandError, NodeUnreachable, UsageError
from infra.inventory import HostSpec, Inventory, InventoryError, load_inventory
from infra.node import DEFAULT_TIMEOUT_S, CommandResult, checked, parallel, shell_join
from infra.ssh_host_keys import HostKeyChanged, UnknownHostKey, fingerprint, host_key_policy, known_hosts_name

log = logging.getLogger(__name__)

# Concurrent channels per connection: OpenSSH's MaxSessions defaults to 10.
MAX_CHANNELS = 4
# Beyond the remote `timeout` (which kills at timeout, then -k 5 s later), how
# long the harness waits for a silent host before it gives the command up.
LOCAL_GRACE_S = 15.0


# -- errors ----------------------------------------------------------------------
class SshUnreachable(NodeUnreachable):
    """The host does not answer on its SSH port (refused, timed out, no route)."""


class SshAuthRefused(UsageError):
    """The host refused the key (or the user) the inventory names."""


class NotRoot(UsageError):
    """The login user is not root and cannot use passwordless sudo."""


# -- the node ------------------------------------------------------------------------
class SshNode:
    """One host. Connects on first use (or ``connect()``), reconnects if the link drops."""

    def __init__(self, spec: HostSpec, accept_new_host_keys: bool = False, connect_timeout: float = 10.0):
        self.spec = spec
        self.name = spec.name
        self.address = spec.address
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = connect_timeout
        self._client = None
        self._sudo: bool | None = None  # None until connected: whether commands need `sudo -n`
        self._lock = threading.Lock()
        self._channels = threading.BoundedSemaphore(MAX_CHANNELS)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.spec.target})"

    # -- connection ---------------------------------------------------------------
    def _load_key(self):
        if self.spec.key is None:
            return None
        try:
            return paramiko.PKey.from_path(str(self.spec.key))
        except paramiko.PasswordRequiredException:
            raise InventoryError(f"{self.name}: key {self.spec.key} is passphrase-protected; use an unencrypted "
                                 "key for kchaos, or leave key out to use ssh-agent") from None
        except (paramiko.SSHException, ValueError, OSError) as exc:
            raise InventoryError(f"{self.name}: cannot read private key {self.spec.key}: {exc}") from None

    def _open(self):
        """A new authenticated client, every failure turned into one clear line."""
        spec = self.spec
        pkey = self._load_key()
        client = paramiko.SSHClient()
        if spec.known_hosts.is_file():
            try:
                client.load_system_host_keys(str(spec.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise InventoryError(f"{self.name}: cannot read known_hosts {spec.known_hosts}: {exc}") from None
        client.set_missing_host_key_policy(host_key_policy(spec, self.label, self.accept_new_host_keys))
        t = self.connect_timeout
        try:
            client.connect(spec.address, spec.port, username=spec.user, pkey=pkey,
                           look_for_keys=pkey is None, allow_agent=pkey is None,
                           timeout=t, banner_timeout=t + 5, auth_timeout=t + 5, channel_timeout=t + 5)
        except (UnknownHostKey, InventoryError):
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            name = known_hosts_name(spec.address, spec.port)
            raise HostKeyChanged(
                f"{self.label}: the host key has CHANGED: the host offers {fingerprint(exc.key)}, "
                f"{spec.known_hosts} expects {fingerprint(exc.expected_key)}; the host was reinstalled or "
                f"someone is intercepting. If you know why, remove the old key (ssh-keygen -R '{name}' "
                f"-f {spec.known_hosts}) and try again") from None
        except paramiko.AuthenticationException:
            client.close()
            how = f"key {spec.key}" if spec.key else "ssh-agent and ~/.ssh keys"
            raise SshAuthRefused(f"{self.label}: authentication failed with {how}; check user and key "
                                 f"in the inventory and the host's ~{spec.user}/.ssh/authorized_keys") from None
        except paramiko.ssh_exception.NoValidConnectionsError as exc:
            client.close()
            reason = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()})) or "connection refused"
            raise SshUnreachable(f"{self.label}: cannot connect: {reason.lower()}; is sshd running and the "
                                 "port right?") from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise SshUnreachable(f"{self.label}: no answer within {t:g}s (host down or firewalled?)") from None
        except paramiko.SSHException as exc:
            client.close()
            raise SshUnreachable(f"{self.label}: SSH handshake failed: {exc}") from None
        except (OSError, EOFError) as exc:
            client.close()
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise SshUnreachable(f"{self.label}: cannot connect: {reason}") from None
        transport = client.get_transport()
        transport.set_keepalive(15)
        return client

    def connect(self) -> "SshNode":
        """Connect (if not connected) and settle how commands become root."""
        with self._lock:
            if self._client is not None and self._client.get_transport() is not None \
                    and self._client.get_transport().is_active():
                return self
            if self._client is not None:
                self._client.close()
            self._client = self._open()
        if self._sudo is None:
            self._sudo = self._needs_sudo()
        return self

    def _needs_sudo(self) -> bool:
        code, out, err = self._exec("id -u </dev/null", None, 30)
        if code == 0 and out.strip() == b"0":
            return False
        code, out, err = self._exec("sudo -n true </dev/null", None, 30)
        if code == 0:
            return True
        why = (err or out).decode(errors="replace").strip().splitlines()[-1:] or [f"exit {code}"]
        self.close()
        raise NotRoot(f"{self.label}: user {self.spec.user} is not root and has no passwordless sudo "
                      f"(sudo -n true: {why[0]}); use user = \"root\" or grant it NOPASSWD sudo")

    def _ready(self) -> None:
        if self._sudo is None:
            self.connect()

    def _transport(self):
        client = self._client
        if client is None or client.get_transport() is None or not client.get_transport().is_active():
            self.connect()
            client = self._client
        return client.get_transport()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- commands -------------------------------------------------------------------
    def _start(self, command: str):
        """A channel running ``command``. Retried while the command certainly has not
        started (the host's session limit is momentarily full, the link dropped and
        comes back); never closes a connection other threads are still using."""
        deadline = time.monotonic() + self.connect_timeout + 10
        delay = 0.05
        while True:
            transport = self._transport()
            chan = None
            try:
                chan = transport.open_session(timeout=self.connect_timeout + 5)
                chan.exec_command(command)
                return chan
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if chan is not None:
                    chan.close()
                if time.monotonic() > deadline:
                    why = str(exc) or type(exc).__name__
                    raise SshUnreachable(f"{self.label}: cannot start a command over SSH: {why}") from None
                log.debug("%s: opening a channel failed (%r), retrying", self.name, exc)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _exec(self, command: str, stdin: bytes | None, timeout: float) -> tuple[int, bytes, bytes]:
        """Run a shell command line as the login user; (exit, stdout, stderr).

        Exit 124 if the host stays silent past ``timeout``; -1 if killed by a signal.
        """
        with self._channels:
            chan = self._start(command)
            out, err = bytearray(), bytearray()
            try:
                chan.settimeout(timeout + LOCAL_GRACE_S)
                if stdin is not None:
                    try:
                        chan.sendall(stdin)
                        # Our EOF must not follow the host's close of a command that is
                        # already done: OpenSSH drops the whole connection for that.
                        with chan.lock:
                            closing = chan.closed or chan.eof_received
                        if not closing:
                            chan.shutdown_write()
                    except OSError:
                        # A command that ended before it read its stdin (``mkdir d && cat > f``
                        # with d there) closed the channel under us: its exit status says how
                        # it ended. Anything else is a lost connection, as before.
                        if not (chan.closed and chan.exit_status_ready()):
                            raise
                deadline = time.monotonic() + timeout + LOCAL_GRACE_S
                while True:
                    got = False
                    if chan.recv_ready():
                        out += chan.recv(1 << 16)
                        got = True
                    if chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 16)
                        got = True
                    if got:
                        continue
                    if chan.exit_status_ready() and (chan.eof_received or chan.closed):
                        break
                    if chan.closed:
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return 124, bytes(out), bytes(err) + f"\nno answer after {timeout:.0f}s".encode()
                    readable, _, _ = select.select([chan], [], [], min(0.5, remaining))
                    if readable and not (chan.recv_ready() or chan.recv_stderr_ready()):
                        time.sleep(0.005)  # EOF already signalled; the exit status is on its way
                # Late stragglers after the exit status.
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                if not chan.exit_status_ready():
                    transport = self._client.get_transport() if self._client else None
                    if transport is None or not transport.is_active():
                        raise SshUnreachable(f"{self.label}: connection lost while running a command")
                    return -1, bytes(out), bytes(err)
                return chan.recv_exit_status(), bytes(out), bytes(err)
            except socket.timeout:
                return 124, bytes(out), bytes(err) + f"\nno answer after {timeout:.0f}s".encode()
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise SshUnreachable(f"{self.label}: connection lost: {exc}") from None
            finally:
                chan.close()

    def command_line(self, argv: Sequence[str], env: dict[str, str] | None = None,
                     timeout: float | None = None, detach: bool = False, with_stdin: bool = False) -> str:
        """The one shell string sent for ``argv``: [sudo -n] [timeout] [setsid] [env K=V] argv."""
        self._ready()
        words: list[str] = ["sudo", "-n"] if self._sudo else []
        if detach:
            words.append("setsid")
        elif timeout is not None:
            words += ["timeout", "-k", "5", str(max(1, int(timeout)))]
        if env:
            words += ["env", *(f"{k}={v}" for k, v in env.items())]
        words += [str(a) for a in argv]
        line = shell_join(words)
        if detach:
            line += " </dev/null >/dev/null 2>&1 &"
        elif not with_stdin:
            # No EOF is ever sent on a channel without stdin (see _exec): the command reads nothing.
            line += " </dev/null"
        return line

    def run(self, argv: Sequence[str], stdin: bytes | None = None, check: bool = True,
            timeout: float = DEFAULT_TIMEOUT_S, env: dict[str, str] | None = None,
            detach: bool = False) -> CommandResult:
        argv = [str(a) for a in argv]
        if detach:
            self._exec(self.command_line(argv, env, detach=True), None, 30)
            return CommandResult(0, "", "")
        code, out, err = self._exec(self.command_line(argv, env, timeout, with_stdin=stdin is not None),
                                    stdin, timeout)
        err_text = err.decode(errors="replace")
        if code == 124:
            err_text += f"\ntimed out after {timeout:.0f}s"
        return checked(self.name, argv, CommandResult(code, out.decode(errors="replace"), err_text), check)

    # -- files -----------------------------------------------------------------------
    def _sftp(self):
        deadline = time.monotonic() + self.connect_timeout + 10
        delay = 0.05
        while True:
            try:
                return self._transport().open_sftp_client()
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if time.monotonic() > deadline:
                    raise SshUnreachable(f"{self.label}: cannot open SFTP: {str(exc) or type(exc).__name__}") \
                        from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def put(self, local: Path, remote: str) -> None:
        self.put_many([(Path(local), remote)])

    def put_many(self, pairs: Sequence[tuple[Path, str]]) -> None:
        """Copy local files to absolute paths on the host, creating parent folders."""
        if not pairs:
            return
        for _, remote in pairs:
            if not remote.startswith("/"):
                raise UsageError(f"{self.name}: remote path {remote!r} must be absolute")
        self.run(["mkdir", "-p", *sorted({posixpath.dirname(r) or "/" for _, r in pairs})])
        tmp = None
        if self._sudo:
            # Not root: upload as the login user into a private folder, install as root.
            code, out, err = self._exec("mktemp -d /tmp/.kchaos-put.XXXXXX </dev/null", None, 30)
            if code != 0:
                raise NodeCommandError(self.name, ["mktemp", "-d"], code, out.decode(), err.decode())
            tmp = out.decode().strip()
        try:
            with self._channels:
                sftp = self._sftp()
                try:
                    for i, (local, remote) in enumerate(pairs):
                        sftp.put(str(local), remote if tmp is None else f"{tmp}/{i}", confirm=True)
                except OSError as exc:
                    raise NodeCommandError(self.name, ["put", str(local), remote], 1, "",
                                           f"{remote}: {exc.strerror or exc}") from None
                finally:
                    sftp.close()
            if tmp is not None:
                moves = [shell_join(["install", "-m", "0644", f"{tmp}/{i}", remote])
                         for i, (_, remote) in enumerate(pairs)]
                self.run(["sh", "-c", " && ".join(moves)], timeout=120)
        finally:
            if tmp is not None:
                self._exec(shell_join(["rm", "-rf", tmp]) + " </dev/null", None, 30)

    def get(self, remote: str, local: Path) -> None:
        local = Path(local)
        self._ready()
        if self._sudo:
            code, out, err = self._exec(shell_join(["sudo", "-n", "cat", "--", remote]) + " </dev/null", None, 120)
            if code != 0:
                raise NodeCommandError(self.name, ["get", remote], code, "", err.decode(errors="replace"))
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(out)
            return
        with self._channels:
            sftp = self._sftp()
            try:
                try:
                    st = sftp.stat(remote)
                except OSError as exc:
                    raise NodeCommandError(self.name, ["get", remote], 1, "", f"{remote}: {exc.strerror or exc}") \
                        from None
                if not stat.S_ISREG(st.st_mode or 0):
                    raise NodeCommandError(self.name, ["get", remote], 1, "", f"{remote}: not a regular file")
                local.parent.mkdir(parents=True, exist_ok=True)
                sftp.get(remote, str(local))
            finally:
                sftp.close()

    def __repr__(self) -> str:
        return f"SshNode({self.name}, {self.spec.target})"


# -- many hosts ---------------------------------------------------------------------
def nodes_for(inventory: Inventory | str | Path) -> list[SshNode]:
    """SshNodes for every host, not yet connected."""
    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    return [SshNode(h, inv.accept_new_host_keys, inv.connect_timeout) for h in inv.hosts]


def connect_all(inventory: Inventory | str | Path) -> list[SshNode]:
    """Connect to every host in parallel; the first failure (in host order) is raised,
    after closing the connections that did open."""
    nodes = nodes_for(inventory)

    def attempt(node: SshNode):
        try:
            node.connect()
            return None
        except KchaosError as exc:
            return exc

    errors = [e for e in parallel(attempt, nodes) if e is not None]
    if errors:
        for n in nodes:
            n.close()
        raise errors[0]
    return nodes
