"""The client protocol between the runner and a workload, and client settings.

The runner owns processes and the history; a workload client owns the Kafka
handles of one logical process. The runner calls::

    client.open(ctx)                  # once, before the first op
    client.op_fields(f)               # fields the invoke and completion of an op f record
    completion = client.invoke(op)    # op: {"f": ..., "value": ..., ...}
    client.take_events()              # event ops (rebalances) since the last call
    client.close()                    # once; also after a crash
    client.crash()                    # instead of close: crash_interval drops the client

``Client`` is the base class every client derives from: it answers the last
four with what a client without groups or events means (no fields, no events,
a crash is a close), so the runner asks every client the same questions.

``invoke`` returns the completion: ``{"type": "ok" | "fail" | "info", "f",
"value", "error"?, "node"?}`` (plus workload-specific keys, see
``workloads.queue``). It never raises for a Kafka error it can classify; an
exception out of ``invoke`` is a bug or an unknown state, and the runner turns
it into an ``info`` completion and replaces the process.

Client settings are librdkafka property dicts merged over the defaults below
(``producer_settings`` / ``consumer_settings``): the run config's dicts win,
and aliases (``delivery.timeout.ms`` for ``message.timeout.ms`` ...) replace
the default under either name.
"""
from __future__ import annotations

import dataclasses
import logging
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping

from confluent_kafka import Consumer, KafkaException, Producer

# The completion types a client returns are the history contract's.
from history.ops import FAIL, INFO, OK, Op  # noqa: F401

Mode = Literal["assign", "subscribe"]

#: Logger that receives every librdkafka log line (instead of stderr).
LIBRDKAFKA_LOGGER = "kchaos.librdkafka"


@dataclass
class ClientContext:
    """What one client process needs to talk to the cluster."""

    bootstrap: str
    topic: str
    partitions: int
    process: int = 0
    producer_config: dict[str, Any] = field(default_factory=dict)
    consumer_config: dict[str, Any] = field(default_factory=dict)
    mode: Mode = "assign"
    group_id: str = "kchaos"
    op_timeout_s: float = 10.0
    node: str | None = None           # recorded as "node" in every completion
    client_rack: str | None = None    # consumer client.rack (fetch from follower)
    poll_max_messages: int = 500      # a poll op returns at most this many messages
    poll_timeout_s: float = 0.1       # how long a poll op waits for the first message
    message_bytes: int = 0            # pad each value (ASCII decimal) with spaces to this size
    driver: tuple[str, ...] = ()      # an outside client's command line (workloads/driver_protocol.py)


class Client(ABC):
    """One logical process's handles: the runner's side of a workload."""

    @abstractmethod
    def open(self, ctx: ClientContext) -> None:
        """Ready the client (handles may be made lazily, on the first op)."""

    @abstractmethod
    def invoke(self, op: Op) -> Op:
        """The completion of ``op``; raises only for a bug or an unknown state."""

    @abstractmethod
    def close(self) -> None:
        """Release the handles; never flushes what is in flight into a later op."""

    def op_fields(self, f: str) -> dict[str, Any]:
        """Fields the invoke and completion of every op ``f`` record besides
        ``f`` and ``value`` (a group member: its group and isolation)."""
        return {}

    def take_events(self) -> list[Op]:
        """Event ops (completions without an invoke, e.g. rebalances) that
        happened since the last call, in order; recorded after the op."""
        return []

    def crash(self) -> None:
        """Drop the client as a crashed process would, without flushing. The
        default is ``close``: the clients here close without flushing."""
        self.close()



class SendPump(ABC):
    """A sender that keeps many sends in flight and records each itself (a
    pipelined producer: workloads/pipelined.py). A kind with one sends the
    schedule's messages through it instead of as ops of a ``Client``."""

    name: str          # the instance sending now (a crash starts a new one)

    @abstractmethod
    def pump(self, messages: Iterator[tuple[int, int]], stop: Callable[[], bool]) -> None:
        """Send ``(partition, value)`` messages as slots free up, until they
        run out or ``stop()``."""

    @abstractmethod
    def crash(self) -> None:
        """Drop the instance without flushing; the next send opens a new one."""

    @abstractmethod
    def close(self, flush_s: float = 0.0, abandon: Callable[[], bool] = lambda: False) -> None:
        """Wait up to ``flush_s`` (until ``abandon()``) for what is in flight, then drop the rest."""

# -- librdkafka settings ------------------------------------------------------

# Groups of librdkafka property names that set the same thing (CONFIGURATION.md).
_ALIASES = [
    {"message.timeout.ms", "delivery.timeout.ms"},
    {"linger.ms", "queue.buffering.max.ms"},
    {"acks", "request.required.acks"},
    {"retries", "message.send.max.retries"},
    {"bootstrap.servers", "metadata.broker.list"},
]
_ALIAS_OF = {name: group for group in _ALIASES for name in group}


def librdkafka_logger() -> logging.Logger:
    return logging.getLogger(LIBRDKAFKA_LOGGER)


