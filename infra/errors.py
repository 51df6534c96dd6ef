"""Exceptions users can act on.

Each subclass names one failure with one remedy; the CLI prints ``str(exc)``
as a single line and exits with ``exit_code``. Anything else is a bug and may
show a traceback.
"""
from __future__ import annotations


class KchaosError(Exception):
    """Base for every failure a user can act on."""

    exit_code = 3


class UsageError(KchaosError):
    """Bad input: config, flags, inventory. Exit 64 like sysexits' EX_USAGE."""

    exit_code = 64


class DockerUnavailable(KchaosError):
    """No Docker engine answers and none could be started."""


class KafkaVersionNotFound(UsageError):
    """The requested Kafka version does not resolve from Maven Central."""


class ImageBuildError(KchaosError):
    """The node image could not be built (debootstrap, docker import)."""


class NodeCommandError(KchaosError):
    """A command on a node exited non-zero where success was required."""

    def __init__(self, node: str, argv: list[str], exit: int, out: str, err: str):
        self.node, self.argv, self.exit, self.out, self.err = node, argv, exit, out, err
        tail = (err or out).strip().splitlines()[-1:] or [""]
        super().__init__(f"{node}: {' '.join(argv)!s} exited {exit}: {tail[0]}")


class NodeUnreachable(KchaosError):
    """A node (container or SSH host) cannot be reached at all."""


class OutputLost(KchaosError):
    """A command that only reads came back with its output cut every time it was asked."""


class BrokerNotReady(KchaosError):
    """A broker did not become ready in time; the message carries its log tail."""


class ClusterNotFound(UsageError):
    """A command needs a running cluster and there is none with that name."""
