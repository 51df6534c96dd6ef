"""``kchaos nemesis ...``: inject one fault by hand into a cluster left up by
``kchaos cluster up``, and heal it again.

It lives in harness, not nemesis, because it attaches to clusters through
``harness.run_cluster``: the nemesis package stays free of harness imports.
"""
from __future__ import annotations

import json
import random
import re
import shlex
import time
import tomllib
from pathlib import Path
from typing import Any

import click

from broker.config import PROXY_PORT
from harness.run_cluster import cluster_attach, kept_proxy_ports
from infra.errors import KchaosError, UsageError
from nemesis.clock import BUMP, MIN_STROBE_PERIOD_S, RESET, STROBE, ClockNemesis
from nemesis.kafka_proxy import KafkaProxy
from nemesis.netem import START_NETEM, NetemNemesis, links_of, shape_of
from nemesis.packages import heal_all
from nemesis.partition import START_PARTITION, TOPOLOGIES, PartitionNemesis
from nemesis.power import POWER_LOSS, POWER_TARGETS, PowerLossNemesis
from nemesis.process import KILL, KillNemesis, PauseNemesis
from nemesis.protocol import TARGETS, NemesisContext, Op
from nemesis.proxy_rules import Rule, parse_rules
from nemesis.roles import ROLE_TARGETS


class NemesisFailed(KchaosError):
    """A fault was applied on some nodes only (the message names the others)."""


def _context(name: str, topic: str | None, seed: int | None) -> NemesisContext:
    return NemesisContext(cluster_attach(name).kafka, topic, random.Random(seed))


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v) or "-"
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _report(op: Op) -> None:
    value = dict(op.get("value") or {})
    rules = value.pop("rules", None)
    value.pop("grudge", None)
    errors = value.pop("errors", None)
    nodes = value.pop("nodes", [])
    fault = value.pop("fault", None)
    extra = " ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    click.echo(f"{op['f']} ({fault}): nodes {_fmt(nodes)}" + (f"; {extra}" if extra else ""))
    for node, lst in (rules or {}).items():
        for text in lst:
            click.echo(f"  {node}: {text}")
    if errors:
        raise NemesisFailed("; ".join(f"{n}: {e}" for n, e in errors.items()))


def _target_value(target: str, topic: str | None, partition: int | None, seed: int | None) -> dict[str, Any]:
    if target not in TARGETS + ROLE_TARGETS and not re.fullmatch(r"n[0-9]+", target or ""):
        raise UsageError(f"unknown target {target!r}; valid choices: {', '.join(TARGETS + ROLE_TARGETS)} "
                         "or a node name (n1, n2, ...)")
    return _target_keys(target, topic, partition, seed, "--target leader")


def _target_keys(target: str, topic: str | None, partition: int | None, seed: int | None,
                 what: str) -> dict[str, Any]:
    """An op value naming a target word, with the partition and seed that pick its node."""
    value: dict[str, Any] = {"target": target}
    if target == "leader" and not topic:
        raise UsageError(f"{what} needs --topic (and optionally --partition)")
    if partition is not None:
        value["partition"] = partition
    if seed is not None:
        value["seed"] = seed
    return value


def _parse_ports(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ports = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"--ports takes comma-separated port numbers, got {text!r}") from None
    if not ports or any(not 0 < p < 65536 for p in ports):
        raise UsageError(f"--ports takes port numbers between 1 and 65535, got {text!r}")
    return ports


name_option = click.option("--name", default="default", show_default=True, help="Cluster name.")
topic_option = click.option("--topic", default=None, help="Topic whose partition leader is targeted.")
partition_option = click.option("--partition", type=int, default=None,
                                help="Partition of --topic (default: a random one).")
seed_option = click.option("--seed", type=int, default=None, help="Seed for random choices.")
target_option = click.option("--target", default="random", show_default=True,
                             help=f"{' | '.join(TARGETS)} | a node name (n1, n2, ...).")


def register(app: click.Group) -> None:
    """Add ``kchaos nemesis`` to the top-level group."""
    app.add_command(nemesis_group)


@click.group("nemesis")
def nemesis_group() -> None:
    """Inject one fault by hand into a running cluster, or heal all faults."""


@nemesis_group.command("partition")
@click.option("--topology", required=True, type=click.Choice(TOPOLOGIES), help="Who is cut off from whom.")
@click.option("--node", default=None, help="The node to isolate (isolate-node), to cut the clients from "
              "(client-cut-node) or that stops receiving (one-way; with --topic and no --node, the partition's leader).")
