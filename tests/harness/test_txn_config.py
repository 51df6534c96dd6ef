"""Transactions and client crashes: scheduled from the seed, refused with one line."""
import itertools
from pathlib import Path

import pytest

from harness import schedule
from harness.run_config import RunConfig, WorkloadConfig, load, validate
from tests.harness.config_refusals import refused_by_cli, refused_by_validate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def txn_cfg(seed=5, **kw) -> RunConfig:
    return RunConfig(seed=seed, concurrency=3, workload=WorkloadConfig(transactions=True, **kw))


def txns(cfg: RunConfig, worker: int, n: int = 2000) -> list:
    ops = schedule.worker_ops(cfg, worker)
    assert next(ops).f == "assign"
    return list(itertools.islice(ops, n))


def test_txn_ops_are_reproducible_from_the_seed_abort_flag_included():
    a, b, c = txns(txn_cfg(5), 1), txns(txn_cfg(5), 1), txns(txn_cfg(6), 1)
    assert [(o.delay_s, o.f, o.value, o.abort) for o in a] == [(o.delay_s, o.f, o.value, o.abort) for o in b]
    assert [(o.value, o.abort) for o in a] != [(o.value, o.abort) for o in c]
    assert schedule.digest(txn_cfg(5)) == schedule.digest(txn_cfg(5)) != schedule.digest(txn_cfg(6))
    # The abort decisions alone change the digest.
    assert schedule.digest(txn_cfg(5)) != schedule.digest(txn_cfg(5, abort_probability=0.5))


def test_txn_ops_respect_bounds_and_abort_probability():
    cfg = txn_cfg(9, txn_max_ops=3, abort_probability=0.25, send_fraction=0.6)
    ops = txns(cfg, 0, 4000)
    assert {o.f for o in ops} == {"txn"}
    sizes = {len(o.value) for o in ops}
    assert sizes == {1, 2, 3}
    kinds = {m[0] for o in ops for m in o.value}
    assert kinds == {"send", "poll"}
    assert all(m == ["poll"] or (len(m) == 3 and 0 <= m[1] < cfg.workload.partitions) for o in ops for m in o.value)
    aborts = sum(o.abort for o in ops) / len(ops)
    assert 0.2 < aborts < 0.3
    assert {o.abort for o in txns(txn_cfg(9, abort_probability=0.0), 0, 500)} == {False}
    assert {o.abort for o in txns(txn_cfg(9, abort_probability=1.0), 0, 500)} == {True}
    # The plain queue workload plans no abort at all.
    assert {op.abort for op in itertools.islice(schedule.worker_ops(RunConfig(seed=9), 0), 200)} == {None}


def test_txn_values_are_unique_per_partition_across_workers():
    cfg = txn_cfg(3)
    seen = set()
    for w in range(cfg.concurrency):
        for o in txns(cfg, w):
            for m in o.value:
                if m[0] == "send":
                    assert (m[1], m[2]) not in seen
                    seen.add((m[1], m[2]))
    assert len(seen) > 3000


def test_crash_times_are_seeded_jittered_and_off_by_default():
    assert list(schedule.crash_times(RunConfig(seed=1), 0)) == []
    cfg = RunConfig(seed=1, workload=WorkloadConfig(crash_interval=4))
    times = list(itertools.islice(schedule.crash_times(cfg, 0), 50))
    assert times == list(itertools.islice(schedule.crash_times(cfg, 0), 50))
    assert times != list(itertools.islice(schedule.crash_times(cfg, 1), 50))
    gaps = [b - a for a, b in zip([0.0, *times], times)]
    assert all(2 <= g <= 6 for g in gaps) and len(set(gaps)) == len(gaps)
    # Crashes are part of the schedule but leave the op stream alone.
    plain = RunConfig(seed=1)
    assert schedule.digest(cfg) != schedule.digest(plain)
    assert list(itertools.islice(schedule.worker_ops(cfg, 0), 300)) == list(
        itertools.islice(schedule.worker_ops(plain, 0), 300))


def test_examples_are_valid():
    cfg = validate(load(EXAMPLES / "transactions.toml"))
    assert cfg.workload.transactions and cfg.consumer.get("isolation.level", "read_committed") == "read_committed"
    cfg = validate(load(EXAMPLES / "pipelined-acks1.toml"))
    assert cfg.workload.producer == "pipelined" and str(cfg.producer["acks"]) == "1"


BAD = [
    ('[workload]\ntransactions = true\n[producer]\n"enable.idempotence" = false\n', "needs an idempotent producer"),
    ("[workload]\ntransactions = true\nproducer = 'pipelined'\n", 'cannot run with producer = "pipelined"'),
    ("[workload]\ntransactions = true\n[producer]\nacks = '1'\n", 'needs producer.acks = "all"'),
    ("[workload]\ntransactions = true\n[producer]\nacks = 0\n", 'needs producer.acks = "all"'),
    ("[workload]\ntransactions = true\nmode = 'subscribe'\n", 'needs mode = "assign"'),
    ("[workload]\nabort_probability = 1.5\n", "abort_probability must be between 0 and 1"),
    ("[workload]\nabort_probability = -0.1\n", "abort_probability must be between 0 and 1"),
    ("[workload]\ntxn_max_ops = 0\n", "txn_max_ops must be at least 1"),
    ("[workload]\ntransactions = true\n[consumer]\n'isolation.level' = 'snapshot'\n", '"isolation.level": must be'),
    ("[workload]\ntxn_send_offsets = true\n", "txn_send_offsets needs transactions = true"),
    ("[producer]\n'transactional.id' = 'mine'\n", "set by kchaos"),
    ("[workload]\ncrash_interval = -1\n", "crash_interval must be"),
    ("[workload]\ntransactions = true\n[producer]\n'transaction.timeout.ms' = 1000\n", "transactional producer"),
]


@pytest.mark.parametrize("toml, needle", BAD)
def test_validate_refuses_bad_transaction_settings(tmp_path, toml, needle):
    assert needle in refused_by_validate(tmp_path, toml)


@pytest.mark.parametrize("toml, needle", [BAD[0], BAD[1], BAD[2], BAD[5], BAD[7], BAD[8]])
def test_cli_refuses_bad_transaction_config_with_one_line_and_64(tmp_path, toml, needle):
    assert needle in refused_by_cli(tmp_path, toml)


def test_good_transaction_settings_pass():
    validate(txn_cfg(1, txn_send_offsets=True, crash_interval=5))
    cfg = txn_cfg(1)
    cfg.consumer["isolation.level"] = "read_uncommitted"
    cfg.producer["acks"] = -1
    validate(cfg)


def test_transaction_timeout_is_short_but_never_below_the_message_timeout():
    from harness.client_config import offline_client_context
    from workloads.txn import TRANSACTION_TIMEOUT_MS, transactional_id, txn_producer_settings
    ctx = offline_client_context(txn_cfg(1))
    conf = txn_producer_settings(ctx, transactional_id(1, 2))
    assert conf["transactional.id"] == "kchaos-1-w2" and conf["transaction.timeout.ms"] == TRANSACTION_TIMEOUT_MS
    slow = offline_client_context(txn_cfg(1, op_timeout=30.0))
    assert txn_producer_settings(slow, "x")["transaction.timeout.ms"] == txn_producer_settings(slow, "x")[
        "message.timeout.ms"] > TRANSACTION_TIMEOUT_MS
    validate(txn_cfg(1, op_timeout=30.0))
    own = txn_cfg(1)
    own.producer["transaction.timeout.ms"] = 20000
    assert txn_producer_settings(offline_client_context(own), "x")["transaction.timeout.ms"] == 20000
