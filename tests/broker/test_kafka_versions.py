"""The Kafka version table (infra/kafka_versions.py) and what reads it: pure, no JVM."""
from __future__ import annotations

import hashlib

import pytest

from broker.log_dump import _dump_argv
from broker.settings_check import check_features
from infra.distribution import POM_TEMPLATE, LOG4J_VERSION, render_pom
from infra.kafka_versions import TABLE, features, has, installed_version, parse_version


def test_every_row_names_its_source_and_effect():
    names = [row.name for row in TABLE]
    assert len(names) == len(set(names))
    for row in TABLE:
        assert row.source and row.effect and len(row.since) == 3


@pytest.mark.parametrize("version,expected", [
    ("3.8.1", (3, 8, 1)), ("4.3.1", (4, 3, 1)), ("4.0.0-rc2", (4, 0, 0)), ("10.0.12", (10, 0, 12))])
def test_parse_version(version, expected):
    assert parse_version(version) == expected


def test_parse_version_refuses_non_versions():
    with pytest.raises(ValueError):
        parse_version("latest")
    with pytest.raises(KeyError):
        has("4.3.1", "no-such-row")


@pytest.mark.parametrize("version,main", [
    ("3.8.1", "kafka.tools.DumpLogSegments"), ("3.9.2", "kafka.tools.DumpLogSegments"),
    ("4.0.1", "kafka.tools.DumpLogSegments"), ("4.2.0", "kafka.tools.DumpLogSegments"),
    ("4.3.0", "org.apache.kafka.tools.DumpLogSegments"), ("4.3.1", "org.apache.kafka.tools.DumpLogSegments")])
def test_dump_log_segments_class_by_version(version, main):
    assert features(version).dump_log_segments_main == main
    assert main in _dump_argv(["/x/0.log"], "--print-data-log", kafka_version=version)


def test_elr_and_transaction_version_arrive_in_4_0():
    assert not features("3.8.1").elr and not features("3.9.2").elr and features("4.0.0").elr
    assert not features("3.9.2").transaction_version_2 and features("4.0.1").transaction_version_2


def test_pom_for_4x_is_the_template_unchanged():
    """Cached 4.x distributions live in a folder named by the POM's hash: no re-resolution."""
    for version in ("4.0.1", "4.3.1"):
        pom = render_pom(version)
        assert "reload4j" not in pom and "log4j-1.2-api" not in pom
        plain = POM_TEMPLATE.format(v=version, log4j=LOG4J_VERSION, extra_exclusions="", extra_dependencies="")
        assert hashlib.sha256(pom.encode()).digest() == hashlib.sha256(plain.encode()).digest()


def test_pom_for_3x_swaps_reload4j_for_the_log4j2_bridge():
    pom = render_pom("3.8.1")
    assert "<artifactId>slf4j-reload4j</artifactId></exclusion>" in pom
    assert "<groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId></exclusion>" in pom
    assert f"<artifactId>log4j-1.2-api</artifactId><version>{LOG4J_VERSION}</version>" in pom
    assert "<version>3.8.1</version>" in pom


def test_format_features_on_3_8_are_refused_except_metadata_version():
    assert check_features("3.8.1", {"metadata.version": 20}) is None
    problem = check_features("3.8.1", {"eligible.leader.replicas.version": 0})
    assert problem is not None and problem.startswith('broker_features."eligible.leader.replicas.version": ')
    assert "KIP-966" in problem
    assert check_features("3.8.1", {"transaction.version": 2}) is not None
    # From 3.9 on Kafka's StorageTool refuses unknown features itself.
    assert check_features("3.9.2", {"transaction.version": 0}) is None
    assert check_features("4.3.1", {"eligible.leader.replicas.version": 0}) is None
    assert check_features("3.8.1", {}) is None


def test_installed_version_from_jar_names():
    assert installed_version(["argparse4j-0.7.0.jar", "kafka-clients-3.8.1.jar", "kafka_2.13-3.8.1.jar"]) == "3.8.1"
    assert installed_version(["/opt/kafka/lib/kafka-clients-4.3.1.jar"]) == "4.3.1"
    assert installed_version(["kafka-clients-plugin.jar", "zstd-jni-1.5.6-4.jar"]) is None
    assert installed_version([]) is None


def test_run_config_refuses_what_3_8_cannot_do():
    from harness.run_config import NemesisConfig, RunConfig, validate
    from infra.errors import UsageError
    with pytest.raises(UsageError, match="Eligible Leader Replicas"):
        validate(RunConfig(kafka_version="3.8.1", nemesis=NemesisConfig(faults=["elr-election"])))
    with pytest.raises(UsageError, match=r'^broker_features\."transaction.version": '):
        validate(RunConfig(kafka_version="3.8.1", broker_features={"transaction.version": 2}))
