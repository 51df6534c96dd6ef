"""Pure parts of the queue workload: error classification, settings, value shapes."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from workloads.classify import classify_delivery_error
from workloads.client import (ClientContext, Client, consumer_settings, delivery_timeout_ms, merge_settings,
                            producer_settings)
from workloads.drain import drain_settings
from workloads.queue import QueueClient, decode_value, encode_value, shape_poll


@pytest.mark.parametrize("code", [
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.UNKNOWN_TOPIC_ID,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_EXCEPTION,
    KafkaError.INVALID_REQUIRED_ACKS,
])
def test_certainly_not_written_is_fail(code):
    assert classify_delivery_error(KafkaError(code)) == "fail"


@pytest.mark.parametrize("code", [
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError._PURGE_INFLIGHT,
    KafkaError._PURGE_QUEUE,            # a retried, possibly persisted message is purged from the queue too
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.UNKNOWN_PRODUCER_ID,
    KafkaError.INVALID_TIMESTAMP,
    KafkaError._FATAL,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.UNKNOWN,
])
def test_possibly_written_is_info(code):
    assert classify_delivery_error(KafkaError(code)) == "info"


def test_a_fatal_error_is_info_whatever_its_code():
    assert classify_delivery_error(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "x", fatal=True)) == "info"


def ctx(**kw) -> ClientContext:
    return ClientContext(bootstrap="10.0.0.1:9092", topic="t", partitions=3, **kw)


def test_producer_defaults():
    conf = producer_settings(ctx(op_timeout_s=10))
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True and conf["linger.ms"] == 1
    assert conf["bootstrap.servers"] == "10.0.0.1:9092"
    assert conf["message.timeout.ms"] == delivery_timeout_ms(10) == 9000
    assert isinstance(conf["logger"], logging.Logger)


def test_delivery_timeout_stays_under_the_op_timeout():
    for op_s in (0.5, 1, 2, 3, 5, 10, 30, 120):
        ms = delivery_timeout_ms(op_s)
        assert 0 < ms < op_s * 1000
        assert ms >= op_s * 500


def test_overrides_win_and_aliases_replace_defaults():
    conf = producer_settings(ctx(producer_config={"delivery.timeout.ms": 4000, "acks": 1,
                                                  "queue.buffering.max.ms": 20, "retries": 3}))
    assert "message.timeout.ms" not in conf and conf["delivery.timeout.ms"] == 4000
    assert "linger.ms" not in conf and conf["queue.buffering.max.ms"] == 20
    assert conf["acks"] == 1 and conf["retries"] == 3
    assert merge_settings({"a": 1, "b": 2}, {"b": None, "c": 3}) == {"a": 1, "c": 3}


def test_consumer_defaults_by_mode():
    a = consumer_settings(ctx(mode="assign", group_id="g1", client_rack="r2"))
    assert a["group.id"] == "g1" and a["enable.auto.commit"] is False
    assert a["isolation.level"] == "read_committed" and a["auto.offset.reset"] == "earliest"
    assert a["client.rack"] == "r2"
    s = consumer_settings(ctx(mode="subscribe", consumer_config={"isolation.level": "read_uncommitted"}))
    # subscribe mode commits in explicit commit ops, the offsets it stored itself (workloads/group.py)
    assert s["enable.auto.commit"] is False and s["enable.auto.offset.store"] is False
    assert a["enable.auto.offset.store"] is True and s["isolation.level"] == "read_uncommitted"
    assert "client.rack" not in s


def test_drain_settings_never_commit_and_see_the_end():
    conf = drain_settings("b:9092", {"enable.auto.commit": True, "isolation.level": "read_uncommitted"}, 2)
    assert conf["enable.auto.commit"] is False and conf["enable.partition.eof"] is True
    assert conf["isolation.level"] == "read_committed"     # what survived as committed, always
    assert conf["group.id"] != drain_settings("b:9092", None, 2)["group.id"]


def test_values_round_trip_with_padding():
    assert encode_value(42) == b"42"
    assert encode_value(42, 8) == b"42      "
    assert decode_value(encode_value(42, 8)) == 42
    assert decode_value(b"x") is None and decode_value(None) is None


class FakeMsg:
    def __init__(self, p, off, value=None, err=None):
        self._p, self._o, self._v, self._e = p, off, value, err

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return self._v

    def error(self):
        return self._e


def test_poll_value_shape():
    msgs = [FakeMsg(1, 5, b"10"), FakeMsg(0, 3, b"7   "), FakeMsg(1, 6, b"11"),
            FakeMsg(2, 9, None, KafkaError(KafkaError._PARTITION_EOF)),
            FakeMsg(0, -1, None, KafkaError(KafkaError._TRANSPORT)),
            FakeMsg(2, 4, b"not-ours")]
    value, errors = shape_poll(msgs)
    assert value == {"1": [[5, 10], [6, 11]], "0": [[3, 7]]}
    assert len(errors) == 2 and errors[0].code() == KafkaError._TRANSPORT
    assert shape_poll([]) == ({}, [])


def test_queue_client_is_a_client():
    assert isinstance(QueueClient(), Client)


def test_send_completion_shapes():
    from workloads.queue import send_completion
    op = {"f": "send", "value": [[0, 5, None], [1, 5, None], [2, 5, None]]}
    msgs = op["value"]
    ok = send_completion(op, msgs, [10, 11, 12], [False] * 3, node="n1")
    assert ok == {"type": "ok", "f": "send", "value": [[0, 5, 10], [1, 5, 11], [2, 5, 12]], "node": "n1"}

    mixed = send_completion(op, msgs, [10, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None], [False] * 3)
    assert mixed["type"] == "info" and "node" not in mixed
    assert mixed["value"] == [[0, 5, 10], [1, 5, None], [2, 5, None]]
    assert mixed["outcomes"] == ["ok", "fail", "info"]
    assert mixed["error"].startswith("1/3 MSG_SIZE_TOO_LARGE") and "1/3 no delivery report" in mixed["error"]

    refused = KafkaError(KafkaError._MSG_TIMED_OUT)          # any code: produce() refused it, never queued
    fail = send_completion(op, msgs, [refused, BufferError("queue full"),
                                      KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)], [True, True, False])
    assert fail["type"] == "fail" and fail["outcomes"] == ["fail"] * 3
    assert fail["value"] == [[0, 5, None], [1, 5, None], [2, 5, None]]
    assert "(refused by produce())" in fail["error"]

    timed_out = send_completion(op, msgs, [KafkaError(KafkaError._MSG_TIMED_OUT)] * 3, [False] * 3)
    assert timed_out["type"] == "info" and timed_out["error"] == "3/3 _MSG_TIMED_OUT: Local: Message timed out"
    assert op["value"][0] == [0, 5, None]              # the invocation's value is never modified
