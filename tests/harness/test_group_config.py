"""Consumer groups: commits scheduled from the seed, bad group settings refused with one line."""
import itertools
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from harness import schedule
from harness.client_config import offline_client_context, run_group_id
from harness.run_config import RunConfig, WorkloadConfig, load, validate
from tests.harness.config_refusals import refused_by_cli, refused_by_validate
from workloads.client import consumer_settings
from workloads.group import commit_outcome, generation_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def group_cfg(seed=5, **kw) -> RunConfig:
    return RunConfig(seed=seed, concurrency=3, workload=WorkloadConfig(mode="subscribe", **kw))


def ops(cfg: RunConfig, worker: int = 0, n: int = 20000) -> list:
    it = schedule.worker_ops(cfg, worker)
    first = next(it)
    assert first.f == ("subscribe" if cfg.workload.mode == "subscribe" else "assign")
    return list(itertools.islice(it, n))


def test_subscribe_mode_commits_a_tenth_of_ops_by_default_sync_and_async():
    got = ops(group_cfg(5))
    counts = Counter(o.f for o in got)
    assert set(counts) == {"send", "poll", "commit"}
    assert 0.08 < counts["commit"] / len(got) < 0.12
    assert 0.67 < counts["send"] / len(got) < 0.73        # send_fraction keeps its meaning
    commits = [o for o in got if o.f == "commit"]
    assert all(o.value is None and o.asynchronous in (True, False) for o in commits)
    assert 0.4 < sum(o.asynchronous for o in commits) / len(commits) < 0.6
    assert all(o.asynchronous is None for o in got if o.f != "commit")


def test_commit_shares_follow_the_config_and_the_seed():
    got = ops(group_cfg(5, commit_fraction=0.25, async_commit_probability=1.0, send_fraction=0.5))
    counts = Counter(o.f for o in got)
    assert 0.23 < counts["commit"] / len(got) < 0.27
    assert all(o.asynchronous for o in got if o.f == "commit")
    assert not [o for o in ops(group_cfg(5, commit_fraction=0.0)) if o.f == "commit"]
    key = [(o.delay_s, o.f, o.value, o.asynchronous) for o in ops(group_cfg(5), 1, 500)]
    assert key == [(o.delay_s, o.f, o.value, o.asynchronous) for o in ops(group_cfg(5), 1, 500)]
    assert key != [(o.delay_s, o.f, o.value, o.asynchronous) for o in ops(group_cfg(6), 1, 500)]
    assert schedule.digest(group_cfg(5)) != schedule.digest(group_cfg(5, async_commit_probability=0.9))


def test_assign_mode_schedule_has_no_commits_and_is_unchanged():
    plain = RunConfig(seed=5, concurrency=3)
    assert not [o for o in ops(plain) if o.f == "commit"]
    # No extra draws in assign mode: the stream is the one the async knob cannot touch.
    other = RunConfig(seed=5, concurrency=3, workload=WorkloadConfig(async_commit_probability=0.9))
    assert [(o.delay_s, o.f, o.value) for o in ops(plain, 0, 500)] == [
        (o.delay_s, o.f, o.value) for o in ops(other, 0, 500)]


def test_group_id_defaults_to_the_seed_and_can_be_set_either_way():
    assert run_group_id(group_cfg(11)) == "kchaos-11"
    assert run_group_id(group_cfg(11, group_id="mine")) == "mine"
    cfg = group_cfg(11)
    cfg.consumer["group.id"] = "theirs"
    assert run_group_id(cfg) == "theirs"
    assert consumer_settings(offline_client_context(group_cfg(11, group_id="mine")))["group.id"] == "mine"


def test_subscribe_consumers_never_commit_or_store_on_their_own():
    conf = consumer_settings(offline_client_context(group_cfg(1)))
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False