@click.option("--from", "senders", multiple=True, help="one-way: the nodes it stops hearing from (default: all others).")
@topic_option
@partition_option
@click.option("--ports", default=None, help="Drop only traffic to these ports, e.g. 9092 (keep controller traffic).")
@seed_option
@name_option
def partition_cmd(topology: str, node: str | None, senders: tuple[str, ...], topic: str | None,
                  partition: int | None, ports: str | None, seed: int | None, name: str) -> None:
    """Partition the network with iptables rules (healed by `kchaos nemesis heal`).

    The client-* topologies cut this host (where clients run) from some brokers
    on the client port while the brokers still see each other."""
    value: dict[str, Any] = {"topology": topology}
    if topology in ("isolate-leader", "client-cut-leader", "client-only-leader") and not topic:
        raise UsageError(f"--topology {topology} needs --topic (and optionally --partition)")
    if node and topology not in ("isolate-node", "one-way", "client-cut-node"):
        raise UsageError(f"--node applies to isolate-node, one-way and client-cut-node, not {topology}")
    if senders and topology != "one-way":
        raise UsageError("--from applies to one-way only")
    for key, v in (("node", node), ("partition", partition), ("seed", seed), ("ports", _parse_ports(ports))):
        if v is not None:
            value[key] = v
    if senders:
        value["from"] = [s for part in senders for s in part.split(",") if s]
    if topology == "one-way" and not node and topic:
        value["target"] = "leader"  # the partition's leader stops hearing from the others
    ctx = _context(name, topic, seed)
    _report(PartitionNemesis(ctx).invoke({"f": START_PARTITION, "value": value}))


def _process_cmd(f: str, target: str, topic: str | None, partition: int | None, seed: int | None, name: str) -> None:
    value = _target_value(target, topic, partition, seed)
    ctx = _context(name, topic, seed)
    nem = KillNemesis(ctx) if f == KILL else PauseNemesis(ctx)
    _report(nem.invoke({"f": f, "value": value}))


@nemesis_group.command("kill")
@target_option
@topic_option
@partition_option
@seed_option
@name_option
def kill_cmd(target: str, topic: str | None, partition: int | None, seed: int | None, name: str) -> None:
    """SIGKILL brokers (restarted by `kchaos nemesis heal`)."""
    _process_cmd("kill", target, topic, partition, seed, name)


@nemesis_group.command("pause")
@target_option
@topic_option
@partition_option
@seed_option
@name_option
def pause_cmd(target: str, topic: str | None, partition: int | None, seed: int | None, name: str) -> None:
    """SIGSTOP brokers (resumed by `kchaos nemesis heal`)."""
    _process_cmd("pause", target, topic, partition, seed, name)


@nemesis_group.command("clock")
@click.option("--bump", type=int, default=None, help="Set the node's clock this many seconds off (e.g. 3600, -120).")
@click.option("--strobe", default=None, help="Flip between two offsets A,B in seconds (e.g. 0,600).")
@click.option("--period", type=float, default=3.0, show_default=True, help="Strobe: seconds per offset (>= 2).")
@click.option("--duration", type=float, default=60.0, show_default=True, help="Strobe: seconds to keep flipping.")
@click.option("--reset", is_flag=True, help="Every node back to true time.")
@click.option("--node", default=None, help="Target node (same as --target nX).")
@target_option
@topic_option
@partition_option
@seed_option
@name_option
def clock_cmd(bump: int | None, strobe: str | None, period: float, duration: float, reset: bool, node: str | None,
              target: str, topic: str | None, partition: int | None, seed: int | None, name: str) -> None:
    """Skew broker clocks through libfaketime (reset by `kchaos nemesis heal`)."""
    if sum(x is not None and x is not False for x in (bump, strobe, reset or None)) != 1:
        raise UsageError("kchaos nemesis clock takes exactly one of --bump SECONDS, --strobe A,B, --reset")
    offsets: list[int] = []
    if strobe is not None:
        try:
            offsets = [int(x) for x in strobe.split(",")]
        except ValueError:
            offsets = []
        if len(offsets) != 2:
            raise UsageError(f"--strobe takes two offsets A,B in seconds, got {strobe!r}")
        if period < MIN_STROBE_PERIOD_S or duration <= 0:
            raise UsageError(f"--period must be at least {MIN_STROBE_PERIOD_S}s and --duration positive")
    value = {} if reset else _target_value(node or target, topic, partition, seed)
    nem = ClockNemesis(_context(name, topic, seed))
    if reset:
        _report(nem.invoke({"f": RESET, "value": {}}))
    elif bump is not None:
        value["offset_s"] = bump
        _report(nem.invoke({"f": BUMP, "value": value}))
    else:
        value.update(offsets_s=offsets, period_s=period, duration_s=duration)
        _report(nem.invoke({"f": STROBE, "value": value}))


