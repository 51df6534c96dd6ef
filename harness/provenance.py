"""What a run ran on: the software behind its verdict, recorded in config.json.

A finding such as "librdkafka 2.16.0 duplicates" can be checked from its run
folder later only when the folder says which librdkafka it ran, which kchaos
commit judged it, which Kafka jars and which node image the brokers ran. So
``config.json`` carries ``ran_on`` (docs/design.md, "What a run ran on"):

* ``kchaos``: version, git commit and whether the tree had uncommitted changes
  (``commit`` is null outside a git checkout);
* ``python`` and ``packages``: the Python packages a verdict depends on
  (confluent-kafka and the librdkafka it wraps, pyspark, pyarrow, numpy);
* ``jdk``: the first line of ``java -version`` where the harness runs (Spark's JVM);
* ``kafka``: the version, and a SHA-256 prefix of each ``kafka*.jar`` the nodes run;
* ``image``: the node image's tag and id (container runs only).

``kchaos reproduce`` prints every difference between two runs' ``ran_on``
first (:func:`differences`), before it compares what they did.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka

from infra.distribution import KafkaDistribution

# The Python packages whose versions can change a verdict or a client's behaviour.
PACKAGES = ("confluent-kafka", "pyspark", "pyarrow", "numpy")
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def kchaos_source() -> dict[str, Any]:
    """kchaos's version and, in a git checkout, its commit and whether the tree was dirty."""
    try:
        version = importlib.metadata.version("kchaos")
    except importlib.metadata.PackageNotFoundError:
        version = None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"version": version, "commit": commit, "dirty": None if status is None else bool(status)}


def python_packages() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out["librdkafka"] = confluent_kafka.libversion()[0]
    return out


def jdk() -> str | None:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0].strip() if lines else None


def kafka_jars(dist: KafkaDistribution) -> dict[str, str]:
    """SHA-256 prefixes of the Kafka jars (kafka*.jar): the code the brokers run."""
    out = {}
    for jar in sorted(dist.lib.glob("kafka*.jar")):
        h = hashlib.sha256()
        with jar.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        out[jar.name] = h.hexdigest()[:16]
    return out


def harness_side() -> dict[str, Any]:
    """What the harness itself runs on: known before any cluster starts."""
    return {"kchaos": kchaos_source(), "python": sys.version.split()[0], "packages": python_packages(),
            "jdk": jdk()}


def node_side(kafka_version: str, dist: KafkaDistribution | None, image_tag: str | None,
              image_id: str | None) -> dict[str, Any]:
    """What the nodes run: the Kafka jars, and the node image where there is one."""
    kafka: dict[str, Any] = {"version": kafka_version}
    if dist is not None:
        kafka["jars"] = kafka_jars(dist)
    out: dict[str, Any] = {"kafka": kafka}
    if image_tag is not None:
        out["image"] = {"tag": image_tag, "id": image_id}
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(original: dict[str, Any] | None, reproduction: dict[str, Any] | None) -> list[str]:
    """One line per ``ran_on`` entry that differs between two runs (an entry only one
    run recorded counts); a run that recorded nothing is one line."""
    if not isinstance(original, dict) or not isinstance(reproduction, dict):
        missing = [name for name, r in (("original", original), ("reproduction", reproduction))
                   if not isinstance(r, dict)]
        return [f"{' and '.join(missing)} recorded no software versions (ran_on)"]
    a, b = _flatten(original), _flatten(reproduction)
    return [f"{key}: {a.get(key, 'not recorded')} != {b.get(key, 'not recorded')}"
            for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
