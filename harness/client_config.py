"""What a run config means for its clients: the topic, the consumers' group
id, the share of commits, the context each worker's process opens its client
with, and the client library's word on the settings before any cluster
starts (librdkafka's, or with ``client = "java"`` the Java driver's, built
here: infra/client_jars.py, or with ``client = "external"`` the outside
driver's of ``driver_command``).
"""
from __future__ import annotations

import functools
import shutil
from typing import TYPE_CHECKING, Any

import confluent_kafka

from infra.client_jars import build_driver
from infra.errors import UsageError
from workloads.client import ClientContext, check_settings, effective_settings
from workloads.driver_protocol import ANSWER_GRACE_S, DriverError, DriverProcess
from workloads.java_client import (JAVA_SOURCES, driver_command, java_effective_settings, java_producer_settings,
                                   java_settings_check)
from workloads.kinds import WorkloadKind
from workloads.txn import txn_producer_settings

if TYPE_CHECKING:   # run_config imports this module: for the annotations only
    from harness.run_config import RunConfig

TOPIC = "kchaos"
DEFAULT_COMMIT_FRACTION = 0.1


def effective_commit_fraction(cfg: RunConfig) -> float:
    """The share of ops that are commits: ``commit_fraction``, by default 0.1
    in subscribe and share mode and 0 in assign mode (assigned consumers are no group members)."""
    w = cfg.workload
    if w.commit_fraction is not None:
        return float(w.commit_fraction)
    return DEFAULT_COMMIT_FRACTION if w.mode in ("subscribe", "share") else 0.0


def run_group_id(cfg: RunConfig) -> str:
    """The consumers' group id: ``[consumer] "group.id"``, else ``[workload]
    group_id``, else ``kchaos-<seed>``."""
    if "group.id" in cfg.consumer:
        return str(cfg.consumer["group.id"])
    if cfg.workload.group_id is not None:
        return str(cfg.workload.group_id)
    return f"kchaos-{cfg.seed}"


def client_context(cfg: RunConfig, bootstrap: str = "", process: int = 0) -> ClientContext:
    """What process ``process``'s client needs of the run config to talk to the cluster at ``bootstrap``."""
    w = cfg.workload
    return ClientContext(
        bootstrap=bootstrap, topic=TOPIC, partitions=w.partitions, process=process,
        producer_config=dict(cfg.producer), consumer_config=dict(cfg.consumer),
        mode=w.mode, group_id=run_group_id(cfg), op_timeout_s=w.op_timeout,
        poll_max_messages=w.poll_max_messages, poll_timeout_s=w.poll_timeout,
        driver=driver_command_of(cfg))


def driver_command_of(cfg: RunConfig) -> tuple[str, ...]:
    """The driver's command line: the Java driver's (built on first use), an
    external one's as configured (``driver_command``), none for librdkafka."""
    w = cfg.workload
    if w.client == "java":
        return java_driver(w.client_version or cfg.kafka_version)
    if w.client == "external":
        return tuple(w.driver_command)
    return ()


def validate_driver_command(w: Any) -> None:
    """``[workload] driver_command``: only with ``client = "external"``, which
    needs one: a list of non-empty strings whose first names an executable
    (a path, or a command on PATH). One line, exit 64, before any cluster starts."""
    cmd = w.driver_command
    if w.client != "external":
        if cmd:
            raise UsageError(f'driver_command is for client = "external", not client = "{w.client}"')
        return
    if not cmd:
        raise UsageError('client = "external" needs [workload] driver_command, the outside driver\'s command '
                         'line, e.g. ["/path/to/driver", "--flag"] (docs/design.md, "The client protocol")')
    if not all(isinstance(a, str) and a for a in cmd):
        raise UsageError(f"driver_command {cmd!r}: every element must be a non-empty string")
    if shutil.which(cmd[0]) is None:
        raise UsageError(f"driver_command: {cmd[0]!r} is not an executable file nor a command on PATH")
    if w.client_version:
        raise UsageError(f'client_version {w.client_version!r} is for client = "java"; an external driver '
                         "names its own in its check answer")


