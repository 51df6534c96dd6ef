"""The share of the workload time with acknowledged writes: pure, from the digest of ops."""
from __future__ import annotations

import pytest

from reports.availability import write_availability as of_digest
from reports.digest import digest

S = 1_000_000_000


def write_availability(ops, bucket_s=1.0):
    return of_digest(digest([dict(o, index=i) for i, o in enumerate(ops)]), bucket_s)


def op(process, type_, f, time_s, value=None, **kw):
    return {"process": process, "type": type_, "f": f, "time": int(time_s * S), "value": value, **kw}


def test_seconds_with_an_acknowledged_write():
    ops = [op(0, "invoke", "send", 0.0, [[0, 1, None]]), op(0, "ok", "send", 0.5, [[0, 1, 7]]),
           op(1, "invoke", "send", 1.2, [[1, 2, None]]), op(1, "info", "send", 4.5, [[1, 2, None]]),
           op(2, "invoke", "send", 4.6, [[0, 3, None], [0, 4, None]]),
           op(2, "info", "send", 5.5, [[0, 3, 8], [0, 4, None]]),          # mixed: one acknowledged
           op(3, "invoke", "poll", 5.6), op(3, "ok", "poll", 9.5, {}),
           op("nemesis", "info", "kill", 6.0, {}), op("sampler", "ok", "sample", 9.9, {}),
           op(4, "invoke", "poll", 10.0, drain=True), op(4, "ok", "poll", 30.0, {}, drain=True)]
    wa = write_availability(ops)
    assert (wa.slices, wa.acked, wa.longest_gap) == (10, 2, 4)
    assert wa.share == pytest.approx(0.2)
    assert wa.line() == "writes acknowledged in 2 of 10s of the workload (20%); longest stretch without: 4 s"


def test_failed_and_unacknowledged_sends_do_not_count():
    ops = [op(0, "invoke", "send", 0.0), op(0, "fail", "send", 1.0, [[0, 1, 3]]),
           op(1, "invoke", "send", 1.0), op(1, "info", "send", 2.5, [[0, 2, None]])]
    wa = write_availability(ops)
    assert wa.acked == 0 and wa.longest_gap == wa.slices == 3


def test_no_client_ops():
    assert write_availability([op("nemesis", "info", "kill", 1.0, {})]) is None
    assert write_availability([]) is None
    with pytest.raises(ValueError):
        write_availability([], bucket_s=0)


def test_committed_transactions_with_a_write_count_and_aborted_ones_do_not():
    ops = [op(0, "invoke", "txn", 0.0, [["send", 0, 1], ["poll"]]),
           op(0, "ok", "txn", 0.5, [["send", 0, 1, 7], ["poll", {}]]),                  # committed, wrote
           op(1, "invoke", "txn", 1.1, [["send", 0, 2]]),
           op(1, "fail", "txn", 1.5, [["send", 0, 2, 8]], abort=True),                  # aborted: no
           op(2, "invoke", "txn", 2.1, [["poll"]]), op(2, "ok", "txn", 2.5, [["poll", {}]]),  # read only: no
           op(3, "invoke", "txn", 3.1, [["send", 1, 3]]), op(3, "info", "txn", 3.9, [["send", 1, 3, 9]])]
    wa = write_availability(ops)
    assert (wa.slices, wa.acked) == (4, 1)
