"""Transactions judged in full: txn reads in the poll chains (an abort takes the
chain back), info txns settled from reads, the drain and Kafka's markers. One
hand-written history per rule, each with one planted anomaly (and its clean
variant), in both engines (docs/design.md, "Transactions")."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import checkers
import chk_cases
from checkers.kafka_record import Replica, RunRecords
from chk_builder import History
from chk_cases import Case
from test_chk_txn import sends, txn


def _drain(h: History, reads: dict[int, list[tuple[int, int]]]) -> None:
    h.assign(9, sorted(reads))
    h.poll(9, reads, drain=True)


def no_rewind(rewinds: bool) -> Any:
    """A txn consumer aborts a txn that read offsets 1 and 2; the next txn must
    read from offset 1 again (the workload seeks back: KAFKA-17582). One that
    goes on at offset 3 skipped what the aborted txn read."""
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1), (3, 2), (4, 3)])
        h.assign(1, [0])
        txn(h, 1, [("poll", {0: [(0, 1)]})])
        txn(h, 1, [("poll", {0: [(1, 2), (2, 3)]})], type="fail", abort=True)
        txn(h, 1, [("poll", {0: [(1, 2), (2, 3), (3, 4)] if rewinds else [(3, 4)]})])
        _drain(h, {0: [(0, 1), (1, 2), (2, 3), (3, 4)]})
        return h
    return build


def between_committed(kind: str) -> Any:
    """Two committed txns of one consumer: the second skips an offset, or goes back."""
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
        h.assign(1, [0])
        txn(h, 1, [("poll", {0: [(0, 1), (1, 2)] if kind == "back" else [(0, 1)]})])
        txn(h, 1, [("poll", {0: {"skip": [(2, 3)], "back": [(1, 2), (2, 3)], "clean": [(1, 2), (2, 3)]}[kind]})])
        _drain(h, {0: [(0, 1), (1, 2), (2, 3)]})
        return h
    return build


def poll_after_txn() -> History:
    """A plain poll after a committed txn of the same consumer goes on from the txn's last read."""
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
    h.assign(1, [0])
    txn(h, 1, [("poll", {0: [(0, 1), (1, 2)]})])
    h.poll(1, {0: [(2, 3)]})
    _drain(h, {0: [(0, 1), (1, 2), (2, 3)]})
    return h


def skip_over_info(seen: bool) -> Any:
    """A read_committed txn skips offset 1, which holds an info txn's value. When
    a read_committed poll returned that value the info txn committed, so the
    skip is real (int-poll-skip); when nobody did, the txn may have aborted and
    a read_committed reader rightly skips it."""
    def build() -> History:
        h = History()
        sends(h, 0, 0, [(1, 0)])
        txn(h, 2, [("send", 0, 5, 1)], type="info")
        sends(h, 0, 0, [(3, 2)])
        h.poll(4, {0: [(0, 1), (1, 5), (2, 3)] if seen else [(0, 1), (2, 3)]})
        txn(h, 1, [("poll", {0: [(0, 1)]}), ("poll", {0: [(2, 3)]})])
        return h
    return build


def info_offset_conflict() -> History:
    """An info txn's delivery report put value 5 at offset 1 of partition 0,
    and a plain send was acknowledged at that very offset; a read_committed
    read of the txn's other write (partition 1) shows it committed. The two
    values at one offset are an inconsistent offset (and the send, invoked after
    the txn completed, got no higher offset: nonlinearizable), and the committed
    value the drain lacks is lost (the txn torn)."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 2, [("send", 0, 5, 1), ("send", 1, 6, 0)], type="info")
    sends(h, 0, 0, [(7, 1)])
    h.poll(3, {1: [(0, 6)]})
    _drain(h, {0: [(0, 1), (1, 7)], 1: [(0, 6)]})
    return h


def info_unread_absent() -> History:
    """An info txn nobody read and the complete drain lacks: settled aborted."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 2, [("send", 0, 5, 1)], type="info")
    sends(h, 0, 0, [(3, 3)])
    _drain(h, {0: [(0, 1), (3, 3)]})
    return h


def v_after(typ: str, skipped: list[int] | None) -> Any:
    def verify(r: Any) -> None:
        w = r.anomalies[typ]["witnesses"][0]
        aborted = [o for o in w["ops"] if o["type"] == "fail"]
        assert len(aborted) == 1 and w["after_txn"] == aborted[0]["invoke_index"]
        if skipped is not None:
            assert w["skipped"] == skipped
    return verify


def v_settled(outcome: str, source: str) -> Any:
    def verify(r: Any) -> None:
        [s] = r.stats["settled_txns"]
        assert (s["outcome"], s["from"]) == (outcome, source) and s["evidence"]
    return verify


def v_conflict(r: Any) -> None:
    w = r.anomalies["inconsistent-offset"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["values"]) == (0, [1], [5, 7])
    assert [o["f"] for o in w["ops"]] == ["txn", "send"] and w["ops"][0]["type"] == "info"
    v_settled("committed", "reads")(r)


