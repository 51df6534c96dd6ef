"""The report's per-fault progress table (reports/fault_progress.py): pure, from the digest of ops."""
from __future__ import annotations

from reports.digest import digest
from reports.fault_progress import min_insync_of, progress_rows, run_progress

S = 1_000_000_000
CUT = {"fault": "partition", "topology": "client-cut-leader", "partition": 0, "leader": "n1",
       "nodes": ["n1"], "client_reaches": ["n2", "n3"], "action": "start"}


def op(process, type_, f, time_s, value=None, **kw):
    return {"process": process, "type": type_, "f": f, "time": int(time_s * S), "value": value, **kw}


def history(writes_during_cut: bool) -> list[dict]:
    """Sends to partitions 0 (leader 1) and 1 (leader 2) every 0.5 s for 10 s;
    partition 0's leader cut from 3 s to 7 s."""
    ops = [op("sampler", "ok", "sample", 0.0, {"controller": 1, "partitions": {
        "0": {"leader": 1, "isr": [1, 2, 3], "epoch": 0}, "1": {"leader": 2, "isr": [1, 2, 3], "epoch": 0}}})]
    value = 0
    for k in range(20):
        t = k * 0.5
        for p in (0, 1):
            cut = 3 <= t < 7
            if cut and (p == 0 or not writes_during_cut):
                continue
            ops += [op(p, "invoke", "send", t + 0.01, [[p, value, None]]),
                    op(p, "ok", "send", t + 0.02, [[p, value, k]])]
            value += 1
        if t == 3.0:
            ops += [op("nemesis", "invoke", "start-partition", 3.0, {"topology": "client-cut-leader"}),
                    op("nemesis", "info", "start-partition", 3.001, CUT)]
        if t == 7.0:
            ops += [op("nemesis", "invoke", "stop-partition", 7.0, {"fault": "partition"}),
                    op("nemesis", "info", "stop-partition", 7.001,
                       {"fault": "partition", "nodes": ["n1", "n2", "n3"], "action": "stop"})]
    ops.sort(key=lambda o: o["time"])
    return [dict(o, index=i) for i, o in enumerate(ops)]


def test_writes_on_the_partition_the_cut_did_not_reach() -> None:
    rows = progress_rows(run_progress(digest(history(True)), {"topic": {"min.insync.replicas": 2}}))
    assert rows["partitions"] == [0, 1]
    (row,) = rows["rows"]
    assert row["impaired"] == "0" and [c["impaired"] for c in row["cells"]] == [True, False]
    assert [c["acks"] for c in row["cells"]] == [0, 8] and row["unimpaired_acks"] == 8
    assert rows["line"].startswith("writes acknowledged on unimpaired partitions in 4 of 4 fault seconds")


def test_a_stall_everywhere_shows() -> None:
    rows = progress_rows(run_progress(digest(history(False)), {}))
    assert rows["rows"][0]["unimpaired_acks"] == 0
    assert " in 0 of 4 fault seconds (0%)" in rows["line"]


def test_no_fault_no_table() -> None:
    ops = [o for o in history(True) if o["process"] != "nemesis"]
    assert progress_rows(run_progress(digest(ops), {})) is None


def test_min_insync_from_the_stored_config() -> None:
    assert min_insync_of({"broker": {"min.insync.replicas": 2}, "topic": {"min.insync.replicas": 3}}) == 3
    assert min_insync_of({"broker": {"min.insync.replicas": "2"}}) == 2
    assert min_insync_of({}) == 1
