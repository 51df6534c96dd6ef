"""The controllers' metadata logs in the report (issue 31): a hand-made run
folder (the valid fixture plus a raft-log.jsonl and two quorum changes in its
history), checked by the reference engine and rendered; a divergence planted
below the high watermark makes the run invalid, heads its story and is listed
with its witnesses; the same logs agreeing give a valid report with the section."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

from checkers import analyze_run
from reports import render_run
from reports.controller_logs import agreement_line, controller_logs, divergence_text

S = 1_000_000_000
SAME = [[o, 1, f"d{o}"] for o in range(12)]


def _raft_log(run_dir: Path, planted: dict[int, list]) -> None:
    """Three controllers n4..n6 with 12 entries; the high watermark 10 before the reading, 14 after."""
    voters = [{"id": i, "directoryId": f"dir{i}"} for i in (4, 5, 6)]
    head = {"kchaos-raft-log": 1, "high_watermark": 10,
            "status_before": {"leader_id": 6, "high_watermark": 10, "voters": voters},
            "status_after": {"leader_id": 6, "high_watermark": 14, "voters": voters}, "errors": {}}
    n5 = [planted.get(o, e) for o, e in ((e[0], e) for e in SAME)]
    lines = [head] + [{"node": n, "log_start_offset": 0, "end_offset": 12, "snapshots": [], "entries": es}
                      for n, es in (("n4", SAME), ("n5", n5), ("n6", SAME))]
    (run_dir / "raft-log.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))


def _quorum_changes(run_dir: Path) -> None:
    """A remove-controller of the active controller and its add-controller, in the history."""
    ops = [(12 * S, "invoke", "remove-controller", {"fault": "quorum-changes", "target": "active-controller"}),
           (13 * S, "info", "remove-controller",
            {"fault": "quorum-changes", "nodes": ["n5"], "voters_before": [4, 5, 6], "voters_after": [4, 6],
             "leader_after": 6, "answer": "exit 0 on n4: Removed  KRaft controller 5", "action": "start"}),
           (20 * S, "invoke", "add-controller", {"fault": "quorum-changes"}),
           (21 * S, "info", "add-controller",
            {"fault": "quorum-changes", "nodes": ["n5"], "answers": {"n5": ["exit 1: not caught up", "exit 0 on n5: Added controller 5"]},
             "voters_after": [4, 5, 6], "leader_after": 6, "action": "stop"})]
    path = run_dir / "history.jsonl"
    lines = path.read_text().splitlines()
    index = 1 + max(json.loads(l)["index"] for l in lines if l.strip())
    extra = [json.dumps({"index": index + i, "time": t, "process": "nemesis", "type": typ, "f": f, "value": v})
             for i, (t, typ, f, v) in enumerate(ops)]
    path.write_text("\n".join(lines + extra) + "\n")


def _text(html_text: str, anchor: str) -> str:
    """The words of one section of the report, tags dropped."""
    start = html_text.index(f'id="{anchor}"')
    body = html_text[start:html_text.index("</section>", start)]
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def _checked_and_rendered(run_dir: Path) -> tuple[dict, str]:
    analyze_run(run_dir, {"engine": "reference"})
    report = render_run(run_dir)
    return json.loads((run_dir / "results.json").read_text()), report.read_text()


def test_a_planted_divergence_is_in_the_story_and_the_section(fixture_copy):
    run_dir = fixture_copy("valid")
    _raft_log(run_dir, {3: [3, 2, "other"]})       # n5 differs at offset 3, below the high watermark 10
    _quorum_changes(run_dir)
    results, page = _checked_and_rendered(run_dir)
    assert results["valid"] is False and results["stats"]["raft_log"]["divergences"] == 2
    assert 'data-verdict="invalid"' in page
    story = _text(page, "story")
    assert ("The controllers' metadata logs diverge below the committed offset 10 (high watermark "
            "(describe --status)): 2 pairs of controllers hold different entries, at offset 3; the first: "
            "n4 epoch 1, record d3 against n5 epoch 2, record other.") in story
    assert "2 divergences of the controllers' metadata logs" in _text(page, "headline")
    section = _text(page, "controller-logs")
    assert "controllers compared n4, n5, n6" in section
    assert "offsets compared 10, every offset two controllers both hold below the committed offset 10" in section
    assert "divergences 2 (offset, pair of controllers)" in section
    assert "yes: the high watermark moved from 10 to 14 between the two describes" in section
    assert "voters [4, 5, 6] when the logs were read" in section
    # the witnesses, one row per pair
    rows = re.findall(r"<tr class=\"unclean\">(.*?)</tr>", page[page.index('id="controller-log-divergences"'):], re.S)
    cells = [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows]
    assert cells == [["3", "n4", "epoch 1, record d3", "n5", "epoch 2, record other"],
                     ["3", "n5", "epoch 2, record other", "n6", "epoch 1, record d3"]]
    # the voter changes, on the report's clock (seconds since the workload's first op)
    assert "remove-controller n5 [4, 5, 6] [4, 6] n6 exit 0 on n4: Removed KRaft controller 5" in section
    assert "add-controller n5 [4, 6] [4, 5, 6] n6 exit 0 on n5: Added controller 5" in section
    assert "raft_log" not in _text(page, "statistics")     # no raw JSON of it among the statistics
    junit = (run_dir / "junit.xml").read_text()
    assert 'failures="1"' in junit


def test_logs_that_agree_give_a_valid_report_with_the_section(fixture_copy):
    run_dir = fixture_copy("valid")
    _raft_log(run_dir, {11: [11, 2, "uncommitted"]})    # above the high watermark: legal
    results, page = _checked_and_rendered(run_dir)
    assert results["valid"] is True and results["stats"]["raft_log"]["divergences"] == 0
    assert 'data-verdict="valid"' in page and 'id="story"' not in page
    assert "controllers' metadata logs n4, n5, n6 agree on all 10 committed offsets; the quorum kept committing" \
        in _text(page, "checked")
    section = _text(page, "controller-logs")
    assert "divergences none" in section and 'id="controller-log-divergences"' not in page
    assert 'id="voter-changes"' not in page


def test_a_run_without_a_raft_log_has_no_section(fixture_copy):
    run_dir = fixture_copy("valid")
    page = render_run(run_dir).read_text()
    assert 'id="controller-logs"' not in page and "controllers' metadata logs" not in _text(page, "checked")


def test_a_static_quorum_is_named_as_not_compared():
    raft = {"committed_offset": None, "committed_source": "none: no high watermark and no snapshot",
            "offsets_compared": 0, "controllers": ["n1", "n2", "n3"], "end_offsets": {"n1": 209},
            "divergences": 0, "witnesses": [], "keeps_committing": None, "voters": [],
            "errors": {"describe --status before": "static quorum: not described"}}
    view = controller_logs(raft)
    words = dict(view.lines)
    assert words["offsets compared"].startswith("none: no high watermark and no snapshot")
    assert words["the quorum kept committing"].startswith("unknown")
    assert words["not read"] == "describe --status before: static quorum: not described"
    assert agreement_line(raft) == "n1, n2, n3: not compared (the committed offset is unknown)"
    assert divergence_text(raft) is None and controller_logs(None) is None