CASES: dict[str, Case] = {
    "abort-rewinds": Case(no_rewind(True), {}, True),
    "abort-no-rewind": Case(no_rewind(False), {"poll-skip": 1}, False, v_after("poll-skip", [1, 2])),
    "skip-between-committed": Case(between_committed("skip"), {"poll-skip": 1}, False),
    "rewind-between-committed": Case(between_committed("back"), {"nonmonotonic-poll": 1}, False),
    "committed-txns-contiguous": Case(between_committed("clean"), {}, True),
    "poll-after-txn": Case(poll_after_txn, {}, True),
    "int-poll-skip-over-info-seen": Case(skip_over_info(True), {"int-poll-skip": 1}, False,
                                         v_settled("committed", "reads")),
    "skip-over-info-unseen": Case(skip_over_info(False), {}, True, v_settled("unknown", None)),
    "info-offset-conflict": Case(info_offset_conflict,
                                 {"inconsistent-offset": 1, "nonlinearizable-offset": 1, "lost-txn-write": 1,
                                  "torn-transaction": 1}, False,
                                 v_conflict),
    "info-settled-by-drain": Case(info_unread_absent, {}, True, v_settled("aborted", "drain")),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "txn-chain-cases")


def test_an_abort_rewind_after_another_abort_names_the_last(tmp_path: Path) -> None:
    """Two aborts in a row, then a read that starts past both: the witness names the later one."""
    h = History()
    sends(h, 0, 0, [(1, 0), (2, 1), (3, 2)])
    h.assign(1, [0])
    txn(h, 1, [("poll", {0: [(0, 1)]})])
    txn(h, 1, [("poll", {0: [(1, 2)]})], type="fail", abort=True)
    txn(h, 1, [("poll", {0: [(1, 2)]})], type="fail", abort=True)
    txn(h, 1, [("poll", {0: [(2, 3)]})])
    r = checkers.check(h.write(tmp_path / "h.jsonl"), {"engine": "reference"})
    w = r.anomalies["poll-skip"]["witnesses"][0]
    assert r.anomalies["poll-skip"]["count"] == 1
    assert w["after_txn"] == max(o["invoke_index"] for o in w["ops"] if o["type"] == "fail")


# ------------------------------------------------ settled from Kafka's markers

PRODUCER = 1000


def replicas(markers: list[tuple[int, str]], values: dict[int, int]) -> RunRecords:
    """Partition 0 on three replicas holding ``values`` (value -> offset), the
    txn's written by PRODUCER, other values by producer 1; ``markers``:
    (offset, "COMMIT" | "ABORT") of PRODUCER."""
    rr = RunRecords()
    rr.replicas[0] = [Replica(node=f"n{i}", partition=0, log_start_offset=0, log_end_offset=10, epochs=[(0, 0)],
                              by_value=dict(values), producers={v: PRODUCER if v == 5 else 1 for v in values},
                              markers=[(o, PRODUCER, 0, t) for o, t in markers]) for i in (1, 2, 3)]
    return rr


def committed_then_lost() -> History:
    """An info txn (value 5 at offset 1) that nobody read and the complete drain lacks."""
    return info_unread_absent()


def aborted_yet_read() -> History:
    """An info txn (value 5 at offset 1) a read_committed poll returned."""
    h = History()
    sends(h, 0, 0, [(1, 0)])
    txn(h, 2, [("send", 0, 5, 1)], type="info")
    sends(h, 0, 0, [(3, 3)])
    h.poll(4, {0: [(0, 1), (1, 5), (3, 3)]})
    _drain(h, {0: [(0, 1), (1, 5), (3, 3)]})
    return h


MARKER_CASES = {
    # the drain alone would settle it aborted; the COMMIT marker says it committed: its write is lost
    # (and the read_committed drain skipped its offset)
    "commit-marker-absent-from-drain": (committed_then_lost, [(2, "COMMIT")], {1: 0, 5: 1, 3: 3},
                                        {"lost-txn-write": 1, "poll-skip": 1}, "committed"),
    # reads alone would settle it committed; the ABORT marker says it aborted: the read is an aborted read
    "abort-marker-yet-read": (aborted_yet_read, [(2, "ABORT")], {1: 0, 5: 1, 3: 3}, {"aborted-read": 1},
                              "aborted"),
    # the markers agree with the reads: nothing wrong
    "commit-marker-read": (aborted_yet_read, [(2, "COMMIT")], {1: 0, 5: 1, 3: 3}, {}, "committed"),
}


@pytest.mark.parametrize("engine", ["reference", pytest.param("spark", marks=pytest.mark.spark)])
@pytest.mark.parametrize("name", list(MARKER_CASES))
def test_markers_settle_info_txns(name: str, engine: str, tmp_path: Path, request: Any) -> None:
    build, markers, values, expect, outcome = MARKER_CASES[name]
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    r = checkers.check(build().write(tmp_path / "h.jsonl"), {"engine": engine}, spark=spark,
                       records=replicas(markers, values))
    assert r.errors == []
    assert {t: c for t, c, _ in checkers.summary(r) if c} == expect
    assert r.valid is (not expect)
    [s] = r.stats["settled_txns"]
    assert (s["outcome"], s["from"]) == (outcome, "markers")
    assert "marker at offset 2" in s["evidence"]
