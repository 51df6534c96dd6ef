"""The Java client without a cluster: its settings, its place among the
workload kinds, the config refusals, and the client protocol's plumbing
(driven by a stand-in driver written in Python)."""
from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.run_config import WorkloadConfig, load, validate
from tests.harness.config_refusals import refused_by_cli, refused_by_validate
from workloads.client import ClientContext
from workloads.driver_protocol import DriverClient, DriverError
from workloads.java_client import JAVA_KINDS, java_consumer_settings, java_producer_settings
from workloads.java_pipelined import driver_pump
from workloads.kinds import KINDS, kind_of, with_client


def ctx(**kw) -> ClientContext:
    return ClientContext(bootstrap="b:9092", topic="t", partitions=3, **kw)


def test_producer_defaults_bound_every_call_by_the_op_timeout():
    s = java_producer_settings(ctx(op_timeout_s=10.0))
    assert s["acks"] == "all" and s["enable.idempotence"] == "true" and s["max.block.ms"] == "10000"
    delivery = int(s["delivery.timeout.ms"])
    assert delivery < 10000 and int(s["request.timeout.ms"]) + int(s["linger.ms"]) <= delivery
    assert "transaction.timeout.ms" not in s
    assert int(java_producer_settings(ctx(), "x")["transaction.timeout.ms"]) >= 10000


def test_librdkafka_names_are_renamed_and_none_deletes():
    s = java_producer_settings(ctx(producer_config={"message.timeout.ms": 5000, "linger.ms": None,
                                                    "enable.idempotence": False}))
    assert s["delivery.timeout.ms"] == "5000" and "message.timeout.ms" not in s
    assert "linger.ms" not in s and s["enable.idempotence"] == "false"
    c = java_consumer_settings(ctx(poll_max_messages=7, consumer_config={"isolation.level": "read_uncommitted"}))
    assert c["max.poll.records"] == "7" and c["isolation.level"] == "read_uncommitted"
    assert c["enable.auto.commit"] == "false" and c["auto.offset.reset"] == "earliest"


def test_java_clients_replace_the_kinds_clients_and_refuse_what_they_do_not_run():
    java = WorkloadConfig(client="java")
    kind = kind_of(java)
    assert kind.name == "assign" and kind.make_client is JAVA_KINDS["assign"]
    assert kind_of(WorkloadConfig()) is KINDS["assign"]
    txn = with_client(KINDS["transactions"], java)
    assert txn.set_up is not None and txn.check_settings is None
    pipelined = kind_of(WorkloadConfig(client="java", producer="pipelined"))
    assert pipelined.make_client is JAVA_KINDS["pipelined"] and pipelined.make_pump is driver_pump
    with pytest.raises(ValueError, match='client = "java" does not run the share workload yet'):
        kind_of(WorkloadConfig(client="java", mode="share"))


@pytest.mark.parametrize(("toml", "expected"), [
    ('[workload]\nclient = "cpp"', "unknown client 'cpp'"),
    ('[workload]\nclient = "java"\nmode = "share"', 'mode = "share" runs on client = "librdkafka" only'),
    ('[workload]\nclient_version = "4.3.1"', 'client_version \'4.3.1\' is for client = "java"'),
    ('[workload]\nclient = "java"\nclient_version = "4.x"', "is not a version number"),
])
def test_refusals_before_anything_starts(tmp_path, toml, expected):
    assert expected in refused_by_validate(tmp_path, toml)


def test_a_client_version_maven_central_lacks_is_one_line_and_exit_64(tmp_path):
    """Resolving kafka-clients is what refuses it (mvn asks Maven Central: a few kB)."""
    line = refused_by_cli(tmp_path, '[workload]\nclient = "java"\nclient_version = "9.9.9"\n')
    assert "org.apache.kafka:kafka-clients:9.9.9 does not resolve from Maven Central" in line


def test_a_setting_the_java_client_lacks_is_named(tmp_path):
    line = refused_by_validate(tmp_path, '[workload]\nclient = "java"\n[consumer]\n"enable.partition.eof" = true\n')
    assert line.startswith('consumer."enable.partition.eof": not a setting of the Java client')