@nemesis_group.command("netem")
@click.option("--delay", type=float, default=0.0, show_default=True, help="Added delay per packet, ms.")
@click.option("--jitter", type=float, default=0.0, show_default=True, help="Delay varies by up to this, ms.")
@click.option("--loss", type=float, default=0.0, show_default=True, help="Packets dropped, percent.")
@click.option("--reorder", type=float, default=0.0, show_default=True,
              help="Packets sent at once, ahead of delayed ones, percent (needs --delay).")
@click.option("--links", default="all", show_default=True,
              help="Which of the target's outgoing links: all | peers | client | node names and/or client, "
                   "comma separated (e.g. n2,client).")
@click.option("--mechanism", type=click.Choice(["auto", "netem", "iptables"]), default="auto", show_default=True,
              help="tc netem, or iptables loss and an NFQUEUE delayer; auto: netem where the kernel has it.")
@target_option
@topic_option
@partition_option
@seed_option
@name_option
def netem_cmd(delay: float, jitter: float, loss: float, reorder: float, links: str, mechanism: str, target: str,
              topic: str | None, partition: int | None, seed: int | None, name: str) -> None:
    """Slow or lossy links on the targets' links, with tc netem or iptables (removed by `kchaos nemesis heal`)."""
    value = {**_target_value(target, topic, partition, seed), "links": links, "delay_ms": delay,
             "jitter_ms": jitter, "loss_pct": loss, "reorder_pct": reorder, "mechanism": mechanism}
    shape_of(value)  # out-of-range parameters: one line, exit 64, before the cluster is looked up
    links_of(value)
    _report(NetemNemesis(_context(name, topic, seed)).invoke({"f": START_NETEM, "value": value}))


def _power_value(nodes: str, topic: str | None, partition: int | None, seed: int | None) -> dict[str, Any]:
    """NODES as a power-loss op value: node names (n1,n2) or one target word."""
    words = [w.strip() for w in nodes.split(",") if w.strip()]
    if len(words) == 1 and words[0] in POWER_TARGETS:
        return _target_keys(words[0], topic, partition, seed, "power-loss leader")
    if not words or not all(re.fullmatch(r"n[0-9]+", w) for w in words):
        raise UsageError(f"unknown power-loss target {nodes!r}; valid: node names (n1,n2,...) or one of "
                         f"{', '.join(POWER_TARGETS)}")
    return {"nodes": words}


@nemesis_group.command("power-loss")
@click.argument("nodes")
@click.option("--restart", is_flag=True, help="Start the brokers again at once (default: left down until "
              "`kchaos nemesis heal`).")
@topic_option
@partition_option
@seed_option
@name_option
def power_loss_cmd(nodes: str, restart: bool, topic: str | None, partition: int | None, seed: int | None,
                   name: str) -> None:
    """NODES lose power: SIGKILL, then every log byte Kafka never fsynced is dropped.

    NODES: node names (n1,n2) or one of random, leader, controller, minority,
    majority, all. Prints per node the offsets each partition log lost."""
    value = _power_value(nodes, topic, partition, seed)
    if restart:
        value["restart"] = True
    _report(PowerLossNemesis(_context(name, topic, seed)).invoke({"f": POWER_LOSS, "value": value}))


@nemesis_group.command("heal")
@click.option("--no-restart", is_flag=True, help="Do not start brokers that are down.")
@click.option("--restart-skewed", is_flag=True,
              help="Also restart brokers whose clock was skewed (their wall-clock timers stall after a jump back).")
@name_option
def heal_cmd(no_restart: bool, restart_skewed: bool, name: str) -> None:
    """Remove the partition chain, netem qdiscs, chains and delayers, reset clocks, resume and restart brokers."""
    report = heal_all(cluster_attach(name).kafka, restart_dead=not no_restart, restart_skewed=restart_skewed)
    for node, status in report.items():
        click.echo(f"{node}: {status}")
    failed = {n: s for n, s in report.items() if not (s == "ok" or s.startswith("restarted"))}
    if failed:
        raise NemesisFailed("heal failed on " + "; ".join(f"{n}: {s}" for n, s in failed.items()))


