"""[producer] / [consumer] settings are validated by librdkafka when the config
is loaded: a typo costs one line naming the key and exit 64, before any cluster."""
import subprocess
import sys

import confluent_kafka
import pytest

import workloads.client
from harness.run_config import RunConfig, load, validate
from harness.suite_config import expand, parse
from infra.errors import UsageError
from workloads.client import ClientContext, check_settings


def bad(table: str, key: str, value) -> RunConfig:
    cfg = RunConfig()
    getattr(cfg, table)[key] = value
    return cfg


@pytest.mark.parametrize("table, key, value, needle", [
    ("producer", "acks", "sometimes", 'producer.acks: Invalid value for configuration property "request.required.acks"'
                                      ' (got "sometimes")'),
    ("producer", "lnger.ms", 5, 'producer."lnger.ms": No such configuration property'),
    ("producer", "linger.ms", "soon", 'producer."linger.ms": Invalid value'),
    ("producer", "retries", 0, "producer.retries: "),                  # clashes with the default idempotence
    ("producer", "max.in.flight", "many", 'producer."max.in.flight": '),  # a librdkafka alias kchaos does not list
    ("consumer", "auto.offset.reset", "sideways", 'consumer."auto.offset.reset": Invalid value "sideways"'),
    ("consumer", "isolation.level", "dirty", 'consumer."isolation.level": '),
    ("consumer", "enable.auto.commit", "maybe", 'consumer."enable.auto.commit": Expected bool value'),
    ("consumer", "fetch.wait.max.msec", 1, 'consumer."fetch.wait.max.msec": No such configuration property'),
])
def test_bad_client_setting_is_a_usage_error_naming_the_key(table, key, value, needle):
    with pytest.raises(UsageError) as info:
        validate(bad(table, key, value))
    msg = str(info.value)
    assert needle in msg and "\n" not in msg


def test_good_settings_pass_and_aliases_replace_defaults():
    cfg = RunConfig()
    cfg.producer.update({"acks": "1", "enable.idempotence": False, "delivery.timeout.ms": 5000,
                         "queue.buffering.max.ms": 2, "retries": 0})
    cfg.consumer.update({"isolation.level": "read_uncommitted", "fetch.min.bytes": 1, "client.rack": "r1"})
    validate(cfg)
    cfg.workload.mode = "subscribe"
    validate(cfg)


def test_check_settings_raises_value_error_and_stays_offline(monkeypatch):
    """The clients the check builds have no broker to talk to, and every one is
    closed (consumers) or dropped (producers) without a poll."""
    built = []

    def recording(cls):
        def make(conf):
            built.append((cls.__name__, dict(conf)))
            return cls(conf)
        return make
    monkeypatch.setattr(workloads.client, "Producer", recording(confluent_kafka.Producer))
    monkeypatch.setattr(workloads.client, "Consumer", recording(confluent_kafka.Consumer))
    ctx = ClientContext(bootstrap="127.0.0.1:9", topic="t", partitions=3, producer_config={"acks": "sometimes"})
    with pytest.raises(ValueError, match=r"^producer\.acks: "):
        check_settings(ctx)
    check_settings(ClientContext(bootstrap="127.0.0.1:9", topic="t", partitions=3,
                                 consumer_config={"bootstrap.servers": "10.0.0.1:9092"}))
    kinds = [k for k, _ in built]
    assert "Producer" in kinds and "Consumer" in kinds
    for _, conf in built:
        assert "bootstrap.servers" not in conf and "metadata.broker.list" not in conf, conf


def test_each_suite_run_is_checked_with_its_cell():
    data = {"name": "ns", "base": {"time_limit": 10},
            "matrix": {"variant": [{"name": "ok"}, {"name": "typo", "consumer": {"isolaton.level": "x"}}]}}
    with pytest.raises(UsageError) as info:
        expand(parse(data, "s.toml"))
    msg = str(info.value)
    assert msg.startswith("s.toml") and "variant=typo" in msg and 'consumer."isolaton.level"' in msg
    assert "\n" not in msg


def docker_ok() -> bool:
    try:
        from infra.engine import docker_client
        docker_client().ping()
        return True
    except Exception:
        return False


@pytest.mark.parametrize("toml, needle", [
    ('[producer]\nacks = "sometimes"\n', "producer.acks"),
    ('[consumer]\n"auto.ofset.reset" = "earliest"\n', 'consumer."auto.ofset.reset"'),
])
def test_cli_exits_64_with_one_line_before_any_container(tmp_path, toml, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f'name = "badclient"\n{toml}')
    load(cfg)  # the file itself is fine; only librdkafka objects
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", "--config", str(cfg),
                             "--store", str(tmp_path / "s")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 64, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err and ("Invalid value" in err or "No such configuration property" in err), err
    assert not (tmp_path / "s").exists()  # nothing started, nothing stored
    if docker_ok():
        from tests.harness.test_run import run_containers
        assert run_containers(proc.pid) == []
        from infra.engine import docker_client
        named = docker_client().containers.list(all=True, ignore_removed=True)
        assert not [c.name for c in named if c.labels.get("kchaos.cluster", "").startswith("badclient")]
