"""Progress where a fault does not reach (checkers/progress.py, progress_check.py):
the impaired partitions of a fault, the fault seconds with writes elsewhere, and
``too-little-progress`` on a planted history, in both engines."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import checkers
from chk_builder import History
from checkers.progress import Rule, fault_progress, impaired_partitions, progress_seconds, too_little_progress
from history.fault_intervals import NemesisOp, fault_intervals
from history.parquet import write_parquet
from history.paired import pair_ops

MS = 1_000_000
S = 1000 * MS
CUT = {"fault": "partition", "topology": "client-cut-leader", "partition": 0, "leader": "n1",
       "nodes": ["n1"], "client_reaches": ["n2", "n3"], "action": "start"}
HEAL = {"fault": "partition", "nodes": ["n1", "n2", "n3"], "action": "stop"}


def planted(stall_other: bool) -> History:
    """Partition 0's leader (n1) cut for about 6 s; partition 1 (leader n2)
    acknowledges a write every 200 ms outside the cut and, unless
    ``stall_other``, during it too."""
    h = History()
    h.sample({0: (1, [1, 2, 3]), 1: (2, [1, 2, 3])})
    h.assign(0, [0, 1])
    offsets = {0: 0, 1: 0}
    acked: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    value = 0

    def send(p: int, dt: int) -> None:
        nonlocal value
        h.send(p, [(p, value, offsets[p])], dt=dt)
        acked[p].append((offsets[p], value))
        offsets[p] += 1
        value += 1

    for _ in range(20):
        send(0, 50 * MS)
        send(1, 50 * MS)
    h.nemesis("start-partition", CUT)
    h.sample({0: (1, [1, 2, 3]), 1: (2, [1, 2, 3])})
    for _ in range(30):
        if stall_other:
            h.add(9, "invoke", "poll", None, dt=100 * MS)
            h.add(9, "ok", "poll", {})
        else:
            send(1, 100 * MS)
    h.nemesis("stop-partition", HEAL)
    for _ in range(20):
        send(0, 50 * MS)
        send(1, 50 * MS)
    for p in (0, 1):
        h.poll(0, {p: acked[p]}, drain=True)
    return h


def _events(h: History) -> list[NemesisOp]:
    out = []
    ops = [o for o in h.ops if o["process"] == "nemesis"]
    for inv, done in zip(ops[::2], ops[1::2]):
        out.append(NemesisOp(inv["index"], inv["time"], done["time"], done["f"], done["value"]))
    return out


def test_the_cut_impairs_the_partition_it_names_and_those_its_node_leads() -> None:
    iv = fault_intervals(_events(planted(False)))[0]
    samples = [(0, {0: (1, [1, 2, 3]), 1: (2, [1, 2, 3]), 2: (1, [1, 2, 3])})]
    assert impaired_partitions(iv, iv.start_time, iv.end_time, [0, 1, 2], samples, Rule(2)) == {0, 2}
    low_isr = samples + [(iv.start_time + 1, {0: (1, [1]), 1: (2, [2]), 2: (3, [1, 2, 3])})]
    assert impaired_partitions(iv, iv.start_time, iv.end_time, [0, 1, 2], low_isr, Rule(2)) == {0, 1, 2}
    assert impaired_partitions(iv, iv.start_time, iv.end_time, [0, 1, 3], samples, Rule(2)) == {0, 1, 3} - {1}   # 3: no leader known


def test_a_fault_tied_to_no_node_impairs_every_partition() -> None:
    ev = NemesisOp(0, 10, 20, "bump-clock", {"fault": "clock", "action": "start"})
    iv = fault_intervals([ev])[0]
    assert impaired_partitions(iv, 10, 30, [0, 1], [], Rule()) == {0, 1}


@pytest.mark.parametrize("stall_other,slow,progressing", [(True, 1, 0), (False, 0, 1)])
def test_progress_per_fault(stall_other: bool, slow: int, progressing: float) -> None:
    h = planted(stall_other)
    acks: dict[int, list[int]] = {}
    for op in h.ops:
        if op["f"] == "send" and op["type"] == "ok":
            acks.setdefault(op["value"][0][0], []).append(op["time"])
    span = (min(min(v) for v in acks.values()), max(max(v) for v in acks.values()))
    intervals, samples = fault_intervals(_events(h)), [(0, {0: (1, [1, 2, 3]), 1: (2, [1, 2, 3])})]
    fp = fault_progress(intervals, acks, samples, Rule(2, isr_waits=True), span)
    assert [f.impaired for f in fp] == [{0}] and fp[0].acks[0] == 0
    assert fp[0].baseline[1] == pytest.approx(5, rel=0.1)   # a send to each partition every 200 ms
    assert len(too_little_progress(fp, 0.5)) == slow
    secs = progress_seconds(intervals, acks, samples, Rule(2), span)
    assert secs.seconds >= 2 and secs.share == progressing


def _config(min_progress: float | None, engine: str) -> dict[str, Any]:
    return {"engine": engine, **({"min_progress": min_progress} if min_progress is not None else {}),
            "min_insync_replicas": 2}


CASES = [(True, 0.5, 1), (False, 0.5, 0), (True, None, 0)]


def _assert(r: Any, stall_other: bool, min_progress: float | None, expect: int) -> None:
    a = r.anomalies["too-little-progress"]
    assert r.errors == [] and a["count"] == expect
    assert r.valid is (expect == 0)
    assert a["allowed"] is (min_progress is None)
    assert r.stats["fault_progress"]["fault_seconds"] >= 2
    assert (r.stats["fault_progress"]["with_acks_on_unimpaired"] == 0) is stall_other
    if expect:
        w = a["witnesses"][0]
        assert w["partition"] == 1 and w["acks"] == 0 and w["impaired"] == [0]
        assert w["ops"][0]["f"] == "start-partition"


@pytest.mark.parametrize("stall_other,min_progress,expect", CASES)
def test_reference_engine_planted(tmp_path: Path, stall_other: bool, min_progress: float | None,
                                  expect: int) -> None:
    r = checkers.check(planted(stall_other).write(tmp_path / "history.jsonl"), _config(min_progress, "reference"))
    _assert(r, stall_other, min_progress, expect)


@pytest.mark.parametrize("min_progress", [0.5, None])
def test_spark_engine_planted_agrees(spark: Any, tmp_path: Path, min_progress: float | None) -> None:
    cases = [c for c in CASES if c[1] == min_progress or (min_progress == 0.5 and c[1] == 0.5)]
    path = tmp_path / "cases.parquet"
    write_parquet([(i, pair_ops(planted(s).ops)) for i, (s, _, _) in enumerate(cases)], path)
    results = checkers.check_runs(path, _config(min_progress, "spark"), spark=spark)
    for i, (stall_other, mp, expect) in enumerate(cases):
        _assert(results[i], stall_other, mp, expect)
        ref = checkers.check(planted(stall_other).write(tmp_path / f"h{i}.jsonl"), _config(mp, "reference"))
        a, b = ref.to_json(), results[i].to_json()
        a.pop("checker"), b.pop("checker")
        assert a == b


def test_an_isolated_leader_impairs_only_the_partitions_it_leads() -> None:
    value = {"fault": "partition", "topology": "isolate-leader", "partition": 0, "leader": "n1",
             "isolated": ["n1"], "nodes": ["n1", "n2", "n3"], "action": "start"}
    iv = fault_intervals([NemesisOp(0, 10, 20, "start-partition", value)])[0]
    samples = [(0, {0: (1, [1, 2, 3]), 1: (2, [1, 2, 3]), 2: (3, [1, 2, 3])}),
               (15, {0: (2, [2, 3]), 1: (2, [2, 3]), 2: (3, [2, 3])})]
    assert impaired_partitions(iv, 10, 30, [0, 1, 2], samples, Rule(2)) == {0}
    assert impaired_partitions(iv, 10, 30, [0, 1, 2], samples, Rule(3)) == {0, 1, 2}
    # acks=all: until the ISR shrinks away from n1, every partition waits for it
    assert impaired_partitions(iv, 10, 14, [0, 1, 2], samples, Rule(2, isr_waits=True)) == {0, 1, 2}
    assert impaired_partitions(iv, 15, 30, [0, 1, 2], samples[1:], Rule(2, isr_waits=True)) == {0}
