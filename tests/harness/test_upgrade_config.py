"""upgrade_to and the rolling-upgrade fault: refused in one line, exit 64, before anything starts."""
from __future__ import annotations

import pytest

from harness import run_config
from harness.run_config import load, validate
from infra.errors import KafkaVersionNotFound
from tests.harness.config_refusals import refused_by_cli, refused_by_validate

ROLL = '[nemesis]\nfaults = ["rolling-upgrade"]\n'


@pytest.mark.parametrize("toml, needle", [
    ('kafka_version = "3.9.2"\n' + ROLL, 'needs the version to roll onto: upgrade_to = "4.3.1"'),
    ('kafka_version = "4.3.1"\nupgrade_to = "3.9.2"\n' + ROLL, "older than kafka_version 4.3.1"),
    ('kafka_version = "4.3.1"\nupgrade_to = "4.3.1"\n' + ROLL, "is the version the cluster starts with"),
    ('kafka_version = "3.9.2"\nupgrade_to = 4\n' + ROLL, "upgrade_to must be a Kafka version string"),
    ('kafka_version = "3.9.2"\nupgrade_to = "4.3"\n' + ROLL, "is not a version number"),
    ('kafka_version = "3.9.2"\nupgrade_to = "4.3.1"\n', "needs the rolling-upgrade fault"),
])
def test_bad_upgrades_refused(tmp_path, toml, needle):
    assert needle in refused_by_validate(tmp_path, toml)


def test_a_release_maven_central_lacks_is_refused(tmp_path, monkeypatch):
    def missing(version):
        raise KafkaVersionNotFound(f"Kafka version {version} does not exist on Maven Central")
    monkeypatch.setattr(run_config, "check_available", missing)
    assert "4.9.98 does not exist" in refused_by_validate(
        tmp_path, 'kafka_version = "3.9.2"\nupgrade_to = "4.9.98"\n' + ROLL)


def test_a_downgrade_costs_exit_64_at_the_cli(tmp_path):
    assert "older than kafka_version" in refused_by_cli(
        tmp_path, 'kafka_version = "4.3.1"\nupgrade_to = "4.0.1"\n' + ROLL)


def test_the_example_validates():
    cfg = validate(load("examples/rolling-upgrade.toml"))
    assert (cfg.kafka_version, cfg.upgrade_to) == ("3.9.2", "4.3.1")
    assert cfg.producer.get("acks") == "all" and cfg.producer.get("enable.idempotence") is True
