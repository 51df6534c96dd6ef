"""Kafka from Maven Central, resolved with mvn into a versioned cache folder.

The broker and its command-line tools are plain jars; we need no tarball.
Logging is missing from the POMs, so the log4j2 runtime pieces are added and
a log4j2 config is shipped beside the jars.

Every node holds the distribution at ``KAFKA_HOME`` (the node image copies it
there, SSH provisioning uploads it there), so the paths below are the one
definition the broker's command lines use too.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from infra.errors import KafkaVersionNotFound, KchaosError
from infra.kafka_versions import features

KAFKA_HOME = "/opt/kafka"
KAFKA_LIB = f"{KAFKA_HOME}/lib"  # every jar: the broker's classpath is this whole folder
KAFKA_CONFIG = f"{KAFKA_HOME}/config"
KAFKA_LOG4J_CONFIG = f"{KAFKA_CONFIG}/log4j2.xml"

DEFAULT_KAFKA_VERSION = "4.3.1"  # newest 4.x whose kafka-tools resolves too (4.4.0 lacks it)
LOG4J_VERSION = "2.24.3"
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+([.-][A-Za-z0-9]+)*$")

POM_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kchaos</groupId>
  <artifactId>kafka-dist</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{v}</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{v}</version>
      <!-- Kafka Connect is not needed to run or administer brokers. -->
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-api</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-transforms</artifactId></exclusion>
{extra_exclusions}      </exclusions>
    </dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>{log4j}</version></dependency>
{extra_dependencies}  </dependencies>
</project>
"""

LOG4J2_CONFIG = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="${sys:kafka.logs.dir}/server.log"
                 filePattern="${sys:kafka.logs.dir}/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="100 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.controller" level="TRACE"/>
    <Logger name="state.change.logger" level="INFO"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Logger name="org.apache.kafka.raft" level="INFO"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


def cache_root() -> Path:
    base = os.environ.get("KCHAOS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kchaos")
    return Path(base)


@dataclass(frozen=True)
class KafkaDistribution:
    version: str
    root: Path  # holds lib/*.jar and config/log4j2.xml

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def log4j_config(self) -> Path:
        return self.root / "config" / "log4j2.xml"

    def lib_archive(self) -> Path:
        """A tar of ``lib/`` (jar names at its top), made once beside it: what a
        rolling upgrade unpacks on a node to install this version there
        (docs/design.md, "Rolling upgrades")."""
        archive = self.root / "lib.tar"
        if not archive.exists():
            partial = archive.with_name("lib.tar.partial")
            with tarfile.open(partial, "w") as tar:
                for jar in sorted(self.lib.glob("*.jar")):
                    tar.add(jar, arcname=jar.name)
            partial.rename(archive)
        return archive

    def digest(self) -> str:
        """A hash of the jar names and sizes: part of the node image's tag."""
        h = hashlib.sha256()
        for jar in sorted(self.lib.glob("*.jar")):
            h.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
        h.update(LOG4J2_CONFIG.encode())
        return h.hexdigest()[:12]


def validate_version(version: str) -> str:
    if not _VERSION_RE.match(version):
        raise KafkaVersionNotFound(f"Kafka version {version!r} is not a version number like 4.4.0")
    return version


def render_pom(version: str) -> str:
    """The POM that resolves ``version``: the template, plus the exclusions the version
    table asks for (none for 4.x, so its text, and its cache folder, are unchanged)."""
    table = features(version)
    exclusions = "".join(
        f"        <exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>\n"
        for g, a in (ga.split(":") for ga in table.excluded_artifacts))
    dependencies = "".join(
        f"    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>{a}</artifactId>"
        f"<version>{LOG4J_VERSION}</version></dependency>\n" for a in table.log4j_artifacts)
    return POM_TEMPLATE.format(v=version, log4j=LOG4J_VERSION, extra_exclusions=exclusions,
                               extra_dependencies=dependencies)


