"""One broker's life on one node, entirely through the Node interface.

The broker is not the node's main process (containers run ``sleep``; SSH
hosts run sshd), so it can be killed, paused and restarted in place.
"""
from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from broker.config import COMBINED, CONFIG_PATH, DATA_DIR, FAKETIME_FILE, LOG_DIR, STATIC_QUORUM, broker_id, \
    new_cluster_id, render_properties
from infra.distribution import KAFKA_LIB, KAFKA_LOG4J_CONFIG, KafkaDistribution
from infra.errors import BrokerNotReady, NodeCommandError
from infra.node import Node, shell_join

log = logging.getLogger(__name__)

STDOUT_LOG = f"{LOG_DIR}/kafka.out"
SERVER_LOG = f"{LOG_DIR}/server.log"
PROCESS_PATTERN = "kafka[.]Kafka " + CONFIG_PATH
READY_LINE = "Kafka Server started"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
FAKETIME_LIBS = "/usr/lib/*/faketime/libfaketimeMT.so.1"
# The broker's AppCDS archive on a node (see KafkaCluster.setup): present, the JVM
# maps Kafka's classes from it instead of loading them from the jars.
CDS_ARCHIVE = "/var/lib/kchaos/kafka-cds.jsa"
# The JVM's CDS log of the current start (info level: a refused archive is
# silent at warning level) and its complaint, if any; with -Xshare:auto the JVM
# then loads classes from the jars, as without an archive.
CDS_LOG = f"{LOG_DIR}/cds.log"
CDS_REFUSAL = f"grep -h -E 'UseSharedSpaces:|Unable to|mismatch' {CDS_LOG} 2>/dev/null | head -n 3"
# Where a recording JVM writes the archive when it exits.
CDS_RECORDING = "/var/lib/kchaos/kafka-cds.recording.jsa"
# What a node runs the broker with: the jars and the JVM. Its digest keys the
# cached bootstrap checkpoint and CDS archive (a different Kafka or JDK, a new key).
# Another Kafka's jars, unpacked beside the node's own (KAFKA_LIB) for a rolling
# upgrade; the jars a switch replaced are kept here under their version too.
OTHER_KAFKA_LIB = "/opt/kafka-{version}/lib"
VERSION_LINE = "Kafka version: "   # what every Kafka logs as it starts (AppInfoParser)
RUNTIME_LISTING = ("ls -lnL --time-style=+%s " + KAFKA_LIB +
                   " /usr/lib/jvm/*/lib/server/libjvm.so /usr/lib/jvm/*/lib/server/classes.jsa 2>/dev/null; "
                   "readlink -f \"$(command -v java)\"")


@dataclass
class BrokerSettings:
    heap: str = "512m"
    properties: dict[str, object] = field(default_factory=dict)
    # Features given to StorageTool format, e.g. {"eligible.leader.replicas.version": 0}.
    features: dict[str, int] = field(default_factory=dict)
    # Start the broker JVM from a class-data-sharing archive when one is cached.
    cds: bool = True
    # Node name -> the port of its protocol proxy on the harness host (broker.config, PROXY_PORT).
    proxy_ports: dict[str, int] = field(default_factory=dict)
    # The KRaft voter set: "static" (controller.quorum.voters) or "dynamic" (KIP-853; broker.config).
    quorum: str = STATIC_QUORUM


def _java(node_classpath: str, main: str, *args: str, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={KAFKA_LOG4J_CONFIG}", f"-Dkafka.logs.dir={LOG_DIR}",
            "-cp", node_classpath, main, *args]


