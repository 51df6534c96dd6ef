"""The schedule is a pure function of config and seed."""
import itertools

from harness.run_config import RunConfig, WorkloadConfig
from harness.schedule import digest, fault_plan, worker_ops


def cfg(seed, **kw):
    return RunConfig(seed=seed, time_limit=10, rate=100, concurrency=4, **kw)


def first(c, worker, n=300):
    return [(op.delay_s, op.f, op.value) for op in itertools.islice(worker_ops(c, worker), n)]


def test_same_seed_same_ops_and_faults():
    a, b = cfg(7), cfg(7)
    a.nemesis.faults = b.nemesis.faults = ["all"]
    a.nemesis.interval = b.nemesis.interval = 2
    for w in range(4):
        assert first(a, w) == first(b, w)
    assert fault_plan(a) == fault_plan(b) and fault_plan(a)
    assert digest(a) == digest(b)


def test_different_seeds_differ():
    a, b = cfg(7), cfg(8)
    a.nemesis.faults = b.nemesis.faults = ["all"]
    a.nemesis.interval = b.nemesis.interval = 2
    assert first(a, 0) != first(b, 0)
    assert fault_plan(a) != fault_plan(b)
    assert digest(a) != digest(b)


def test_config_changes_change_the_digest():
    assert digest(cfg(7)) != digest(cfg(7, workload=WorkloadConfig(partitions=5)))


def test_values_are_unique_per_partition_across_workers():
    c = cfg(3)
    seen = set()
    for w in range(c.concurrency):
        for op in itertools.islice(worker_ops(c, w), 2000):
            if op.f == "send":
                for p, v, offset in op.value:
                    assert offset is None and 0 <= p < c.workload.partitions
                    assert (p, v) not in seen
                    seen.add((p, v))
    assert len(seen) > 1000


def test_each_worker_starts_with_its_assignment():
    c = cfg(3)
    op = next(worker_ops(c, 0))
    assert op.f == "assign" and op.value and set(op.value) <= set(range(c.workload.partitions))
    c.workload.mode = "subscribe"
    assert next(worker_ops(c, 0)).f == "subscribe"


def test_mean_rate_follows_config():
    c = cfg(11)
    delays = [op.delay_s for op in itertools.islice(worker_ops(c, 0), 5001)][1:]
    per_worker = c.rate / c.concurrency
    assert abs(len(delays) / sum(delays) - per_worker) / per_worker < 0.05