def _cache_folder(version: str, pom: str, cache: Path | None) -> Path:
    # The POM's hash is in the folder name: a changed resolution never reuses a stale cache.
    return (cache or cache_root()) / "kafka" / f"{version}-{hashlib.sha256(pom.encode()).hexdigest()[:8]}"


def check_available(version: str, cache: Path | None = None) -> None:
    """Raise KafkaVersionNotFound unless ``version`` would resolve: it is in the
    cache, or Maven finds Kafka's POM for it (a few kB: a dry run checks
    without fetching the jars a run needs)."""
    validate_version(version)
    if (_cache_folder(version, render_pom(version), cache) / ".complete").exists():
        return
    if shutil.which("mvn") is None:
        raise KafkaVersionNotFound(f"Kafka version {version} cannot be checked: mvn is not installed")
    try:
        proc = subprocess.run(
            ["mvn", "-B", "-q", "dependency:get", f"-Dartifact=org.apache.kafka:kafka_2.13:{version}:pom",
             "-Dtransitive=false"], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise KafkaVersionNotFound(f"Kafka version {version} cannot be checked: mvn took over 300 s") from None
    if proc.returncode == 0:
        return
    text = proc.stdout + proc.stderr
    if "Could not find artifact" in text or "was not found in" in text:
        raise KafkaVersionNotFound(f"Kafka version {version} does not exist on Maven Central "
                                   f"(org.apache.kafka:kafka_2.13:{version}); try {DEFAULT_KAFKA_VERSION}")
    last = [l for l in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() if "ERROR" in l][:1]
    raise KafkaVersionNotFound(f"Kafka version {version} cannot be checked: mvn failed: "
                               f"{last[0].strip()[:300] if last else 'no output'}")


def resolve_kafka(version: str = DEFAULT_KAFKA_VERSION, cache: Path | None = None) -> KafkaDistribution:
    """Return the cached distribution, resolving it with mvn on first use."""
    validate_version(version)
    pom = render_pom(version)
    root = _cache_folder(version, pom, cache)
    done = root / ".complete"
    dist = KafkaDistribution(version, root)
    if done.exists():
        return dist
    not_found = (f"Kafka version {version} does not resolve from Maven Central "
                 f"(org.apache.kafka:kafka_2.13:{version}); try {DEFAULT_KAFKA_VERSION}")
    work = copy_dependencies(pom, root, not_found, f"Kafka {version}")
    (work / "config").mkdir()
    (work / "config" / "log4j2.xml").write_text(LOG4J2_CONFIG)
    finish_cache_folder(work, root, version)
    return dist


def copy_dependencies(pom: str, root: Path, not_found: str, what: str) -> Path:
    """Resolve ``pom``'s runtime dependencies with mvn into ``lib/`` of a fresh
    ``<root>.partial`` folder (returned; ``finish_cache_folder`` makes it
    ``root``). Raises KafkaVersionNotFound(``not_found``) when Maven Central has
    no such artifact, KchaosError naming ``what`` on any other mvn failure."""
    if shutil.which("mvn") is None:
        raise KchaosError("mvn is not installed; run the set-up (./kchaos) or apt-get install maven")
    work = root.with_name(root.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "lib").mkdir(parents=True)
    (work / "pom.xml").write_text(pom)
    proc = subprocess.run(
        ["mvn", "-B", "-q", "-U", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={work / 'lib'}"],
        capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        shutil.rmtree(work, ignore_errors=True)
        if "Could not find artifact" in text or "was not found in" in text:
            raise KafkaVersionNotFound(not_found)
        last = [l for l in text.splitlines() if "ERROR" in l][:1] or text.splitlines()[-1:]
        raise KchaosError(f"mvn failed to fetch {what}: {last[0] if last else 'no output'}")
    return work


def finish_cache_folder(work: Path, root: Path, stamp: str) -> None:
    """Mark ``work`` complete and move it to ``root`` (a cache folder is whole or absent)."""
    (work / ".complete").write_text(stamp)
    shutil.rmtree(root, ignore_errors=True)
    work.rename(root)