# -- the protocol's plumbing, with a stand-in driver -------------------------------------------
FAKE_DRIVER = textwrap.dedent('''
    import json, sys, time
    for line in sys.stdin:
        req = json.loads(line)
        f = req["f"]
        if f == "open":
            out = {"type": "ok", "f": "open", "value": {"client": "fake", "version": "0"}}
        elif f == "poll":
            out = {"type": "ok", "f": "poll", "value": {"0": [[0, 1]]},
                   "events": [{"type": "ok", "f": "rebalance", "value": {"assigned": [0], "revoked": []}}]}
        elif f == "hang":
            time.sleep(60)
        elif f == "close":
            print(json.dumps({"type": "ok", "f": "close", "value": None}), flush=True)
            break
        else:
            out = {"type": "ok", "f": f, "value": req.get("value")}
        print(json.dumps(out), flush=True)
''')


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(FAKE_DRIVER)
    return (sys.executable, str(script))


def _client(driver, member=False) -> DriverClient:
    client = DriverClient(lambda c: {"consumer": {"group.id": "g"}}, member_ops=("poll", "rebalance") if member else ())
    client.open(ctx(driver=driver, node="all", op_timeout_s=0.5))
    return client


def test_completions_get_node_fields_and_events(fake):
    client = _client(fake, member=True)
    try:
        assert client.identity == {"client": "fake", "version": "0"}
        assert client.invoke({"f": "assign", "value": [0]}) == {"type": "ok", "f": "assign", "value": [0],
                                                                "node": "all"}
        poll = client.invoke({"f": "poll", "value": None})
        assert poll == {"type": "ok", "f": "poll", "value": {"0": [[0, 1]]}, "node": "all", "group": "g",
                        "isolation": "read_committed"}
        assert client.take_events() == [{"type": "ok", "f": "rebalance", "value": {"assigned": [0], "revoked": []},
                                         "group": "g", "isolation": "read_committed"}]
        proc = client._proc.proc
    finally:
        client.close()
    assert proc.wait(timeout=5) == 0


def test_a_driver_that_does_not_answer_is_killed(fake, monkeypatch):
    monkeypatch.setattr("workloads.driver_protocol.ANSWER_GRACE_S", 0.5)
    client = _client(fake)
    proc = client._proc.proc
    t0 = time.monotonic()
    with pytest.raises(DriverError, match="did not answer hang"):
        client.invoke({"f": "hang", "value": None})
    assert time.monotonic() - t0 < 5 and proc.poll() is not None
    client.close()


def test_a_crash_kills_the_driver(fake):
    client = _client(fake)
    proc = client._proc.proc
    client.crash()
    assert proc.poll() is not None and proc.returncode < 0
    with pytest.raises(DriverError):
        client.invoke({"f": "poll", "value": None})


def test_no_driver_command_is_refused():
    with pytest.raises(ValueError):
        DriverClient(lambda c: {}).open(ctx())


def test_every_java_kind_is_a_kind():
    assert set(JAVA_KINDS) <= set(KINDS)
    assert all(isinstance(JAVA_KINDS[k](SimpleNamespace(txn_send_offsets=False), 1, 0), DriverClient)
               for k in JAVA_KINDS)


def test_the_java_held_endtxn_example_is_the_librdkafka_one_with_the_java_client():
    """examples/txn-delayed-produce-java.toml differs from txn-delayed-produce.toml only in its client and
    name, so the two clients' runs on the same seeds compare (docs/findings.md)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    java = validate(load(examples / "txn-delayed-produce-java.toml"))
    rdkafka = validate(load(examples / "txn-delayed-produce.toml"))
    assert java.workload.client == "java" and rdkafka.workload.client == "librdkafka"
    assert java.nemesis.proxy == rdkafka.nemesis.proxy and java.nemesis.faults == ["proxy"]
    assert java.workload.client_version == java.kafka_version == rdkafka.kafka_version
    assert (java.rate, java.concurrency, java.topic, java.producer, java.consumer) == (
        rdkafka.rate, rdkafka.concurrency, rdkafka.topic, rdkafka.producer, rdkafka.consumer)


@pytest.mark.parametrize("base", ["transactions", "transactions-17754", "pipelined"])
def test_the_java_examples_are_the_librdkafka_ones_with_the_java_client(base):
    examples = Path(__file__).resolve().parents[2] / "examples"
    java = load(examples / f"{base}-java.toml")
    rdkafka = load(examples / f"{base}.toml")
    assert java.workload.client == "java" and java.name == f"{base}-java"
    java.workload.client, java.name = rdkafka.workload.client, rdkafka.name
    assert java == rdkafka
