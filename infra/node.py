"""The Node protocol: the one door through which kchaos touches a machine.

Brokers, nemeses and log collection only ever call these methods, so the same
code drives Docker containers, SSH hosts and (for unit tests) the local host.
Commands are argument vectors; the only place a vector becomes a shell string
is ``shell_join`` below, used by backends that must hand a string to a shell.
"""
from __future__ import annotations

import logging
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence, TypeVar, runtime_checkable

from infra.errors import NodeCommandError, OutputLost

DEFAULT_TIMEOUT_S = 60.0

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class CommandResult:
    exit: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.exit == 0


#: Controller-only nodes a cluster may have, on any backend (isolated KRaft: 3 or 5 in
#: practice; more only slows the quorum down).
MAX_CONTROLLERS = 5


@runtime_checkable
class Node(Protocol):
    """A machine that runs one broker. ``name`` is n1..nN, ``address`` its IP."""

    name: str
    address: str

    def run(
        self,
        argv: Sequence[str],
        stdin: bytes | None = None,
        check: bool = True,
        timeout: float = DEFAULT_TIMEOUT_S,
        env: dict[str, str] | None = None,
        detach: bool = False,
    ) -> CommandResult:
        """Run ``argv`` as root. ``detach`` starts it in the background and returns at once.

        A command that outlives ``timeout`` is killed and reported as exit 124.
        """
        ...

    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to an absolute path on the node, creating parent folders."""
        ...

    def get(self, remote: str, local: Path) -> None:
        """Copy a file from the node to a local path."""
        ...


def pid_alive(pid: int) -> bool:
    """Is a process with this pid alive on this machine (the harness's)?
    One we may not signal is alive: it is not ours to call dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def parallel(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``fn`` on every item at once, one thread each, results in item order: node
    work is mostly waiting on the node, so N nodes take as long as the slowest.
    The first exception (in item order) is raised after all have finished."""
    items = list(items)
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        return list(pool.map(fn, items))


def shell_join(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


def checked(node_name: str, argv: Sequence[str], result: CommandResult, check: bool) -> CommandResult:
    """Raise NodeCommandError for a failed command when the caller asked for success."""
    if check and result.exit != 0:
        raise NodeCommandError(node_name, list(map(str, argv)), result.exit, result.out, result.err)
    return result


_BEGIN, _END = "kchaos-output-begin", "kchaos-output-end"


def run_read(node: Node, argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S,
             short: Callable[[str], str | None] | None = None, attempts: int = 3) -> CommandResult:
    """Run a command that only reads, and make sure its stdout came back whole.

    Docker sometimes loses an exec's output (moby/moby#27289, docker/docker-py#2042):
    a listing came back empty with exit 0, so a node's replicas were silently left
    out of replicas.jsonl; and a restarted controller's metadata dump once came back
    with batches up to offset 121 but none of its records (what an output that lost
    its first lines looks like: the records are parsed under a file's "Dumping"
    line), which read as the controllers disagreeing. So the output is framed by a
    first and a last mark; output without both, or that ``short`` finds short of
    what it announces (its reason, else None), is read again, and then raises
    OutputLost: a cut output must never read as a node that holds less. The
    result's exit is the command's own; a shell that did not finish (exit 124
    after ``timeout``) is returned as it is, not read again."""
    why = ""
    for _ in range(attempts):
        res = node.run(["sh", "-c", f"echo {_BEGIN}; {shell_join(argv)}; echo {_END} $?"],
                       check=False, timeout=timeout)
        if res.exit != 0:
            return res
        first, _, rest = res.out.partition("\n")
        body, mark, code = rest.rpartition(_END + " ")
        if first != _BEGIN or not mark or not code.strip().isdigit():
            why = f"its output came back cut ({len(res.out)} bytes)"
        elif int(code) != 0 or short is None or not (why := short(body) or ""):
            return CommandResult(int(code), body, res.err)
        log.warning("%s: %s: %s; reading again", node.name, shell_join(argv)[:120], why)
    raise OutputLost(f"{node.name}: {shell_join(argv)[:120]}: output incomplete {attempts} times: {why}")


class LocalNode:
    """This host as a Node, through subprocess: for unit tests of node-level logic."""

    def __init__(self, name: str = "local", address: str = "127.0.0.1", root: Path | None = None):
        self.name = name
        self.address = address
        # Files are placed under ``root`` so tests never write to the real /.
        self.root = root

    def _path(self, remote: str) -> Path:
        return Path(remote) if self.root is None else self.root / remote.lstrip("/")

    def run(self, argv, stdin=None, check=True, timeout=DEFAULT_TIMEOUT_S, env=None, detach=False):
        argv = [str(a) for a in argv]
        if detach:
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True, env=env)
            return CommandResult(0, "", "")
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, env=env)
        except FileNotFoundError as exc:
            return checked(self.name, argv, CommandResult(127, "", str(exc)), check)
        except subprocess.TimeoutExpired:
            # Same shape as the container backends, whose `timeout` wrapper exits 124.
            return checked(self.name, argv, CommandResult(124, "", f"timed out after {timeout:.0f}s"), check)
        result = CommandResult(proc.returncode, proc.stdout.decode(errors="replace"),
                               proc.stderr.decode(errors="replace"))
        return checked(self.name, argv, result, check)

    def put(self, local: Path, remote: str) -> None:
        dest = self._path(remote)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(Path(local).read_bytes())

    def get(self, remote: str, local: Path) -> None:
        src = self._path(remote)
        if not src.exists():
            raise NodeCommandError(self.name, ["get", remote], 1, "", f"{remote}: no such file")
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(src.read_bytes())
