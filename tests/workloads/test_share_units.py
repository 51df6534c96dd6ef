"""The share workload without a cluster: its op stream, its config refusals,
the marks an implicit member makes, and the answers a callback gives."""
from __future__ import annotations

import itertools
import random

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from harness.run_config import WorkloadConfig
from history.ops import SHARE_ACK, SHARE_COMMIT, SHARE_HOLD, SHARE_POLL, SHARE_SUBSCRIBE
from history.op_values import share_marks
from workloads.client import ClientContext
from workloads.op_streams import StreamSpec
from workloads.share import ShareClient, marks_value
from workloads.share_plan import config_problem, hold_seconds, share_ops, share_subscribe_op


def _workload(**kw) -> WorkloadConfig:
    return WorkloadConfig(mode="share", **kw)


def test_stream_polls_then_acks_and_holds_past_the_lock():
    w = _workload(share_hold_probability=0.3, share_lock_ms=4000)
    spec = StreamSpec(w, 0, 2, 50.0, 0.1)
    assert share_subscribe_op(spec, random.Random(1)).f == SHARE_SUBSCRIBE
    ops = list(itertools.islice(share_ops(spec, random.Random(1)), 400))
    fs = [o.f for o in ops]
    assert {"send", SHARE_POLL, SHARE_ACK, SHARE_COMMIT, SHARE_HOLD} <= set(fs)
    for i, f in enumerate(fs):
        if f == SHARE_POLL and i < len(fs) - 2:       # every poll's records are marked before anything else is sent
            rest = fs[i + 1:i + 3]
            assert rest[0] == SHARE_ACK or rest[:2] == [SHARE_HOLD, SHARE_ACK]
    assert all(o.value == hold_seconds(w) > 4 for o in ops if o.f == SHARE_HOLD)
    again = list(itertools.islice(share_ops(spec, random.Random(1)), 400))
    assert [(o.f, o.value) for o in again] == [(o.f, o.value) for o in ops]


def test_config_refusals_name_the_problem():
    ok = _workload()
    assert config_problem(ok, True, "4.3.1", {}, {}) is None
    assert "4.0.1 has none" in config_problem(ok, False, "4.0.1", {}, {})
    assert "share.version" in config_problem(ok, True, "4.3.1", {}, {"share.version": 0})
    assert "share_ack_mode" in config_problem(_workload(share_ack_mode="auto"), True, "4.3.1", {}, {})
    low = _workload(share_lock_ms=5000)
    assert "15000..60000" in config_problem(low, True, "4.3.1", {}, {})
    assert config_problem(low, True, "4.3.1", {"group.share.min.record.lock.duration.ms": 1000}, {}) is None
    assert "share_delivery_limit" in config_problem(_workload(share_delivery_limit=11), True, "4.3.1", {}, {})
    assert "at most 1" in config_problem(_workload(share_release_probability=0.7,
                                                   share_reject_probability=0.5), True, "4.3.1", {}, {})


class _Msg:
    def __init__(self, p: int, o: int):
        self.p, self.o = p, o

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o


def _client(mode: str) -> ShareClient:
    c = ShareClient(mode, 5000, 5, 0.5, 0.0, random.Random(3))
    c.open(ClientContext(bootstrap="", topic="t", partitions=2, group_id="sg"))
    return c


def test_implicit_member_marks_every_record_accept_and_the_callback_answers():
    c = _client("implicit")
    c._last = [_Msg(0, 3), _Msg(1, 7)]
    out = c.invoke({"f": SHARE_ACK, "value": None})
    assert out["type"] == "ok" and out["group"] == "sg"
    assert sorted(share_marks(out["value"], "t")) == [("accept", 0, 3), ("accept", 1, 7)]
    c._on_acknowledged({TopicPartition("t", 0): {3}}, None)
    err = KafkaError(KafkaError.INVALID_RECORD_STATE)
    c._on_acknowledged({TopicPartition("t", 1): {7}}, KafkaException(err))
    ok, fail = c.take_events()
    assert (ok["type"], ok["value"]) == ("ok", {"accept": {"0": [3]}})
    assert (fail["type"], fail["value"]) == ("fail", {"accept": {"1": [7]}}) and "INVALID_RECORD_STATE" in fail["error"]
    assert c._marks == {}


def test_marks_no_answer_named_are_info_at_close():
    c = _client("implicit")
    c._last = [_Msg(0, 1)]
    c.invoke({"f": SHARE_ACK, "value": None})
    c.close()
    (ev,) = c.take_events()
    assert ev["type"] == "info" and ev["value"] == {"accept": {"0": [1]}}


def test_marks_value_groups_by_kind_and_partition():
    v = marks_value({(1, 5): "release", (0, 2): "accept", (0, 1): "accept"})
    assert v == {"accept": {"0": [1, 2]}, "release": {"1": [5]}}
    assert sorted(share_marks(v, "t")) == [("accept", 0, 1), ("accept", 0, 2), ("release", 1, 5)]


def test_hold_after_an_empty_poll_fails_at_once():
    c = _client("explicit")
    out = c.invoke({"f": SHARE_HOLD, "value": 30.0})
    assert out["type"] == "fail" and "nothing to hold" in out["error"]


def test_a_record_marked_twice_before_an_answer_gets_each_mark_in_turn():
    """Released, delivered again and released again before the first answer:
    each answer takes the oldest pending mark (a run once reported the second
    release as an accept, and the checker an accepted record redelivered)."""
    c = _client("explicit")
    c._marks = {(1, 923): ["release", "release"], (1, 925): ["accept"]}
    c._on_acknowledged({TopicPartition("t", 1): {923}}, None)
    c._on_acknowledged({TopicPartition("t", 1): {923, 925}}, None)
    first, second = c.take_events()
    assert first["value"] == {"release": {"1": [923]}}
    assert second["value"] == {"release": {"1": [923]}, "accept": {"1": [925]}}
    c._on_acknowledged({TopicPartition("t", 1): {930}}, None)   # no mark pending: no claim in explicit mode
    assert c.take_events() == [] and c._marks == {}


def test_close_answers_every_pending_mark_without_naming_a_record_twice_in_one_event():
    c = _client("explicit")
    c._marks = {(0, 1): ["release", "accept"]}
    c.close()
    assert [e["value"] for e in c.take_events()] == [{"release": {"0": [1]}}, {"accept": {"0": [1]}}]