def delivery_timeout_ms(op_timeout_s: float) -> int:
    """message.timeout.ms a little under the op timeout: librdkafka scans for
    timed-out messages about once a second, so leave it at least 1 s (or 10%)
    to fail them itself, before the client has to purge at the op deadline."""
    op_ms = int(op_timeout_s * 1000)
    return max(op_ms - max(1000, op_ms // 10), op_ms // 2, 1)


def merge_settings(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """``overrides`` over ``defaults``; an override under an alias name removes
    the default under the other name, so librdkafka never sees both."""
    out = dict(defaults)
    for key, value in (overrides or {}).items():
        for other in _ALIAS_OF.get(key, ()):
            if other != key:
                out.pop(other, None)
        if value is None:                     # None deletes a default
            out.pop(key, None)
        else:
            out[key] = value
    return out


def producer_settings(ctx: ClientContext) -> dict[str, Any]:
    defaults = {
        "bootstrap.servers": ctx.bootstrap,
        "client.id": f"kchaos-p{ctx.process}",
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 1,
        "message.timeout.ms": delivery_timeout_ms(ctx.op_timeout_s),
        "socket.connection.setup.timeout.ms": max(1000, int(ctx.op_timeout_s * 1000)),
    }
    conf = merge_settings(defaults, ctx.producer_config)
    conf["logger"] = librdkafka_logger()
    return conf


def consumer_settings(ctx: ClientContext) -> dict[str, Any]:
    defaults = {
        "bootstrap.servers": ctx.bootstrap,
        "client.id": f"kchaos-c{ctx.process}",
        "group.id": ctx.group_id,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.partition.eof": False,
        # assign mode never commits; subscribe mode (workloads/group.py) commits
        # in explicit commit ops only, the offsets it stored after recording a poll.
        "enable.auto.commit": False,
        "enable.auto.offset.store": ctx.mode != "subscribe",
        "socket.connection.setup.timeout.ms": max(1000, int(ctx.op_timeout_s * 1000)),
    }
    if ctx.client_rack:
        defaults["client.rack"] = ctx.client_rack
    conf = merge_settings(defaults, ctx.consumer_config)
    conf["logger"] = librdkafka_logger()
    return conf


def effective_settings(ctx: ClientContext) -> dict[str, dict[str, Any]]:
    """The producer and consumer settings the workers use (defaults merged with
    the config), without the per-process and per-cluster ones: stored with the
    run so the checkers can tell which anomalies the settings allow."""
    drop = {"logger", "bootstrap.servers", "client.id", "group.id"}
    return {"producer": {k: v for k, v in producer_settings(ctx).items() if k not in drop},
            "consumer": {k: v for k, v in consumer_settings(ctx).items() if k not in drop}}


def check_settings(ctx: ClientContext) -> None:
    """Build, offline, the clients ``ctx``'s workers would (producer, consumer
    and drain consumer, from ``producer_settings`` / ``consumer_settings`` /
    ``drain_settings``) so librdkafka validates every setting now.

    Raises ValueError with one line naming the ``[producer]`` / ``[consumer]``
    key at fault as a TOML dotted key (``producer.acks: Invalid value ...``).
    Nothing touches the network: the bootstrap servers are left out, nothing
    is polled, and the clients are closed at once. librdkafka's own log lines
    (CONFWARN ...) are discarded.
    """
    from workloads.drain import drain_settings   # here: drain imports this module (a cycle at the top)

    _check_client("producer", "producer", producer_settings, ctx, "producer_config")
    _check_client("consumer", "consumer", consumer_settings, ctx, "consumer_config")
    _check_client("consumer", "consumer",
                  lambda c: drain_settings(c.bootstrap, c.consumer_config, 0), ctx, "consumer_config")


_CHECK_LOGGER = "kchaos.librdkafka.check"


def _silent_logger() -> logging.Logger:
    log = logging.getLogger(_CHECK_LOGGER)
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return log


def _client_error(kind: str, conf: Mapping[str, Any]) -> str | None:
    """librdkafka's complaint about ``conf`` for a ``kind`` client, or None."""
    conf = dict(conf)
    for name in _ALIAS_OF["bootstrap.servers"]:
        conf.pop(name, None)                  # no broker: no connection, ever
    conf["logger"] = _silent_logger()
    try:
        client = (Producer if kind == "producer" else Consumer)(conf)
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return err.str() if hasattr(err, "str") else str(err)
    except (TypeError, ValueError) as exc:
        return str(exc)
    if kind == "consumer":
        client.close()
    del client
    return None


def _check_client(table: str, kind: str, build, ctx: ClientContext, field_name: str) -> None:
    overrides = dict(getattr(ctx, field_name) or {})
    error = _client_error(kind, build(ctx))
    if error is None:
        return
    names = {a or b for a, b in re.findall(r'"([^"]+)"|`([^`]+)`', error)}
    culprit = next((k for k in overrides if k in names or _ALIAS_OF.get(k, set()) & names), None)
    if culprit is None:
        # Add the run's keys one at a time over the defaults: the first that
        # makes librdkafka refuse is the one to name.
        prefix: dict[str, Any] = {}
        for key, value in overrides.items():
            prefix[key] = value
            if _client_error(kind, build(dataclasses.replace(ctx, **{field_name: dict(prefix)}))) is not None:
                culprit = key
                break
    if culprit is None:
        raise ValueError(f"{table} settings: {error}")
    # The key as a TOML dotted key (producer.acks, producer."linger.ms"): no
    # brackets, which a rich console would take for markup.
    raise ValueError(f"{table}.{_toml_key(culprit)}: {error} (got {_show(overrides[culprit])})")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _show(key)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def completion(op: Op, typ: str, value: Any, error: str | None = None, node: str | None = None) -> Op:
    out: Op = {"type": typ, "f": op["f"], "value": value}
    if error is not None:
        out["error"] = error
    if node is not None:
        out["node"] = node
    return out
