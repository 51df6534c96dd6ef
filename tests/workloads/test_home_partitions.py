"""Workers send to their home partitions (workloads/op_streams.py): every
partition has a sender, and a worker's sends never leave its own."""
from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from workloads.op_streams import StreamSpec, home_partitions, queue_ops


@pytest.mark.parametrize("partitions,concurrency", [(3, 8), (3, 3), (3, 1), (3, 2), (6, 4), (1, 8), (12, 5)])
def test_every_partition_has_a_sender_and_a_worker_few(partitions: int, concurrency: int) -> None:
    homes = [home_partitions(partitions, w, concurrency) for w in range(concurrency)]
    assert set().union(*map(set, homes)) == set(range(partitions))
    assert all(homes)
    if concurrency >= partitions:
        assert all(len(h) == 1 for h in homes)
    else:   # disjoint: a partition has one sender
        assert sum(map(len, homes)) == partitions


def test_a_workers_sends_stay_on_its_home_partition() -> None:
    w = SimpleNamespace(partitions=3, send_fraction=0.5, max_batch=3, async_commit_probability=0.0)
    for worker in range(8):
        spec = StreamSpec(w, worker, 8, 25.0)
        sends = [op for op in itertools.islice(queue_ops(spec, random.Random(worker), False), 200) if op.f == "send"]
        assert sends and {m[0] for op in sends for m in op.value} == {worker % 3}
