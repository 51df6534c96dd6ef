"""[broker] / [topic] settings are checked by Kafka's own config definitions
(offline, in a JVM with the cached Kafka jars): a typo or a bad value costs
one line naming the key and exit 64, before any container starts."""
from __future__ import annotations

import subprocess
import sys

import pytest

from broker.config import render_properties
from broker.settings_check import check_settings
from harness.run_config import RunConfig, validate
from harness.suite_config import expand, parse
from infra.distribution import DEFAULT_KAFKA_VERSION
from infra.errors import UsageError

V = DEFAULT_KAFKA_VERSION


@pytest.mark.parametrize("broker, topic, needle", [
    ({"unclean.leader.election.enable": "maybe"}, {},
     'broker."unclean.leader.election.enable": Invalid value maybe for configuration unclean.leader.election.enable'),
    ({"uncleen.leader.election.enable": True}, {},
     'broker."uncleen.leader.election.enable": not a broker setting of Kafka'),
    ({"num.io.threads": "four"}, {}, 'broker."num.io.threads": Invalid value four'),
    ({"listener.name.plaintext.max.connections": "x"}, {}, 'broker."listener.name.plaintext.max.connections": '),
    ({}, {"min.insync.replicas": 0}, 'topic."min.insync.replicas": Invalid value 0'),
    ({}, {"cleanup.policy": "sideways"}, 'topic."cleanup.policy": Invalid value sideways'),
    ({}, {"retention.msec": 1000}, 'topic."retention.msec": not a topic setting of Kafka'),
    # a broker-only key is not a topic key
    ({}, {"num.io.threads": 4}, 'topic."num.io.threads": not a topic setting'),
])
def test_bad_setting_is_one_line_naming_the_key(broker, topic, needle):
    problem = check_settings(V, broker, topic)
    assert problem is not None and needle in problem and "\n" not in problem, problem


def test_typo_suggests_the_defined_name():
    problem = check_settings(V, {"uncleen.leader.election.enable": True}, {})
    assert "did you mean 'unclean.leader.election.enable'" in problem


def test_good_settings_and_every_property_kchaos_writes_pass():
    assert check_settings(V, {"unclean.leader.election.enable": True, "replica.lag.time.max.ms": 10000,
                              "listener.name.plaintext.max.connections": 100},
                          {"min.insync.replicas": 1, "retention.ms": 1000, "cleanup.policy": "delete"}) is None
    props = dict(line.split("=", 1) for line in
                 render_properties("n1", "10.0.0.1", [("n1", "10.0.0.1"), ("n2", "10.0.0.2")]).splitlines()[1:])
    assert check_settings(V, props, {}) is None


def test_validate_raises_usage_error_and_a_suite_names_the_cell():
    cfg = RunConfig()
    cfg.topic["min.insync.replicas"] = "two"
    with pytest.raises(UsageError, match=r'^topic\."min\.insync\.replicas": Invalid value two'):
        validate(cfg)
    data = {"name": "ns", "base": {"time_limit": 10},
            "matrix": {"variant": [{"name": "ok"}, {"name": "typo", "broker": {"log.retention.hourz": 1}}]}}
    with pytest.raises(UsageError) as info:
        expand(parse(data, "s.toml"))
    msg = str(info.value)
    assert msg.startswith("s.toml") and "variant=typo" in msg and 'broker."log.retention.hourz"' in msg


def test_cli_exits_64_with_one_line_before_any_container(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('name = "badbroker"\n[broker]\n"unclean.leader.election.enable" = "sometimes"\n')
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--config", str(cfg),
                           "--store", str(tmp_path / "s")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert 'broker."unclean.leader.election.enable": Invalid value sometimes' in proc.stderr
    assert not (tmp_path / "s").exists()  # nothing started, nothing stored
