"""Provisioning an SSH host to run a broker: what a node image has built in.

A probe lists what the host lacks (a JRE 17+, iptables, iproute2, procps,
libfaketime, ...); apt-get installs it (a host without apt-get is told what to
install itself); then the folders the caller names are made and the Kafka
distribution's jars and log4j2 config are synced to ``KAFKA_HOME``.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from infra.distribution import KAFKA_CONFIG, KAFKA_LIB, KAFKA_LOG4J_CONFIG, KafkaDistribution
from infra.errors import KchaosError
from infra.ssh_node import SshNode

log = logging.getLogger(__name__)


class ProvisionError(KchaosError):
    """A host lacks what a broker needs and it could not be installed."""


JRE_CANDIDATES = ("openjdk-17-jre-headless", "openjdk-21-jre-headless", "default-jre-headless")
COMMAND_PACKAGES = {
    "iptables": "iptables", "ip": "iproute2", "pgrep": "procps", "pkill": "procps", "ps": "procps",
    "timeout": "coreutils", "setsid": "util-linux",
}
MIN_JAVA = 17

PROBE_SCRIPT = r"""
for c in java iptables ip pgrep pkill ps timeout setsid; do
  command -v "$c" >/dev/null 2>&1 || echo "missing $c"
done
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || echo "missing libfaketime"
command -v apt-get >/dev/null 2>&1 && echo "pm apt-get"
command -v java >/dev/null 2>&1 && java -version 2>&1 | head -n 1 | sed 's/^/java /'
exit 0
"""


@dataclass
class Probe:
    missing: list[str] = field(default_factory=list)   # commands / libraries absent
    java_major: int | None = None
    apt: bool = False

    def packages(self) -> list[str]:
        """What to install: "jre" stands for the JRE package chosen on the host."""
        pkgs: list[str] = []
        if "java" in self.missing or (self.java_major is not None and self.java_major < MIN_JAVA):
            pkgs.append("jre")
        for c in self.missing:
            if c in COMMAND_PACKAGES:
                pkgs.append(COMMAND_PACKAGES[c])
            elif c == "libfaketime":
                pkgs.append("libfaketime")
        return list(dict.fromkeys(pkgs))


def parse_probe(text: str) -> Probe:
    probe = Probe()
    for line in text.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind == "missing":
            probe.missing.append(rest.strip())
        elif kind == "pm" and rest.strip() == "apt-get":
            probe.apt = True
        elif kind == "java":
            m = re.search(r'version "(\d+)(?:\.(\d+))?', rest)
            if m:
                major = int(m.group(1))
                probe.java_major = int(m.group(2) or 0) if major == 1 else major
    return probe


@dataclass
class ProvisionReport:
    installed: list[str] = field(default_factory=list)
    uploaded: int = 0
    skipped: int = 0
    removed: int = 0


def _probe(node: SshNode) -> Probe:
    return parse_probe(node.run(["sh", "-c", PROBE_SCRIPT], timeout=60).out)


def _install_packages(node: SshNode, probe: Probe) -> list[str]:
    wanted = probe.packages()
    if not wanted:
        return []
    what = ", ".join("a JRE (17+)" if p == "jre" else p for p in wanted)
    if not probe.apt:
        raise ProvisionError(f"{node.label}: missing {what} and no apt-get to install them; "
                             "install them on the host yourself")
    apt_env = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    log.info("%s: installing %s with apt-get", node.name, what)
    res = node.run(["apt-get", "update", "-qq"], env=apt_env, timeout=600, check=False)
    if res.exit != 0:
        tail = (res.err or res.out).strip().splitlines()[-1:] or [f"exit {res.exit}"]
        raise ProvisionError(f"{node.label}: apt-get update failed: {tail[0]}")
    packages = [p for p in wanted if p != "jre"]
    if "jre" in wanted:
        script = "for p in " + " ".join(JRE_CANDIDATES) + \
                 "; do apt-cache show \"$p\" >/dev/null 2>&1 && { echo \"$p\"; exit 0; }; done; exit 1"
        pick = node.run(["sh", "-c", script], timeout=60, check=False)
        if pick.exit != 0 or not pick.out.strip():
            raise ProvisionError(f"{node.label}: no Java {MIN_JAVA}+ package ({', '.join(JRE_CANDIDATES)}) "
                                 "in the host's apt sources; install a JRE yourself")
        packages.insert(0, pick.out.strip())
    res = node.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
                   env=apt_env, timeout=1200, check=False)
    if res.exit != 0:
        tail = (res.err or res.out).strip().splitlines()[-1:] or [f"exit {res.exit}"]
        raise ProvisionError(f"{node.label}: apt-get install {' '.join(packages)} failed: {tail[0]}")
    return packages


def provision(node: SshNode, dist: KafkaDistribution, folders: Sequence[str] = ()) -> ProvisionReport:
    """Make one host ready to run the distribution: packages, jars, log4j2 config,
    and ``folders`` (the ones the software run from it writes: infra does not
    know them).

    Jars already on the host with the same size are kept; jars the distribution
    lacks are removed (the broker's classpath is the whole folder).
    """
    report = ProvisionReport()
    probe = _probe(node)
    report.installed = _install_packages(node, probe)
    if report.installed:
        after = _probe(node)
        if after.packages():
            what = ", ".join("a JRE (17+)" if p == "jre" else p for p in after.packages())
            extra = ""
            if "jre" in after.packages() and after.java_major is not None:
                extra = f" (java on PATH is still {after.java_major}: update-alternatives --config java)"
            raise ProvisionError(f"{node.label}: still missing {what} after apt-get install{extra}")
    node.run(["mkdir", "-p", *folders, KAFKA_LIB, KAFKA_CONFIG])
    local = {p.name: p for p in sorted(Path(dist.lib).glob("*.jar"))}
    listing = node.run(["find", KAFKA_LIB, "-maxdepth", "1", "-type", "f", "-printf", "%s %f\\n"]).out
    remote: dict[str, int] = {}
    for line in listing.splitlines():
        size, _, name = line.partition(" ")
        if size.isdigit() and name:
            remote[name] = int(size)
    stale = sorted(n for n in remote if n not in local)
    if stale:
        node.run(["rm", "-f", "--", *(f"{KAFKA_LIB}/{n}" for n in stale)])
    uploads = [(p, f"{KAFKA_LIB}/{n}") for n, p in local.items() if remote.get(n) != p.stat().st_size]
    uploads.append((Path(dist.log4j_config), KAFKA_LOG4J_CONFIG))
    node.put_many(uploads)
    report.removed = len(stale)
    report.uploaded = len(uploads) - 1
    report.skipped = len(local) - report.uploaded
    log.info("%s provisioned: %s", node.name, report)
    return report