def first_error_line(text: str) -> str:
    """The line of a JVM's output that says what went wrong, not the stack trace's tail."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for line in lines:
        if ("Exception" in line or "Error" in line or "ERROR" in line) and not line.startswith("at "):
            return line[:400]
    return (lines[-1] if lines else "no output")[:400]


class Broker:
    """The Kafka process of one node, whatever its KRaft ``role`` (broker.config:
    a controller-only node's process is handled the same way)."""

    def __init__(self, node: Node, settings: BrokerSettings | None = None, role: str = COMBINED):
        self.node = node
        self.settings = settings or BrokerSettings()
        self.role = role

    @property
    def name(self) -> str:
        return self.node.name

    def configure(self, voters: Sequence[tuple[str, str]], overrides: Mapping[str, object] | None = None,
                  brokers: int | None = None) -> str:
        text = render_properties(self.node.name, self.node.address, voters,
                                 {**self.settings.properties, **(overrides or {})},
                                 proxy_port=self.settings.proxy_ports.get(self.node.name),
                                 role=self.role, brokers=brokers, quorum=self.settings.quorum)
        with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as tmp:
            tmp.write(text)
        self.node.put(Path(tmp.name), CONFIG_PATH)
        Path(tmp.name).unlink()
        self.node.run(["mkdir", "-p", DATA_DIR, LOG_DIR, str(Path(FAKETIME_FILE).parent)])
        self.node.run(["sh", "-c", f"test -f {FAKETIME_FILE} || echo +0s > {FAKETIME_FILE}"])
        return text

    def format(self, cluster_id: str, quorum_args: Sequence[str] = ()) -> None:
        """Kafka's StorageTool: meta.properties and the bootstrap checkpoint (the
        initial feature levels) in the data folder. ``quorum_args``: a dynamic
        quorum's ``--initial-controllers ...`` or ``--no-initial-controllers``."""
        args = ["format", "-t", cluster_id, "-c", CONFIG_PATH, "--ignore-formatted", *quorum_args]
        for feature, level in sorted(self.settings.features.items()):
            args += ["--feature", f"{feature}={level}"]
        res = self.node.run(_java(f"{KAFKA_LIB}/*", "kafka.tools.StorageTool", *args), timeout=120, check=False)
        if res.exit != 0:
            raise BrokerNotReady(f"{self.name}: formatting storage failed: {first_error_line(res.out + res.err)}")

    def bootstrap_checkpoint(self) -> bytes:
        """The bootstrap checkpoint a format wrote (the same bytes on every node
        of a cluster with static voters: feature levels only, no node or cluster id)."""
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / BOOTSTRAP_CHECKPOINT
            self.node.get(f"{DATA_DIR}/{BOOTSTRAP_CHECKPOINT}", local)
            return local.read_bytes()

    def format_like(self, cluster_id: str, bootstrap: bytes) -> None:
        """What ``format`` writes, without a JVM: meta.properties (this node's id,
        a fresh directory id) and a copy of another node's bootstrap checkpoint.
        A no-op on a node already formatted, as ``format --ignore-formatted``."""
        if self.node.run(["test", "-e", f"{DATA_DIR}/meta.properties"], check=False).exit == 0:
            return
        meta = (f"node.id={broker_id(self.name)}\ndirectory.id={new_cluster_id()}\nversion=1\n"
                f"cluster.id={cluster_id}\n")
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in (("meta.properties", meta.encode()), (BOOTSTRAP_CHECKPOINT, bootstrap)):
                (Path(tmp) / name).write_bytes(data)
                self.node.put(Path(tmp) / name, f"{DATA_DIR}/{name}")

    def runtime_listing(self) -> str:
        """The jars and the JVM this node runs the broker with (see RUNTIME_LISTING)."""
        return self.node.run(["sh", "-c", RUNTIME_LISTING], check=False).out

    def put_cds_archive(self, local: Path) -> None:
        self.node.put(local, CDS_ARCHIVE)

    def take_cds_recording(self, local: Path) -> bool:
        """Copy the archive a recording JVM wrote at exit; False if it wrote none."""
        try:
            self.node.get(CDS_RECORDING, local)
            return True
        except NodeCommandError:
            return False

    def stage_kafka(self, dist: KafkaDistribution) -> bool:
        """Unpack ``dist``'s jars on the node beside its own Kafka, while the
        broker runs on (docs/design.md, "Rolling upgrades"); False when they are there already."""
        lib = OTHER_KAFKA_LIB.format(version=dist.version)
        if self.node.run(["test", "-e", f"{lib}/.complete"], check=False).exit == 0:
            return False
        archive = f"/tmp/kchaos-kafka-{dist.version}.tar"
        self.node.put(dist.lib_archive(), archive)
        self.node.run(["sh", "-c", f"rm -rf {lib} && mkdir -p {lib} && tar -C {lib} -xf {archive} && "
                                   f"rm -f {archive} && touch {lib}/.complete"], timeout=120)
        return True

    def switch_kafka(self, installed: str, version: str) -> None:
        """Make the staged ``version`` the node's Kafka (KAFKA_LIB), keeping the
        ``installed`` jars beside it; the broker must be stopped. The same data
        folder and server.properties stay. The CDS archive, made from the old
        jars, goes: the JVM would refuse it."""
        staged, kept = OTHER_KAFKA_LIB.format(version=version), OTHER_KAFKA_LIB.format(version=installed)
        self.node.run(["sh", "-c", f"set -e; test -e {staged}/.complete; rm -rf {kept}; "
                                   f"mkdir -p {Path(kept).parent}; mv {KAFKA_LIB} {kept}; touch {kept}/.complete; "
                                   f"rm -f {staged}/.complete; mv {staged} {KAFKA_LIB}; rm -f {CDS_ARCHIVE}"],
                      timeout=60)

    def logged_version(self) -> str | None:
        """The Kafka version the broker's server log says it started with last."""
        res = self.node.run(["sh", "-c", f"grep -h '{VERSION_LINE}' {SERVER_LOG} 2>/dev/null | tail -n 1"],
                            check=False)
        line = res.out.strip()
        return line.split(VERSION_LINE, 1)[1].split()[0] if VERSION_LINE in line else None

    def wipe(self) -> None:
        self.node.run(["sh", "-c", f"rm -rf {DATA_DIR}/* {LOG_DIR}/*"])

    def start(self, record_cds: bool = False) -> None:
        """Launch the broker JVM. It maps classes from the node's CDS archive if
        there is one (the JVM itself falls back to the jars if it refuses it);
        ``record_cds`` instead makes the JVM write a new archive when it exits."""
        if self.pid() is not None:
            return
        probe = self.node.run(["sh", "-c", f"ls {FAKETIME_LIBS} 2>/dev/null | head -n1; "
                                           f"rm -f {CDS_LOG}; test -s {CDS_ARCHIVE} && echo cds"],
                               check=False).out.split()
        libs = next((p for p in probe if p != "cds"), "")
        cds: list[str] = []
        if record_cds:
            self.node.run(["sh", "-c", f"mkdir -p {Path(CDS_RECORDING).parent} && rm -f {CDS_RECORDING}"],
                          check=False)
            cds = [f"-XX:ArchiveClassesAtExit={CDS_RECORDING}"]
        elif self.settings.cds and "cds" in probe:
            cds = [f"-XX:SharedArchiveFile={CDS_ARCHIVE}", "-Xshare:auto", f"-Xlog:cds=info:file={CDS_LOG}"]
        env = {"KAFKA_HEAP": self.settings.heap}
        preload = ""
        if libs:
            # Neutral until the clock nemesis writes an offset; the monotonic clock is never
            # faked. Without FORCE_MONOTONIC_FIX=0, Debian's libfaketime 0.9.10 makes the
            # JVM's timed waits spin (every thread busy, KRaft never elects a leader).
            preload = (f"LD_PRELOAD={libs} FAKETIME_TIMESTAMP_FILE={FAKETIME_FILE} "
                       "FAKETIME_CACHE_DURATION=1 DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0 ")
        java = ["java", f"-Xmx{self.settings.heap}", f"-Xms{self.settings.heap}", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true", *cds,
                f"-Dlog4j2.configurationFile={KAFKA_LOG4J_CONFIG}", f"-Dkafka.logs.dir={LOG_DIR}",
                "-cp", f"{KAFKA_LIB}/*", "kafka.Kafka", CONFIG_PATH]
        script = f"echo \"--- start $(date -u +%FT%TZ)\" >> {STDOUT_LOG}; exec env {preload}{shell_join(java)} >> {STDOUT_LOG} 2>&1"
        self.node.run(["setsid", "sh", "-c", script], detach=True, env=env)
        deadline = time.monotonic() + 10
        while self.pid() is None:
            if time.monotonic() > deadline:
                raise BrokerNotReady(f"{self.name}: broker JVM did not start: {self.log_tail(STDOUT_LOG)}")
            time.sleep(0.2)

    def pid(self) -> int | None:
        res = self.node.run(["pgrep", "-f", PROCESS_PATTERN], check=False)
        pids = [int(p) for p in res.out.split() if p.isdigit()]
        return pids[0] if pids else None

    def process_state(self) -> str | None:
        """ps state letter: S/R running, T stopped (paused), Z zombie; None if gone."""
        pid = self.pid()
        if pid is None:
            return None
        res = self.node.run(["ps", "-o", "stat=", "-p", str(pid)], check=False)
        return res.out.strip()[:1] or None

    def is_running(self) -> bool:
        return self.process_state() not in (None, "Z")

    def signal(self, sig: str) -> bool:
        """Send a signal to the broker JVM; False if it was not running."""
        return self.node.run(["pkill", f"-{sig}", "-f", PROCESS_PATTERN], check=False).exit == 0

    def kill(self, wait_s: float = 15.0) -> bool:
        killed = self.signal("KILL")
        self._wait_gone(wait_s)
        return killed

    def stop(self, wait_s: float = 30.0) -> None:
        self.signal("CONT")  # a paused JVM cannot act on SIGTERM
        if self.signal("TERM") and not self._wait_gone(wait_s):
            self.kill()

    def pause(self) -> bool:
        return self.signal("STOP")

    def resume(self) -> bool:
        return self.signal("CONT")

    def _wait_gone(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not self.is_running():
                return True
            time.sleep(0.2)
        return False

    def log_tail(self, path: str = SERVER_LOG, lines: int = 5) -> str:
        res = self.node.run(["tail", "-n", str(lines), path], check=False)
        return " | ".join(l.strip() for l in res.out.splitlines() if l.strip()) or "(log empty)"

    def started_count(self) -> int:
        """How many times the server log says the broker finished starting."""
        res = self.node.run(["sh", "-c", f"grep -c '{READY_LINE}' {SERVER_LOG} 2>/dev/null || true"], check=False)
        try:
            return int(res.out.strip() or 0)
        except ValueError:
            return 0

    def wait_started(self, timeout_s: float = 90.0, previous_starts: int = 0) -> None:
        """Until the server log says the broker started more than ``previous_starts`` times.

        The waiting happens inside the node, one command at a time of up to 10 s
        that checks the log every 0.2 s and returns as soon as the line is there
        or the JVM is gone: a host-side poll costs a ``docker exec`` (a runc
        process) per look, which on a loaded machine took CPU from the JVMs and
        added up to half a second of lag.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._wait_line_in_node(min(10.0, max(1.0, deadline - time.monotonic())), previous_starts):
                return
            if not self.is_running() and not self._alive_on_second_look(previous_starts):
                out = self.node.run(["tail", "-n", "200", STDOUT_LOG], check=False).out
                raise BrokerNotReady(f"{self.name}: broker exited before it was ready: {first_error_line(out)}; "
                                     f"log tail: {self.log_tail()}")
            time.sleep(0.1)
        raise BrokerNotReady(f"{self.name}: broker not ready after {timeout_s:.0f}s; log tail: {self.log_tail()}")

    def _wait_line_in_node(self, wait_s: float, previous_starts: int) -> bool:
        """True once the ready line count passes ``previous_starts``; False when
        ``wait_s`` ran out or the JVM was not seen (the caller looks closer)."""
        script = (f"end=$(( $(date +%s) + {int(wait_s)} )); "
                  f"while [ $(date +%s) -lt $end ]; do "
                  f"n=$(grep -c '{READY_LINE}' {SERVER_LOG} 2>/dev/null); "
                  f"[ \"${{n:-0}}\" -gt {previous_starts} ] && {{ {CDS_REFUSAL}; exit 0; }}; "
                  f"pgrep -f '{PROCESS_PATTERN}' >/dev/null || exit 3; sleep 0.2; done; exit 1")
        res = self.node.run(["sh", "-c", script], check=False, timeout=wait_s + 15)
        if res.exit == 0 and res.out.strip():
            log.warning("%s: the JVM refused the CDS archive, so the broker started from the jars: %s",
                        self.name, res.out.strip()[:300])
        return res.exit == 0

    def _alive_on_second_look(self, previous_starts: int) -> bool:
        """One failed process check is not a dead broker: a busy node can miss a
        pgrep. Look again a moment later, at the process and at the log."""
        time.sleep(1.0)
        return self.is_running() or self.started_count() > previous_starts

    def log_files(self) -> list[str]:
        res = self.node.run(["sh", "-c", f"ls {LOG_DIR}/* {CONFIG_PATH} {FAKETIME_FILE} 2>/dev/null"], check=False)
        return [p for p in res.out.split() if p]

    def collect_logs(self, dest: Path) -> list[Path]:
        """Copy every broker log and its config into dest (a folder per node)."""
        dest.mkdir(parents=True, exist_ok=True)
        copied = []
        for remote in self.log_files():
            local = dest / Path(remote).name
            try:
                self.node.get(remote, local)
                copied.append(local)
            except NodeCommandError as exc:
                log.warning("could not collect %s from %s: %s", remote, self.name, exc)
        return copied