@functools.lru_cache(maxsize=None)
def java_driver(version: str) -> tuple[str, ...]:
    """The command line of the Java driver on kafka-clients ``version``, built on first use."""
    build = build_driver(version, JAVA_SOURCES)
    return driver_command(build.classpath, str(build.log4j_config))


def stored_client_settings(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """What config.json records as ``client_settings``: the effective producer
    and consumer settings, and under ``library`` the client's exact name and
    version (``client_identity``). A transactions run's producer settings carry
    its transactional producer's ``transaction.timeout.ms``: the checkers reckon
    when a coordinator should have aborted an open transaction from it
    (checkers/hanging.py)."""
    ctx = offline_client_context(cfg)
    java = cfg.workload.client != "librdkafka"      # any driver takes the Java client's setting names
    settings = java_effective_settings(ctx) if java else effective_settings(ctx)
    if cfg.workload.transactions:
        txn = java_producer_settings(ctx, "kchaos") if java else txn_producer_settings(ctx, "kchaos")
        settings["producer"]["transaction.timeout.ms"] = txn["transaction.timeout.ms"]
    return {**settings, "library": client_identity(cfg)}


def client_identity(cfg: RunConfig) -> dict[str, str]:
    """The client library's exact name and version, as config.json records it (``client_settings.library``)."""
    w = cfg.workload
    if w.client == "java":
        return {"name": "kafka-clients", "library": "org.apache.kafka:kafka-clients", "version": w.client_version}
    if w.client == "external":      # what the driver's check answered it is (client, version), if it said
        said = _checked_identity.get(tuple(w.driver_command), {})
        return {"name": "external", "command": list(w.driver_command),
                **{k: str(v) for k, v in said.items() if k in ("client", "version")}}
    return {"name": "librdkafka", "version": confluent_kafka.libversion()[0],
            "binding": f"confluent-kafka {confluent_kafka.version()[0]}"}


def offline_client_context(cfg: RunConfig) -> ClientContext:
    """A worker's client context without a cluster (no bootstrap address)."""
    return client_context(cfg)


def validate_client_settings(cfg: RunConfig, kind: WorkloadKind) -> None:
    """Every [producer] / [consumer] setting, checked by librdkafka itself: the
    clients the workers (and the drain) would build from this config are built
    offline and closed, so a typo costs one line naming the key and exit 64
    before any cluster starts; then the kind's own clients' settings (the
    transactional producer's). The bootstrap address is the cluster's and not
    known yet (check_settings leaves it out)."""
    ctx = offline_client_context(cfg)
    if cfg.workload.client != "librdkafka":
        _check_driver_settings(ctx)
        return
    for check in (check_settings, kind.check_settings):
        if check is None:
            continue
        try:
            check(ctx)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


#: What each driver command's ``check`` answered it is (``client_identity`` of an external driver).
_checked_identity: dict[tuple[str, ...], dict[str, Any]] = {}


def _check_driver_settings(ctx: ClientContext) -> None:
    """The driver's offline check of the settings (unknown names, bad
    values): one line, exit 64. For the Java driver resolving and building it
    comes first, so a client version Maven Central lacks is refused here too;
    an external driver that does not start or answer is refused here."""
    try:
        proc = DriverProcess(list(ctx.driver), "driver-check")
    except OSError as exc:
        raise UsageError(f"the driver {ctx.driver[0]!r} does not start: {exc}") from None
    try:
        answer = proc.request({"f": "check", "config": java_settings_check(ctx)}, ANSWER_GRACE_S)
    except DriverError as exc:
        raise UsageError(f"the driver could not check the settings: {exc}") from None
    finally:
        proc.kill()
    if answer.get("type") != "ok":
        raise UsageError(str(answer.get("error")).splitlines()[0])
    _checked_identity[tuple(ctx.driver)] = dict(answer.get("value") or {})
