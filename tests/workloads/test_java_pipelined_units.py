"""Pipelined sends through a driver, without a cluster: a stand-in driver in
Python speaks the asynchronous requests (docs/design.md, "The client
protocol": pipelined sends), and the history rows must be the librdkafka
pipelined producer's."""
from __future__ import annotations

import itertools
import sys
import textwrap

import pytest

from history.ops import FAIL, INFO, INVOKE, OK
from workloads.client import ClientContext
from workloads.java_pipelined import DriverPipelinedProducer

# Values choose the answer: 7 gets none, 13 an uncertain error, 17 a refusal, 19 a fatal error;
# the rest are acknowledged at offsets counted per partition. Completions come two lines apart
# and in reverse order, as callbacks from several partitions' batches may.
FAKE_PIPELINED_DRIVER = textwrap.dedent('''
    import json, sys
    offsets = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req["f"] == "open":
            print(json.dumps({"type": "ok", "f": "open", "value": {"client": "fake", "version": "0"}}), flush=True)
            continue
        if req["f"] != "send-async":
            continue
        done = []
        for op_id, p, v in req["sends"]:
            if v == 7:
                continue
            if v == 13:
                done.append([op_id, "info", None, "TimeoutException: expired"])
            elif v == 17:
                done.append([op_id, "fail", None, "RecordTooLargeException (refused by send())", False])
            elif v == 19:
                done.append([op_id, "info", None, "OutOfOrderSequenceException", True])
            else:
                offsets[p] = offsets.get(p, -1) + 1
                done.append([op_id, "ok", offsets[p]])
        done.reverse()
        half = len(done) // 2
        for part in (done[:half], done[half:]):
            if part:
                print(json.dumps({"f": "sent", "done": part}), flush=True)
''')


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(FAKE_PIPELINED_DRIVER)
    return (sys.executable, str(script))


class Recorded:
    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.processes = itertools.count()
        self.names = (f"p{i}" for i in itertools.count())

    def record_sends(self, rows, node) -> None:
        self.rows.extend(rows)


def pump(fake, in_flight: int = 4, expire_s: float | None = None):
    rec = Recorded()
    ctx = ClientContext(bootstrap="b:9092", topic="t", partitions=3, driver=fake, node="all", op_timeout_s=2.0)
    p = DriverPipelinedProducer(ctx, in_flight, lambda op: None, lambda: next(rec.processes),
                                lambda: next(rec.names), expire_s=expire_s, record_sends=rec.record_sends)
    return p, rec


def completions(rec: Recorded) -> dict[int, tuple]:
    return {r[3]: r for r in rec.rows if r[1] != INVOKE}


def test_completions_are_matched_to_their_sends_by_id(fake):
    p, rec = pump(fake)
    try:
        p.pump(iter([(0, 1), (1, 2), (0, 3), (2, 4), (0, 5), (1, 6)]), lambda: False)
        p.wait_for_slot(lambda: False)
        p.close(flush_s=5)
    finally:
        p.crash()
    done = completions(rec)
    assert set(done) == {1, 2, 3, 4, 5, 6} and all(r[1] == OK for r in done.values())
    assert [done[v][4] for v in (1, 3, 5)] == [0, 1, 2] and done[6][4] == 1
    # rows as the librdkafka pump's: (process, type, partition, value, offset, producer, error)
    assert all(r[5] == "p0" and r[6] is None for r in done.values())
    assert [r[1] for r in rec.rows[:4]] == [INVOKE] * 4 and rec.rows[0][4] is None


def test_uncertain_refused_unanswered_and_fatal(fake):
    p, rec = pump(fake, in_flight=5, expire_s=0.5)
    try:
        p.send_many([(0, 7), (0, 13), (1, 17), (2, 19), (2, 20)])
        for _ in range(100):
            p.serve(0.02)
            if not p.outstanding:
                break
        done = completions(rec)
        assert done[13][1] == INFO and done[13][6] == "TimeoutException: expired"
        assert done[17][1] == FAIL and done[19][1] == INFO and done[20][1] == OK
        assert done[7][1] == INFO and done[7][6] == "no delivery report by the op deadline"
        # info slots retire their processes: the free ones are new numbers
        assert len(p._free) == 5 and {done[v][0] for v in (7, 13, 19)}.isdisjoint(p._free)
        # the fatal error renames the instance before the next send; the driver stays
        driver = p._driver
        p.send_many([(1, 21)])
        assert p.name == "p1" and p._driver is driver
        p.close(flush_s=5)
        assert completions(rec)[21][5] == "p1" and completions(rec)[21][1] == OK
    finally:
        p.crash()


def test_a_crash_kills_the_driver_and_ends_what_is_in_flight_info(fake):
    p, rec = pump(fake)
    p.send_many([(0, 7), (1, 8)])
    proc = p._driver.proc
    p.crash()
    assert proc.wait(timeout=5) < 0
    done = completions(rec)
    assert done[7][1] == INFO and done[7][6] == "crash: producer dropped without flush"
    p.send_many([(0, 9)])                     # a new driver, a new name
    assert p.name == "p1" and p._driver.proc is not proc
    p.close(flush_s=5)
    assert completions(rec)[9][1] == OK and completions(rec)[9][5] == "p1"


def test_a_driver_that_exits_ends_its_sends_info(tmp_path):
    script = tmp_path / "dies.py"
    script.write_text('import json, sys\nsys.stdin.readline()\nprint(json.dumps({"type": "ok", "f": "open", '
                      '"value": {}}), flush=True)\nsys.stdin.readline()\n')
    p, rec = pump((sys.executable, str(script)))
    p.send_many([(0, 1)])
    for _ in range(100):
        p.serve(0.05)
        if not p.outstanding:
            break
    assert completions(rec)[1][1] == INFO and "exited" in completions(rec)[1][6]
    assert p._driver is None


def test_a_driver_that_cannot_open_fails_the_sends(tmp_path, monkeypatch):
    monkeypatch.setattr("workloads.java_pipelined.REOPEN_PAUSE_S", 0.0)
    script = tmp_path / "refuses.py"
    script.write_text('import json, sys\nsys.stdin.readline()\nprint(json.dumps({"type": "fail", "f": "open", '
                      '"value": None, "error": "no"}), flush=True)\n')
    p, rec = pump((sys.executable, str(script)))
    p.send_many([(0, 1)])
    assert completions(rec)[1][1] == FAIL and p.outstanding == 0
