"""Committed offsets stay put, hand-written: a group history with the
runner's committed-offset reads (``offsets`` ops), one planted change no
commit explains, and the edges that must not count (a commit racing a read,
an info commit that applied late, an async commit), in both engines.

The base history: partition 0 (values 1..4 at offsets 0..3), member 5 of
group g reads it and commits 2, then 4; the offset sampler reads before the
first commit, between the two and after the last.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import chk_cases
from chk_builder import History
from chk_cases import Case
from test_chk_groups import commit, gpoll, rebalance, subscribe

G = "g"


def offsets(h: History, committed: dict[int, int | None], type: str = "ok", group: str = G,
            between: Callable[[], None] | None = None) -> None:
    """One read of the group's committed offsets; ``between`` adds ops while it is outstanding."""
    h.add("offset-sampler", "invoke", "offsets", {"group": group}, group=group)
    if between is not None:
        between()
    h.add("offset-sampler", type, "offsets", {str(p): o for p, o in committed.items()} if type == "ok" else None,
          group=group, **({"error": "timed out"} if type == "info" else {}))


def base(*, moved: bool = False, deleted: bool = False, racing: bool = False, late_info: bool = False,
         unknown: bool = False, async_commit: bool = False) -> Callable[[], History]:
    def build() -> History:
        h = History()
        for v in range(1, 5):
            h.send(0, [(0, v, v - 1)])
        subscribe(h, 5)
        gpoll(h, 5, {})
        rebalance(h, 5, [0], [], 1)
        offsets(h, {0: None})
        gpoll(h, 5, {0: [(0, 1), (1, 2)]})
        if late_info:        # asked for 2, no answer: it applied after the next read began
            commit(h, 5, None, type="info", asked={0: 2})
        elif unknown:        # the consumer's positions, no answer: may have committed anything
            commit(h, 5, None, type="info")
        elif async_commit:
            h.add(5, "invoke", "commit", None, group=G, **{"async": True})
            h.add(5, "ok", "commit", {"0": 2}, group=G, **{"async": True})
        elif not racing:
            commit(h, 5, {0: 2})
        if racing:           # the commit completes while the read is outstanding
            offsets(h, {0: 2}, between=lambda: commit(h, 5, {0: 2}))
        else:
            offsets(h, {0: 2})
        gpoll(h, 5, {0: [(2, 3), (3, 4)]})
        commit(h, 5, {0: 4})
        offsets(h, {0: 4})
        offsets(h, {0: 3} if moved else {0: None} if deleted else {0: 4})    # moved: back to 3, no commit
        h.assign(9, [0])
        h.poll(9, {0: [(o, o + 1) for o in range(4)]}, drain=True)
        offsets(h, {0: 3} if moved else {0: None} if deleted else {0: 4}, )
        h.ops[-1]["final"] = True
        return h
    return build


def v_moved(r: Any) -> None:
    w = r.anomalies["phantom-commit"]["witnesses"][0]
    assert (w["partition"], w["offsets"], w["group"], w["before"], w["after"]) == (0, [4, 3], G, 4, 3)
    assert [o["f"] for o in w["ops"]] == ["offsets", "offsets"]      # no commit acted between the reads
    assert w["ops"][0]["process"] == "offset-sampler"


def v_deleted(r: Any) -> None:
    w = r.anomalies["phantom-commit"]["witnesses"][0]
    assert (w["offsets"], w["before"], w["after"]) == ([4, -1], 4, None)


def v_unknown(r: Any) -> None:
    assert r.stats["unknown_offset_changes"] == 1
    assert any("committed offset only a commit of unknown offsets" in u for u in r.unknown)


def first_read_unexplained() -> History:
    """The change from none to 2 with no commit at all before the second read."""
    h = base()()
    h.ops = [o for o in h.ops if not (o["f"] == "commit" and o["process"] == 5
                                      and o["index"] < 20 and (o.get("value") in (None, {"0": 2})))]
    for i, o in enumerate(h.ops):
        o["index"] = i
    return h


def v_first(r: Any) -> None:
    w = r.anomalies["phantom-commit"]["witnesses"][0]
    assert (w["offsets"], w["before"], w["after"]) == ([-1, 2], None, 2)


CASES: dict[str, Case] = {
    "offsets-clean": Case(base(), {}, True),
    "offsets-racing-commit": Case(base(racing=True), {}, True),
    "offsets-late-info-commit": Case(base(late_info=True), {}, True),
    "offsets-async-commit": Case(base(async_commit=True), {}, True),
    "offsets-unknown-commit": Case(base(unknown=True), {}, "unknown", v_unknown),
    "phantom-commit-moved": Case(base(moved=True), {"phantom-commit": 1}, False, v_moved),
    "phantom-commit-deleted": Case(base(deleted=True), {"phantom-commit": 1}, False, v_deleted),
    "phantom-commit-unexplained": Case(first_read_unexplained, {"phantom-commit": 1}, False, v_first),
}

spark_results, test_case, test_engines_agree_exactly = chk_cases.case_tests(CASES, "offsets")


def test_info_read_is_no_sample(tmp_path: Path) -> None:
    """A read without an answer reads nothing: the change is judged across it."""
    h = base(moved=True)()
    for o in h.ops:
        if o["f"] == "offsets" and o["type"] == "ok" and o["value"] == {"0": 3} and not o.get("final"):
            o["type"], o["value"], o["error"] = "info", None, "timed out"
    r = chk_cases.reference_result(Case(lambda: h, {}, False), tmp_path)
    w = r.anomalies["phantom-commit"]["witnesses"][0]
    assert r.anomalies["phantom-commit"]["count"] == 1 and w["ops"][1]["value"] == {"0": 3}
