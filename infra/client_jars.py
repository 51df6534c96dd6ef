"""The official Java client (``kafka-clients``) from Maven Central, and a
driver compiled against it, in versioned cache folders.

The jars resolve the way the broker's do (infra/distribution.py: a generated
POM, ``mvn dependency:copy-dependencies``); the driver's source files (every
``*.java`` of its folder) are compiled with the JDK's ``javac`` on first use
and cached under the client version and the sources' digest, so an edited
driver is rebuilt and an unchanged one never is (docs/design.md, "The client protocol").
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.distribution import (LOG4J_VERSION, cache_root, copy_dependencies, finish_cache_folder,
                                validate_version)
from infra.errors import KafkaVersionNotFound, KchaosError

JACKSON_VERSION = "2.16.2"    # the driver's JSON: the version Kafka 3.8 and 4.x brokers ship

CLIENT_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kchaos</groupId>
  <artifactId>kafka-java-client</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>{v}</version></dependency>
    <dependency><groupId>com.fasterxml.jackson.core</groupId><artifactId>jackson-databind</artifactId><version>{jackson}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version></dependency>
  </dependencies>
</project>
"""

# The client's own log lines: warnings and errors to stderr, which the Python side logs.
DRIVER_LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="ERROR">
  <Appenders><Console name="err" target="SYSTEM_ERR"><PatternLayout pattern="%p %m (%c{1})%n"/></Console></Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
"""


@dataclass(frozen=True)
class JavaDriverBuild:
    """A compiled driver: ``java -cp <classpath> <main_class>`` runs it."""

    client_version: str
    classes: Path
    lib: Path

    @property
    def classpath(self) -> str:
        return ":".join([str(self.classes), *sorted(str(j) for j in self.lib.glob("*.jar"))])

    @property
    def log4j_config(self) -> Path:
        return self.classes / "log4j2.xml"


def client_pom(version: str) -> str:
    return CLIENT_POM.format(v=version, jackson=JACKSON_VERSION, log4j=LOG4J_VERSION)


def _jar_folder(version: str, cache: Path | None) -> Path:
    pom = client_pom(version)
    return (cache or cache_root()) / "kafka-clients" / f"{version}-{hashlib.sha256(pom.encode()).hexdigest()[:8]}"


def resolve_client_jars(version: str, cache: Path | None = None) -> Path:
    """The folder of ``kafka-clients`` ``version``'s jars (and the driver's),
    resolved with mvn on first use. KafkaVersionNotFound when Maven Central has none."""
    validate_version(version)
    root = _jar_folder(version, cache)
    if (root / ".complete").exists():
        return root / "lib"
    not_found = (f"client version {version}: org.apache.kafka:kafka-clients:{version} does not resolve "
                 f"from Maven Central")
    work = copy_dependencies(client_pom(version), root, not_found, f"kafka-clients {version}")
    if not list((work / "lib").glob(f"kafka-clients-{version}*.jar")):
        shutil.rmtree(work, ignore_errors=True)
        raise KafkaVersionNotFound(not_found)
    finish_cache_folder(work, root, version)
    return root / "lib"


def build_driver(version: str, sources: Path, cache: Path | None = None) -> JavaDriverBuild:
    """The driver whose ``*.java`` files are in the folder ``sources``, compiled
    against ``kafka-clients`` ``version`` (resolved first), cached by version
    and the sources' digest."""
    lib = resolve_client_jars(version, cache)
    files = sorted(sources.glob("*.java"))
    h = hashlib.sha256(DRIVER_LOG4J2.encode())
    for f in files:
        h.update(f"{f.name}\n".encode() + f.read_bytes())
    digest = h.hexdigest()[:12]
    root = lib.parent / "driver" / digest
    build = JavaDriverBuild(version, root / "classes", lib)
    if (root / ".complete").exists():
        return build
    if shutil.which("javac") is None:
        raise KchaosError("javac is not installed; run the set-up (./kchaos) or apt-get install default-jdk-headless")
    work = root.with_name(root.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    (work / "classes").mkdir(parents=True)
    cp = ":".join(sorted(str(j) for j in lib.glob("*.jar")))
    proc = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "11", "-cp", cp,
                           "-d", str(work / "classes"), *map(str, files)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        first = [l for l in (proc.stderr or proc.stdout).splitlines() if "error" in l][:1]
        raise KchaosError(f"javac could not compile the driver in {sources} against kafka-clients {version}: "
                          f"{first[0] if first else proc.stderr.strip()[:300]}")
    (work / "classes" / "log4j2.xml").write_text(DRIVER_LOG4J2)
    finish_cache_folder(work, root, version)
    return build
