"""The report's summary says what the run ran on (config.json's ran_on) in words."""
from __future__ import annotations

from reports.render import _ran_on_lines, client_line


def test_ran_on_as_words():
    lines = _ran_on_lines({"kchaos": {"version": "0.1.0", "commit": "0123456789abcdef", "dirty": True},
                           "python": "3.11.7", "jdk": "openjdk 17",
                           "packages": {"confluent-kafka": "2.16.1", "librdkafka": "2.16.0"},
                           "kafka": {"version": "3.8.1", "jars": {"kafka_2.13-3.8.1.jar": "ab"}},
                           "image": {"tag": "kchaos-node:3.8.1-x", "id": "sha256:0123456789abcdef"}})
    assert lines[0] == "kchaos 0.1.0 at 0123456789ab with uncommitted changes"
    assert "librdkafka 2.16.0" in lines[1] and "openjdk 17" in lines[1]
    assert lines[2].startswith("Kafka 3.8.1, 1 jars") and "kchaos-node:3.8.1-x" in lines[2]
    assert _ran_on_lines(None) == [] and _ran_on_lines("odd") == []


def test_the_client_library_in_words():
    assert client_line({"name": "librdkafka", "version": "2.16.0", "binding": "confluent-kafka 2.16.0"}) == \
        "librdkafka 2.16.0 (confluent-kafka 2.16.0)"
    assert client_line({"name": "kafka-clients", "library": "org.apache.kafka:kafka-clients", "version": "4.3.1"}) == \
        "kafka-clients 4.3.1 (org.apache.kafka:kafka-clients)"
    assert client_line(None) is None and client_line({"version": "1"}) is None