def parse_rule_words(text: str) -> dict[str, Any]:
    """One ``--rule``: words KEY=VALUE, each VALUE a TOML value (a number,
    true/false, [an, array], "a string") or else a bare string, e.g.
    ``api=EndTxn action=hold until=next-produce max_hold_ms=30000``."""
    out: dict[str, Any] = {}
    for word in shlex.split(text):
        key, sep, raw = word.partition("=")
        if not sep or not key:
            raise UsageError(f"--rule takes KEY=VALUE words, got {word!r}")
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw
    return out


def proxy_rules_from(rule_texts: tuple[str, ...], rules_file: str | None) -> list[Rule]:
    """The rules of ``--rule`` words and of a TOML file's ``[[nemesis.proxy]]``
    (a run config) or ``[[proxy]]`` tables; one line, exit 64, on bad input."""
    raw: list[Any] = [parse_rule_words(t) for t in rule_texts]
    if rules_file is not None:
        try:
            data = tomllib.loads(Path(rules_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise UsageError(f"--rules {rules_file}: {exc}") from None
        tables = data.get("nemesis", {}).get("proxy") or data.get("proxy")
        if not tables:
            raise UsageError(f"--rules {rules_file}: no [[nemesis.proxy]] or [[proxy]] rule tables")
        raw += tables
    if not raw:
        raise UsageError("kchaos nemesis proxy needs at least one --rule or --rules FILE")
    return parse_rules(raw)


def _print_event(value: dict[str, Any]) -> None:
    value = dict(value)
    head = [time.strftime("%H:%M:%S"), value.pop("event"), _fmt(value.pop("nodes", [])), str(value.pop("api", "")),
            f"v{value.pop('api_version', '?')}", f"corr {value.pop('correlation_id', '?')}",
            str(value.pop("client_id", ""))]
    click.echo(" ".join(head + [f"{k}={_fmt(v)}" for k, v in value.items()]))


@nemesis_group.command("proxy")
@click.option("--rule", "rule_texts", multiple=True,
              help='A rule as KEY=VALUE words (repeatable), e.g. "api=EndTxn action=hold until=next-produce".')
@click.option("--rules", "rules_file", default=None,
              help="A TOML file of [[nemesis.proxy]] (a run config) or [[proxy]] rule tables.")
@click.option("--for", "for_s", type=float, default=None, help="Stop after this many seconds (default: Ctrl-C).")
@seed_option
@name_option
def proxy_cmd(rule_texts: tuple[str, ...], rules_file: str | None, for_s: float | None, seed: int | None,
              name: str) -> None:
    """Forward the clients' traffic through the protocol proxy with rules armed, one line per action,
    until Ctrl-C or --for; then heal (held requests are dropped unsent).

    Clients reach the proxy by bootstrapping on the ports it prints (the
    cluster's brokers advertise them on their PROXY listener; `kchaos cluster
    up` sets it up). Rule keys: docs/design.md, "Faults inside Kafka's protocol"."""
    rules = proxy_rules_from(rule_texts, rules_file)  # bad input exits 64 before the cluster is looked up
    if for_s is not None and for_s <= 0:
        raise UsageError(f"--for takes a positive number of seconds, got {for_s:g}")
    ports = kept_proxy_ports(name)
    if not ports:
        raise UsageError(f"cluster {name!r} advertises no proxy listener: bring it up again with "
                         f"`kchaos cluster up --name {name}`")
    kafka = cluster_attach(name).kafka
    seed = random.randrange(2**31) if seed is None else seed
    try:
        proxy = KafkaProxy(sorted(ports), _print_event, seed, ports=ports)
    except OSError as exc:
        raise NemesisFailed(f"cannot listen on the cluster's proxy ports {_fmt(sorted(ports.values()))}: {exc}") \
            from None
    proxy.start({n.name: (n.address, PROXY_PORT) for n in kafka.broker_nodes})
    try:
        proxy.arm(rules)
        click.echo(f"proxy for cluster {name}: bootstrap servers {proxy.bootstrap()}; {len(rules)} rule(s) armed, "
                   f"seed {seed}" + (f", for {for_s:g} s" if for_s else "; Ctrl-C heals and stops"))
        end = time.monotonic() + for_s if for_s else None
        while end is None or time.monotonic() < end:
            time.sleep(0.2 if end is None else max(0.0, min(0.2, end - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        dropped = proxy.heal()
        proxy.stop()
        click.echo(f"healed: everything passes through; {dropped} held request(s) dropped unsent")
