"""``[broker]`` and ``[topic]`` settings checked offline by Kafka's own config
definitions, before any node starts.

Kafka defines every broker setting in ``kafka.server.KafkaConfig.configDef()``
and every topic setting in ``org.apache.kafka.storage.internals.log.LogConfig
.configKeys()``: a name, a type and, for many, a validator (a range, a list of
choices). We ask those definitions, in a JVM with the run's own Kafka jars
(the cached distribution of ``infra.distribution``), through py4j (PySpark's
dependency; no JDK compiler needed, the node image's JRE is enough on the
host too). Per key: is the name defined, does the value parse as its type
(``ConfigDef.parseType``), does its validator accept it. Cross-key rules that
only a whole broker config checks (listeners against roles, ...) are not
checked here: kchaos writes those keys itself.

Not checked: ``listener.name.<listener>.<setting>`` broker keys, which Kafka
accepts for any defined listener and setting; their suffix is checked instead.
One JVM per Kafka version and set of settings per process (about a second
on this machine kind), its answers kept for the process's life (a suite
checks each run; runs that share settings cost one JVM).
"""
from __future__ import annotations

import difflib
import glob
import os
import subprocess
import re
import threading
from pathlib import Path
from typing import Any, Mapping

from py4j.java_gateway import GatewayParameters, JavaGateway, get_field, launch_gateway
from py4j.protocol import Py4JJavaError

from broker.config import property_value
from infra.distribution import cache_root, resolve_kafka
from infra.errors import KchaosError
from infra.kafka_versions import features

BROKER_DEFS = "kafka.server.KafkaConfig"                      # configDef(): every broker setting
TOPIC_DEFS = "org.apache.kafka.storage.internals.log.LogConfig"  # configKeys(): every topic setting
_LISTENER_PREFIX = "listener.name."

_lock = threading.Lock()
_answers: dict[tuple, str | None] = {}


def toml_key(table: str, key: str) -> str:
    """``broker."num.io.threads"``: the key as a TOML dotted key (no brackets,
    which a rich console would take for markup)."""
    return f"{table}.{key}" if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'{table}."{key}"'


def check_settings(kafka_version: str, broker: Mapping[str, Any], topic: Mapping[str, Any]) -> str | None:
    """The first problem with ``broker`` / ``topic`` settings as one line
    naming the key (``topic."min.insync.replicas": Invalid value ...``), or None.

    Checked with the run's Kafka jars when cached, else with the newest
    cached distribution (see ``_jars``); raises KchaosError when no jars can
    be had or the JVM fails.
    """
    items = (("broker", tuple(sorted((str(k), property_value(v)) for k, v in broker.items()))),
             ("topic", tuple(sorted((str(k), property_value(v)) for k, v in topic.items()))))
    memo = (kafka_version, items)
    with _lock:
        if memo not in _answers:
            _answers[memo] = _ask_kafka(kafka_version, dict(items))
        return _answers[memo]


def check_features(kafka_version: str, broker_features: Mapping[str, Any]) -> str | None:
    """The first ``[broker_features]`` entry that formatting would not apply, as one line, or
    None. Kafka before 3.9 ignores every format feature but metadata.version without a word
    (``infra/kafka_versions.py``, "storage-features"); later versions refuse unknown ones
    themselves. No JVM."""
    table = features(kafka_version)
    for name in sorted(broker_features):
        problem = table.storage_feature_problem(str(name))
        if problem is not None:
            return f"{toml_key('broker_features', str(name))}: {problem}"
    return None


def _jars(kafka_version: str) -> tuple[Path, str]:
    """The lib folder to check with and its Kafka version: the run's own
    distribution when cached; else the newest cached one (config definitions
    change little between releases; the message says which was used), so a
    config is checked without fetching anything; else the run's, fetched now
    (a first run needs it before its cluster anyway)."""
    cached: dict[str, Path] = {}
    for done in (cache_root() / "kafka").glob("*/.complete"):
        version = done.read_text().strip()
        if (done.parent / "lib").is_dir():
            cached.setdefault(version, done.parent / "lib")
    if kafka_version in cached:
        return cached[kafka_version], kafka_version
    if cached:
        newest = max(cached, key=_version_key)
        return cached[newest], newest
    return resolve_kafka(kafka_version).lib, kafka_version


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.-]", version))


def _ask_kafka(kafka_version: str, tables: dict[str, tuple[tuple[str, str], ...]]) -> str | None:
    if not any(tables.values()):
        return None
    lib, used = _jars(kafka_version)
    note = "" if used == kafka_version else f" (checked with Kafka {used}'s definitions: {kafka_version} is not fetched yet)"
    classpath = os.pathsep.join(sorted(glob.glob(str(lib / "*.jar"))))
    try:
        port, proc = launch_gateway(classpath=classpath, die_on_exit=True, return_proc=True,
                                    javaopts=["-Xmx128m", "-XX:TieredStopAtLevel=1"],
                                    redirect_stdout=subprocess.DEVNULL, redirect_stderr=subprocess.DEVNULL)
    except Exception as exc:
        raise KchaosError(f"checking broker and topic settings: starting a JVM with Kafka {kafka_version}'s "
                          f"jars failed: {exc}") from None
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port))
    try:
        jvm = gateway.jvm
        parse_type = jvm.org.apache.kafka.common.config.ConfigDef.parseType
        defs = {"broker": getattr(jvm, "kafka").server.KafkaConfig.configDef().configKeys(),
                "topic": jvm.org.apache.kafka.storage.internals.log.LogConfig.configKeys()}
        for table in ("broker", "topic"):
            keys = defs[table]
            for name, value in tables[table]:
                defined = name
                if table == "broker" and name.startswith(_LISTENER_PREFIX) and name.count(".") >= 3:
                    defined = name.split(".", 3)[3]   # listener.name.<listener>.<setting>
                key = keys.get(defined)
                if key is None:
                    close = difflib.get_close_matches(defined, [str(k) for k in keys.keySet()], n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    return f"{toml_key(table, name)}: not a {table} setting of Kafka {used}{hint}{note}"
                try:
                    parsed = parse_type(defined, value, get_field(key, "type"))
                    validator = get_field(key, "validator")
                    if validator is not None:
                        validator.ensureValid(defined, parsed)
                except Py4JJavaError as exc:
                    message = str(exc.java_exception.getMessage() or exc.java_exception.toString())
                    return f"{toml_key(table, name)}: {' '.join(message.split())}{note}"
        return None
    except Py4JJavaError as exc:
        raise KchaosError(f"checking broker and topic settings with Kafka {kafka_version}: "
                          f"{exc.java_exception.toString()}") from None
    finally:
        gateway.shutdown()
        proc.kill()   # ours, by its handle
        proc.wait()