BAD = [
    ("[workload]\nmode = 'subscribe'\ngroup_id = ''\n", "needs a group id"),
    ("[workload]\nmode = 'subscribe'\n[consumer]\n'group.id' = ''\n", "needs a group id"),
    ("[workload]\nmode = 'subscribe'\ncommit_fraction = 1.5\n", "commit_fraction must be between 0 and 1"),
    ("[workload]\nmode = 'subscribe'\ncommit_fraction = 'lots'\n", "commit_fraction must be between 0 and 1"),
    ("[workload]\nmode = 'subscribe'\nasync_commit_probability = -0.1\n",
     "async_commit_probability must be between 0 and 1"),
    ("[workload]\nmode = 'subscribe'\n[consumer]\n'enable.auto.commit' = true\n", '"enable.auto.commit"'),
    ("[workload]\nmode = 'subscribe'\n[consumer]\n'enable.auto.offset.store' = 'true'\n",
     '"enable.auto.offset.store"'),
    ("[workload]\ncommit_fraction = 0.2\n", 'needs mode = "subscribe"'),
    ("[workload]\nmode = 'subscribe'\nsend_fraction = 0.95\n", "is above 1"),
    ("[workload]\nmode = 'subscribe'\ngroup_id = 'a'\n[consumer]\n'group.id' = 'b'\n", "differ; set one"),
    ("[workload]\nmode = 'subscribe'\ngroup_id = 7\n", "group_id must be a string"),
]


@pytest.mark.parametrize("toml, needle", BAD)
def test_validate_refuses_bad_group_settings(tmp_path, toml, needle):
    assert needle in refused_by_validate(tmp_path, toml)


@pytest.mark.parametrize("toml, needle", [BAD[0], BAD[2], BAD[5], BAD[7]])
def test_cli_refuses_bad_group_config_with_one_line_and_64(tmp_path, toml, needle):
    assert needle in refused_by_cli(tmp_path, toml)


def test_good_group_settings_pass():
    validate(group_cfg(1))
    validate(group_cfg(1, commit_fraction=0.0, send_fraction=1.0))
    cfg = group_cfg(1, commit_fraction=0.0)
    cfg.consumer["enable.auto.commit"] = True      # no commit ops: librdkafka may commit on its own
    validate(cfg)
    cfg = group_cfg(1, group_id="g")
    cfg.consumer.update({"group.id": "g", "partition.assignment.strategy": "cooperative-sticky"})
    validate(cfg)


def test_example_is_valid():
    cfg = validate(load(EXAMPLES / "consumer-group.toml"))
    assert cfg.workload.mode == "subscribe" and 0 < cfg.workload.async_commit_probability < 1
    assert {"kill", "pause"} <= set(cfg.nemesis.faults)


# -- the client's pure parts -------------------------------------------------------

def test_generation_is_read_from_librdkafkas_serialised_group_metadata():
    from confluent_kafka import Consumer
    c = Consumer({"group.id": "g1"})          # no bootstrap: nothing connects
    try:
        raw = c.consumer_group_metadata()
    finally:
        c.close()
    assert generation_of(raw) is None           # not a member yet: generation -1
    member = raw[:7] + (42).to_bytes(4, sys.byteorder, signed=True) + raw[11:]
    assert generation_of(member) == 42
    assert generation_of(b"CGMDv9:" + member[7:]) is None and generation_of(None) is None


@dataclass
class TP:
    partition: int
    offset: int
    error: KafkaError | None = None


def test_commit_outcomes():
    op = {"f": "commit", "value": None}
    ok = commit_outcome(op, None, [TP(0, 12), TP(1, -1001), TP(2, 7)])
    assert ok["type"] == "ok" and ok["value"] == {"0": 12, "2": 7}
    gen = KafkaError(KafkaError.ILLEGAL_GENERATION)
    failed = commit_outcome(op, gen, [TP(0, 12, gen), TP(2, 7, gen)])
    assert failed["type"] == "fail" and failed["value"] == {"0": 12, "2": 7}
    assert "ILLEGAL_GENERATION" in failed["error"]
    assert commit_outcome(op, KafkaError(KafkaError._NO_OFFSET), None)["type"] == "fail"
    assert commit_outcome(op, KafkaError(KafkaError.REBALANCE_IN_PROGRESS), None)["type"] == "fail"
    for code in (KafkaError._TIMED_OUT, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                 KafkaError._TRANSPORT, KafkaError.REQUEST_TIMED_OUT):
        assert commit_outcome(op, KafkaError(code), None)["type"] == "info", code
    # One partition rejected for certain, another unknown: unknown.
    mixed = commit_outcome(op, None, [TP(0, 3, gen), TP(1, 4, KafkaError(KafkaError._TIMED_OUT))])
    assert mixed["type"] == "info" and mixed["value"] == {"0": 3, "1": 4}
